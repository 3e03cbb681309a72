"""The endpoints an ICL run declares and tests (its primary and secondary comparisons), and how arms are paired.
Imported by `ssa_hf.icl.config`, which re-exports every name; like it, this module imports no torch."""

from __future__ import annotations

from dataclasses import dataclass, field


def check_scoring(names, where: str) -> None:
    from ..models.parameters import closest_name
    from ..models.scoring import ALL_SCORING_FUNCTIONS

    for name in names:
        if name not in ALL_SCORING_FUNCTIONS:
            raise ValueError(f"{where}: unknown scoring function {name!r}{closest_name(name, ALL_SCORING_FUNCTIONS)} "
                             f"Choose from {list(ALL_SCORING_FUNCTIONS)}")


SWEEPS = ("sigma_sweep", "length_sweep", "grid")
TEST_SETS = ("standard", "balanced")
ENDPOINT_METRICS = ("sequence_error", "individual_error", "mse")
TESTS = ("wilcoxon", "sign")


@dataclass
class PrimaryEndpoint:
    """The one comparison declared as the test, so that nobody picks the best cell afterwards (a test on seeds seen
    before it was declared is exploratory: StatsConfig.seen_seeds).

    Per seed: the mean of `metric` over the cells of `sweep` (on `test_set`) whose value lies in [min_value,
    max_value]; then `treatment` minus `control`, paired by seed, tested with `test` at level `alpha`.
    For linear_regression (`sweep: grid`, `metric: mse`) the cells are those with sigma_x in the range.

    task: the task compared.
    treatment: the scoring function tested.
    control: the scoring function it is compared with.
    sweep: sigma_sweep, length_sweep (quantifier tasks) or grid (linear_regression).
    test_set: standard or balanced.
    metric: sequence_error, individual_error (quantifier tasks) or mse (linear_regression).
    min_value: the lowest sweep value of the cells averaged.
    max_value: the highest (null: no bound).
    test: wilcoxon or sign (exact, two-sided).
    alpha: level of the test.
    """

    task: str = "every"
    treatment: str = "ssa"
    control: str = "softmax"
    sweep: str = "sigma_sweep"
    test_set: str = "balanced"
    metric: str = "sequence_error"
    min_value: float = 12.0
    max_value: float | None = None
    test: str = "wilcoxon"
    alpha: float = 0.05

    def validate(self) -> None:
        from .registry import get_task

        task = get_task(self.task)
        self.task = task.name
        check_scoring([self.treatment], "stats.primary.treatment")
        check_scoring([self.control], "stats.primary.control")
        if self.sweep not in SWEEPS or self.metric not in ENDPOINT_METRICS or self.test not in TESTS:
            raise ValueError(f"stats.primary: sweep must be one of {SWEEPS}, metric one of {ENDPOINT_METRICS}, test one of "
                             f"{TESTS}; got {self.sweep!r}, {self.metric!r}, {self.test!r}")
        if self.sweep not in task.sweeps or self.metric not in task.endpoint_metrics:
            raise ValueError(f"stats.primary: task {task.name!r} has sweeps {list(task.sweeps)} and metrics "
                             f"{list(task.endpoint_metrics)}; got sweep {self.sweep!r} and metric {self.metric!r}")
        if self.test_set not in TEST_SETS:
            raise ValueError(f"stats.primary.test_set must be one of {TEST_SETS}, got {self.test_set!r}")
        if self.treatment == self.control:
            raise ValueError(f"stats.primary: treatment and control are both {self.treatment!r}")
        if self.max_value is not None and self.max_value < self.min_value:
            raise ValueError(f"stats.primary: max_value ({self.max_value}) is below min_value ({self.min_value})")
        if not 0 < self.alpha < 1:
            raise ValueError(f"stats.primary.alpha must be in (0, 1), got {self.alpha}")

    def describe(self) -> str:
        what = {"sequence_error": "sequence error", "individual_error": "individual error", "mse": "MSE"}[self.metric]
        axis = {"sigma_sweep": "sigma", "length_sweep": "points", "grid": "sigma_x"}[self.sweep]
        span = f"{axis} >= {self.min_value:g}" + (f" and <= {self.max_value:g}" if self.max_value is not None else "")
        where = f" on the {self.test_set} set" if self.sweep != "grid" else ""
        return f"mean {what}{where} over {span} (task `{self.task}`), {self.treatment} minus {self.control}"


