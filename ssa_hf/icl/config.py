"""Configuration of the ICL experiments: dataclasses, the `quick` and `paper` presets, YAML loading.

`ICLConfig` holds everything a pipeline run needs; `configs/icl/quick.yaml` and `configs/icl/paper.yaml` spell out
the presets (a test keeps them equal to `PRESETS`). Unknown keys and bad values raise ValueError naming the field.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..models.scoring import ALL_SCORING_FUNCTIONS
from .model import ICLModelConfig
from .tasks import Curriculum, check_task, is_quantifier


@dataclass
class TrainConfig:
    steps: int = 300
    batch_size: int = 64
    lr: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    # inputs of the training prompts: x ~ N(0, sigma); for `linear` also a, b ~ N(0, sigma_ab)
    sigma: float = 1.0
    sigma_ab: float = 1.0
    curriculum: Curriculum = field(default_factory=Curriculum)
    checkpoint_every: int = 100
    log_every: int = 10
    mixed_precision: str = "no"  # "no", "fp16", "bf16" (accelerate)

    def validate(self) -> None:
        for name in ("steps", "batch_size", "checkpoint_every", "log_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"train.{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"train.lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0 or self.weight_decay < 0:
            raise ValueError("train.warmup_steps and train.weight_decay must be >= 0")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"train.grad_clip must be > 0 or null, got {self.grad_clip}")
        if not (self.sigma > 0 and self.sigma_ab > 0):
            raise ValueError("train.sigma and train.sigma_ab must be > 0")
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise ValueError(f"train.mixed_precision must be 'no', 'fp16' or 'bf16', got {self.mixed_precision!r}")
        try:
            self.curriculum.validate()
        except ValueError as error:
            raise ValueError(f"train.{error}") from None


LINEAR_PROTOCOLS = ("standard", "paper")


@dataclass
class EvalConfig:
    # quantifier tasks: sequence and individual error over a sigma sweep (at `length` points) and over a length
    # sweep (at `length_sweep_sigma`), on the standard and on the balanced test set
    sigmas: list[float] = field(default_factory=lambda: [1, 2, 4, 8, 16, 29])
    lengths: list[int] = field(default_factory=lambda: [10, 21, 50, 100, 200])
    length: int | None = None  # points of the sigma sweep; None: the curriculum's last number of points
    length_sweep_sigma: float = 1.0
    balanced: bool = True
    probe: bool = True
    # linear task: mean squared error over sigma_x x sigma_ab
    linear_sigmas_x: list[float] = field(default_factory=lambda: [1, 2, 5, 10])
    linear_sigmas_ab: list[float] = field(default_factory=lambda: [1, 2, 5, 10])
    # "standard": `batches` x `batch_size` prompts per cell, one (a, b) each, at `length` points; "paper": the
    # authors' protocol: `linear_functions` functions applied to the same `batch_size` x-sequences of
    # `linear_points` points per cell (100 x 64 prompts of 9 points)
    linear_protocol: str = "standard"
    linear_points: int = 9
    linear_functions: int = 100
    # every cell: `batches` batches of `batch_size` prompts, from a generator seeded by `seed` and the cell, so
    # that every model (and the baselines) sees the same prompts
    batches: int = 4
    batch_size: int = 64
    seed: int = 1234
    # predictions from this (1-based) position on count for the sequence error and the linear MSE
    from_position: int = 4
    # in-distribution check (sigma 1, `length` points): every run must reach these
    max_individual_error: float = 0.02
    max_balanced_sequence_error: float = 0.15

    def validate(self) -> None:
        if not self.sigmas or not self.lengths:
            raise ValueError("eval.sigmas and eval.lengths must not be empty")
        for name in ("sigmas", "linear_sigmas_x", "linear_sigmas_ab"):
            values = getattr(self, name)
            if not values or any(not float(v) > 0 for v in values):
                raise ValueError(f"eval.{name} must be a non-empty list of numbers > 0, got {values}")
        if any(int(v) < 1 for v in self.lengths):
            raise ValueError(f"eval.lengths must be >= 1, got {self.lengths}")
        if self.length is not None and self.length < 1:
            raise ValueError(f"eval.length must be >= 1 or null, got {self.length}")
        if self.batches < 1 or self.batch_size < 1 or self.from_position < 1:
            raise ValueError("eval.batches, eval.batch_size and eval.from_position must be >= 1")
        if self.linear_protocol not in LINEAR_PROTOCOLS:
            raise ValueError(f"eval.linear_protocol must be one of {LINEAR_PROTOCOLS}, got {self.linear_protocol!r}")
        if self.linear_points < 1 or self.linear_functions < 1:
            raise ValueError("eval.linear_points and eval.linear_functions must be >= 1")
        if not self.length_sweep_sigma > 0:
            raise ValueError(f"eval.length_sweep_sigma must be > 0, got {self.length_sweep_sigma}")


SWEEPS = ("sigma_sweep", "length_sweep", "grid")
TEST_SETS = ("standard", "balanced")
ENDPOINT_METRICS = ("sequence_error", "individual_error", "mse")
TESTS = ("wilcoxon", "sign")


@dataclass
class PrimaryEndpoint:
    """The one comparison declared before the run, so that nobody picks the best cell afterwards.

    Per seed: the mean of `metric` over the cells of `sweep` (on `test_set`) whose value lies in [min_value,
    max_value]; then `treatment` minus `control`, paired by seed, tested with `test` at level `alpha`.
    For the linear task (`sweep: grid`, `metric: mse`) the cells are those with sigma_x in the range.
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
        check_task(self.task)
        if self.sweep not in SWEEPS or self.metric not in ENDPOINT_METRICS or self.test not in TESTS:
            raise ValueError(f"stats.primary: sweep must be one of {SWEEPS}, metric one of {ENDPOINT_METRICS}, test one of "
                             f"{TESTS}; got {self.sweep!r}, {self.metric!r}, {self.test!r}")
        if (self.sweep == "grid") != (self.metric == "mse") or (self.sweep == "grid") == is_quantifier(self.task):
            raise ValueError("stats.primary: the linear task has sweep 'grid' and metric 'mse'; the quantifier tasks a "
                             "sigma_sweep or length_sweep and an error metric")
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
    Secondary comparisons (every cell of every sweep) are exploratory; their Holm-adjusted p-values control the
    family-wise error over all cells and comparisons of a task.
    """

    primary: PrimaryEndpoint | None = field(default_factory=PrimaryEndpoint)
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


@dataclass
class ICLConfig:
    """One experiment: every (task, scoring function, seed) is a run of the same model, training and evaluation."""

    name: str = "quick"
    tasks: list[str] = field(default_factory=lambda: ["every"])
    scoring: list[str] = field(default_factory=lambda: ["softmax", "ssa"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    model: ICLModelConfig = field(default_factory=ICLModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    device: str = "auto"  # "auto" (CUDA when available), "cpu", "cuda"
    threads: int | None = None  # torch CPU threads per run (None: torch's default)
    workers: int = 1  # runs trained in parallel processes (CPU)

    def validate(self) -> "ICLConfig":
        if not self.tasks or not self.scoring or not self.seeds:
            raise ValueError("tasks, scoring and seeds must each name at least one entry")
        for task in self.tasks:
            check_task(task)
        for name in self.scoring:
            if name not in ALL_SCORING_FUNCTIONS:
                raise ValueError(f"scoring: unknown scoring function {name!r}; choose from {list(ALL_SCORING_FUNCTIONS)}")
        for values, what in ((self.tasks, "tasks"), (self.scoring, "scoring"), (self.seeds, "seeds")):
            if len(set(values)) != len(values):
                raise ValueError(f"{what} has duplicates: {values}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 or null, got {self.threads}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        self.model.validate()
        self.train.validate()
        self.eval.validate()
        self.stats.validate(self.scoring, self.tasks)
        if self.stats.primary_applies(self.scoring, self.tasks) is None:
            self._check_primary_cells()
        longest = max(self.eval.lengths + [self.eval_length, self.train.curriculum.end, self.eval.linear_points])
        if longest > self.model.max_points:
            raise ValueError(f"model.max_points ({self.model.max_points}) is below the longest prompt ({longest} points)")
        return self

    def _check_primary_cells(self) -> None:
        primary = self.stats.primary
        values = {"sigma_sweep": self.eval.sigmas, "length_sweep": self.eval.lengths, "grid": self.eval.linear_sigmas_x}[primary.sweep]
        inside = [v for v in values if v >= primary.min_value and (primary.max_value is None or v <= primary.max_value)]
        if not inside:
            raise ValueError(f"stats.primary selects no cell: no value of the {primary.sweep} {list(values)} lies in "
                             f"[{primary.min_value}, {primary.max_value}]")
        if primary.test_set == "balanced" and primary.sweep != "grid" and not self.eval.balanced:
            raise ValueError("stats.primary uses the balanced test set but eval.balanced is false")

    @property
    def eval_length(self) -> int:
        return self.eval.length if self.eval.length is not None else self.train.curriculum.end

    def to_dict(self) -> dict:
        return asdict(self)


# A 2-layer, 4-head, width-64 decoder learns `every` within a few hundred steps on a CPU; the paper's curriculum
# (11 -> 41 points, +2 every 2,000 of 500k steps) is scaled to 11 -> 21 points, +2 every 20 of 150 steps.
# Two worker processes of one thread each use both cores of a 2-core machine (the tiny model gains little from
# intra-op threads). 10 seeds per arm: with n paired seeds the smallest two-sided p of an exact sign or
# signed-rank test is 2 / 2^n (0.0625 for 5 seeds, 0.002 for 10). `temperature` is the temperature-matched softmax
# control: its t defaults to 1 / (n0 b0) of the SSA arm's initial values (2/3 here).
QUICK = ICLConfig(
    name="quick",
    tasks=["every"],
    scoring=["softmax", "ssa", "temperature"],
    seeds=list(range(10)),
    model=ICLModelConfig(layers=2, heads=4, width=64),
    train=TrainConfig(steps=150, lr=1e-3, warmup_steps=20, curriculum=Curriculum(start=11, end=21, increment=2, interval=20)),
    eval=EvalConfig(sigmas=[1, 2, 4, 8, 12, 16, 20, 24, 29], lengths=[10, 21, 50, 100, 200], batches=1),
    stats=StatsConfig(primary=PrimaryEndpoint(task="every", treatment="ssa", control="softmax", sweep="sigma_sweep",
                                              test_set="balanced", metric="sequence_error", min_value=12)),
    threads=1,
    workers=2,
)

# The authors' SSA setting for the ICL models (their nanoGPT code; configs/models/icl_paper.yaml holds the same
# values, a test keeps them equal): one (b, n) pair per layer, b = exp(a), n = exp(r), a = 1.0 and r = 0.4 at
# initialisation, both learned, n >= 1 not enforced.
AUTHORS_ICL_SSA = {
    "ssa_granularity": "layer",
    "ssa_parametrization": "exp",
    "ssa_b_init": 2.718281828459045,
    "ssa_n_init": 1.4918246976412703,
    "ssa_learn_b": True,
    "ssa_learn_n": True,
}

PAPER = ICLConfig(
    name="paper",
    tasks=["every", "some", "linear"],
    scoring=["softmax", "ssa"],
    seeds=list(range(10)),
    model=ICLModelConfig(layers=12, heads=8, width=256, scoring_options=dict(AUTHORS_ICL_SSA), backbone="gpt2"),
    train=TrainConfig(
        steps=500_000,
        lr=1e-4,
        warmup_steps=0,
        grad_clip=None,
        curriculum=Curriculum(start=11, end=41, increment=2, interval=2000),
        checkpoint_every=5000,
        log_every=100,
    ),
    eval=EvalConfig(
        sigmas=list(range(1, 30)),
        lengths=list(range(10, 201, 10)),
        linear_sigmas_x=list(range(1, 11)),
        linear_sigmas_ab=list(range(1, 11)),
        linear_protocol="paper",
        batches=100,
    ),
    stats=StatsConfig(primary=PrimaryEndpoint(task="every", treatment="ssa", control="softmax", sweep="sigma_sweep",
                                              test_set="balanced", metric="sequence_error", min_value=12)),
)

PRESETS = {"quick": QUICK, "paper": PAPER}


def preset(name: str) -> ICLConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown ICL preset {name!r}; choose from {list(PRESETS)}")
    return copy.deepcopy(PRESETS[name])


def _from_dict(cls, data: dict, where: str):
    if not isinstance(data, dict):
        raise ValueError(f"{where or 'config'}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where or 'config'}: unknown field(s) {unknown}; known: {sorted(fields)}")
    nested = {"model": ICLModelConfig, "train": TrainConfig, "eval": EvalConfig, "curriculum": Curriculum,
              "stats": StatsConfig, "primary": PrimaryEndpoint}
    values = {}
    for key, value in data.items():
        if key in nested and isinstance(value, dict) and key != "scoring_options":
            values[key] = _from_dict(nested[key], value, f"{where}.{key}" if where else key)
        else:
            values[key] = value
    return cls(**values)


def config_from_dict(data: dict, base: ICLConfig | None = None) -> ICLConfig:
    """An ICLConfig from a (possibly partial) mapping, on top of `base` (a preset) or of the defaults.

    A top-level `preset: NAME` key picks the base.
    """
    data = dict(data)
    if "preset" in data:
        base = preset(data.pop("preset"))
    merged = _merge(asdict(base) if base is not None else asdict(ICLConfig()), data)
    return _from_dict(ICLConfig, merged, "").validate()


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "scoring_options":
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(path: str | Path) -> ICLConfig:
    """Load a YAML file (see configs/icl/*.yaml)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ICL config file not found: {path}")
    data: Any = yaml.safe_load(path.read_text()) or {}
    try:
        return config_from_dict(data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None