@dataclass
class StatsConfig:
    """How scoring functions are compared: paired by seed (see `ssa_hf.icl.stats`).

    `comparisons`: pairs [a, b] reported as a - b; None: every pair of the scoring functions run, `ssa` first and
    `softmax` last: ssa - softmax, ssa - temperature, temperature - softmax.
    The per-cell comparisons (every cell of every sweep) are descriptive: nominal p-values, no correction and no
    verdict; the declared `secondary` endpoints are the exploratory tests.

    primary: the declared primary endpoint (null: none).
    secondary: a few declared secondary endpoints (same fields as primary): reported as exploratory, nominal p.
    seen_seeds: seeds whose results had been seen when the primary endpoint was chosen: a test that uses any of
        them is exploratory, whatever its p (the quick preset's seeds 0-9; fresh seeds confirm it:
        configs/experiments/reproduce_cpu.yaml).
    comparisons: pairs [a, b] reported as a - b (null: every pair, ssa first, softmax last).
    level: level of the paired bootstrap intervals.
    bootstrap_resamples: resamples of the bootstrap.
    bootstrap_seed: seed of the bootstrap.
    """

    primary: PrimaryEndpoint | None = field(default_factory=PrimaryEndpoint)
    secondary: list[PrimaryEndpoint] = field(default_factory=list)
    seen_seeds: list[int] = field(default_factory=list)
    comparisons: list[list[str]] | None = None
    level: float = 0.95
    bootstrap_resamples: int = 10_000
    bootstrap_seed: int = 0

    def validate(self, scoring: list[str], tasks: list[str]) -> None:
        if not 0 < self.level < 1:
            raise ValueError(f"stats.level must be in (0, 1), got {self.level}")
        if self.bootstrap_resamples < 100:
            raise ValueError(f"stats.bootstrap_resamples must be >= 100, got {self.bootstrap_resamples}")
        for pair in self.comparisons or []:
            if len(pair) != 2 or pair[0] == pair[1] or any(name not in scoring for name in pair):
                raise ValueError(f"stats.comparisons: {pair} must name two different scoring functions of {scoring}")
        if self.primary is not None:
            self.primary.validate()
        for endpoint in self.secondary:
            endpoint.validate()

    def primary_applies(self, scoring: list[str], tasks: list[str]) -> str | None:
        """None when the declared primary endpoint can be evaluated in this run, else why not."""
        primary = self.primary
        if primary is None:
            return "no primary endpoint was declared (stats.primary: null)"
        missing = [n for n in (primary.treatment, primary.control) if n not in scoring]
        if missing or primary.task not in tasks:
            return (f"the declared primary endpoint compares {primary.treatment} with {primary.control} on `{primary.task}`, "
                    f"but this run has scoring {scoring} and tasks {tasks}")
        return None

    def pairs(self, scoring: list[str]) -> list[tuple[str, str]]:
        if self.comparisons is not None:
            return [(a, b) for a, b in self.comparisons]
        # ssa first, softmax (the reference) last, the others in the given order: a - b reads "a against b";
        # comparisons with softmax come first
        order = sorted(scoring, key=lambda name: 0 if name == "ssa" else 2 if name == "softmax" else 1)
        pairs = [(order[i], order[j]) for i in range(len(order)) for j in range(i + 1, len(order))]
        return sorted(pairs, key=lambda pair: (order.index(pair[0]), pair[1] != "softmax"))
