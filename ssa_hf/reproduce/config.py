"""The configuration of `ssa-hf reproduce`: which experiments run at which scale, which seeds are confirmatory,
and the endpoints of every claim, declared in the file (configs/experiments/reproduce_*.yaml; its header comment
says when, relative to the runs).

A config has three sections, each optional:
- `icl`: named ICL experiments (one task each), every one an ICL config (ssa_hf.icl) plus its seeds and claims;
- `masked`: BabyBERTa-style masked LMs trained by the pretraining pipeline, one per (arm, seed), probed on Zorro;
- `causal`: small decoders, one per (arm, seed), with perplexity in and out of distribution and lm-eval.

Every experiment has `seeds: {confirmatory: [...], exploratory: [...]}`: only the confirmatory seeds decide a
verdict; exploratory seeds (those already seen or published) are shown beside them, never pooled with them.
Every experiment has `claims`: name -> {claim, primary, secondary, power}; the primary endpoint carries the
declared test, the secondary endpoints are exploratory (nominal p, no verdict words).
Unknown keys and bad values raise ConfigError naming the key.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..options import ConfigError, from_dict, load_yaml

DIRECTIONS = ("lower", "higher")
SCALES = ("tiny", "cpu", "paper", "rehearsal")
LAUNCH_KEYS = ("config_file", "num_processes", "kinds")
INTERVALS = ("t", "bootstrap")
TESTS = ("wilcoxon", "t", "sign")
MULTIPLICITY = ("holm", "none")
# the claims each kind of language model can make (each has its own figures: ssa_hf.reproduce.claims)
LM_CLAIMS = {"masked": ("zorro",), "causal": ("perplexity", "lm_eval")}
# repository-relative presets of `--scale`
SCALE_FILES = {"cpu": "configs/experiments/reproduce_cpu.yaml", "paper": "configs/experiments/reproduce_paper.yaml"}


@dataclass
class Endpoint:
    """One declared comparison, treatment minus control paired by seed.

    metric: what is compared. ICL: sequence_error, individual_error (quantifier tasks), mse or log_mse_ratio
        (linear_regression: per cell log(MSE / MSE of always predicting 0), averaged over the cells; scale-free);
        masked: zorro_mean, zorro:<paradigm>; causal: nll_in, nll_out, lm_eval_mean, lm_eval:<task>.
    direction: the paper's direction of treatment minus control: lower (e.g. error, perplexity) or higher.
    test: the declared test of a primary endpoint (wilcoxon: exact signed-rank; t: paired Student-t; sign: exact
        sign test), two-sided at the config's alpha. Secondary endpoints show it as a nominal p.
    interval: t (paired Student-t interval of the mean difference) or bootstrap (paired percentile bootstrap,
        which covers too little at few seeds: 76% / 83% / 89% of nominal 95% at 3 / 5 / 10 seeds).
    label: a name for the table (default: made from the metric).
    treatment, control: the arms compared (ICL: attention scorings, default ssa minus softmax; language models:
        arms of the experiment, default the experiment's own treatment and control). Filled in by validation.
    sweep, test_set, min_value, max_value: ICL endpoints only (the meaning of ssa_hf.icl.config.PrimaryEndpoint;
        sweep null: sigma_sweep, or grid for the linear metrics).
    best_of: masked zorro_mean secondary endpoints only, instead of a treatment: two or more arms; per paradigm the
        one with the higher mean accuracy over the compared seeds stands for SSA (the paper's "best SSA per
        paradigm"). The choice is made on the figures it then compares, so it favours SSA: exploratory only.
    """

    metric: str = ""
    direction: str = "lower"
    test: str = "wilcoxon"
    interval: str = "t"
    label: str | None = None
    treatment: str | None = None
    control: str | None = None
    sweep: str | None = None
    test_set: str = "balanced"
    min_value: float = 0.0
    max_value: float | None = None
    best_of: list[str] | None = None

    def validate(self, where: str) -> None:
        if not self.metric:
            raise ConfigError(f"{where}.metric: name the metric of this endpoint")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"{where}.direction: must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.interval not in INTERVALS:
            raise ConfigError(f"{where}.interval: must be one of {INTERVALS}, got {self.interval!r}")
        if self.test not in TESTS:
            raise ConfigError(f"{where}.test: must be one of {TESTS}, got {self.test!r}")
        if self.treatment == self.control:
            raise ConfigError(f"{where}: treatment and control are both {self.treatment!r}")
        if self.max_value is not None and self.max_value < self.min_value:
            raise ConfigError(f"{where}: max_value ({self.max_value}) is below min_value ({self.min_value})")


@dataclass
class Power:
    """What a claim's confirmatory seeds were sized from: the SD of the paired differences and the effect seen on
    earlier (exploratory) seeds, or a guess; `source` says which. RESULTS.md shows the power of the declared
    seeds and the seeds needed for 80% (paired t at alpha, ssa_hf.icl.stats.seeds_for_power)."""

    sd: float = 0.0
    effect: float = 0.0
    source: str = ""

    def validate(self, where: str) -> None:
        if not self.sd > 0 or not self.effect > 0:
            raise ConfigError(f"{where}: sd and effect must be > 0 (effect: the size of the difference), "
                              f"got {self.sd}, {self.effect}")


@dataclass
class Size:
    """How big the models of a claim are and how long they trained, beside the paper's (RESULTS.md prints them
    beside the verdict): parameters and training tokens (our run; the paper's)."""

    parameters: float = 0.0
    tokens: float = 0.0
    paper_parameters: float = 0.0
    paper_tokens: float = 0.0

    def validate(self, where: str) -> None:
        if not all(v > 0 for v in (self.parameters, self.tokens, self.paper_parameters, self.paper_tokens)):
            raise ConfigError(f"{where}: parameters, tokens, paper_parameters and paper_tokens must all be > 0")


@dataclass
class Claim:
    """One claim of the paper: its words, the primary endpoint that decides its verdict, exploratory secondary
    endpoints (3-4 at most, declared rather than every cell), and the power calculation behind its seeds.

    margin: the equivalence margin of the primary difference, in its units (e.g. half the paper's effect): an
        interval inside +-margin reads "paper-sized effect excluded at this scale"; null: no paper figure to size
        it from. margin_source says how it was chosen; margin_seen: true when it was declared after the
        confirmatory seeds' results were seen (the "excluded" verdict is then exploratory on those seeds).
    floor, ceiling: per-paradigm bounds (Zorro, %): a paradigm where both arms sit at or below the floor, or at or
        above the ceiling, reads "not measurable at this scale" and is flagged.
    size: our models' parameters and training tokens beside the paper's."""

    claim: str = ""
    primary: Endpoint = field(default_factory=Endpoint)
    secondary: list[Endpoint] = field(default_factory=list)
    power: Power | None = None
    margin: float | None = None
    margin_source: str = ""
    margin_seen: bool = False
    floor: float | None = None
    ceiling: float | None = None
    size: Size | None = None


@dataclass
class Seeds:
    """confirmatory: the seeds that decide the verdicts (fresh: never run or published before the declaration);
    exploratory: seeds seen earlier, shown separately and never pooled with the confirmatory ones."""

    confirmatory: list[int] = field(default_factory=list)
    exploratory: list[int] = field(default_factory=list)

    def validate(self, where: str) -> None:
        for name in ("confirmatory", "exploratory"):
            values = getattr(self, name)
            if len(set(values)) != len(values) or not all(isinstance(s, int) and not isinstance(s, bool) for s in values):
                raise ConfigError(f"{where}.{name}: give distinct integer seeds, got {values}")
        if len(self.confirmatory) < 2:
            raise ConfigError(f"{where}.confirmatory: give at least 2 confirmatory seeds, got {self.confirmatory}")
        overlap = sorted(set(self.confirmatory) & set(self.exploratory))
        if overlap:
            raise ConfigError(f"{where}: seeds {overlap} are both confirmatory and exploratory; a seed already seen "
                              "cannot confirm anything: move it to exploratory and declare fresh confirmatory seeds")

    def all(self) -> list[int]:
        return sorted(set(self.confirmatory) | set(self.exploratory))


@dataclass
class ICLExperiment:
    """One ICL experiment: `config` is an ssa_hf.icl config mapping (`preset: quick` plus overrides; its seeds
    come from `seeds`), `seeds` its confirmatory and exploratory seeds, `claims` what its runs decide."""

    config: dict[str, Any] = field(default_factory=dict)
    seeds: Seeds = field(default_factory=Seeds)
    claims: dict[str, Claim] = field(default_factory=dict)
    description: str = ""


@dataclass
class LMExperiment:
    """Language models of one kind trained by `ssa-hf pretrain`, one run per (arm, seed).

    pretrain: a pretraining config file (configs/pretrain/*.yaml), relative to the repository or absolute.
    overrides: keys merged over it (nested mappings, as in the YAML).
    arms: arm name -> keys merged over that (e.g. {model: {attention_scoring: ssa}}); the first is the control.
    seeds: confirmatory and exploratory seeds; the same seed gives both arms the same data order and initial
        weights of the shared parameters, so the comparisons are paired by seed.
    treatment, control: the arms compared (treatment minus control).
    evaluation: settings of the evaluations (masked: zorro; causal: perplexity and lm_eval), see the YAML.
    claims: claim name (masked: zorro; causal: perplexity, lm_eval) -> its endpoints.
    description: the model and its SSA setting in words (RESULTS.md states it per row).
    """

    pretrain: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    seeds: Seeds = field(default_factory=Seeds)
    treatment: str = "ssa"
    control: str = "softmax"
    evaluation: dict[str, Any] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    description: str = ""


@dataclass
class ReproduceConfig:
    """Everything `ssa-hf reproduce` runs. scale: the name in RESULTS.md; data_dir: local data in the layout of
    ../shared/data (null: $SSA_HF_DATA_DIR or ../shared/data); level: the intervals' coverage; alpha: the level
    of the tests; multiplicity: holm (the verdicts use Holm-adjusted p over all primary endpoints) or none (each
    primary is tested alone at alpha; the Holm-adjusted p is shown beside it); workers: runs in parallel
    processes (one run each, every run an independent unit in its own folder); threads: torch threads per process;
    devices: the devices the workers take, one each (cpu, cuda:0, cuda:1, ...; null: the config's `device`);
    launch: how each language-model training starts: null in its worker's process, or {config_file: an accelerate
    config (configs/accelerate/*.yaml), num_processes: N} through `accelerate launch` over N processes (null: every
    visible GPU; a count of 1 trains in-process), kinds: [causal, masked] the kinds of model it applies to (null:
    both; the others run one per worker))."""

    scale: str = "cpu"
    description: str = ""
    data_dir: str | None = None
    level: float = 0.95
    alpha: float = 0.05
    multiplicity: str = "none"
    workers: int = 1
    threads: int | None = 1
    device: str = "auto"
    devices: list[str] | None = None
    launch: dict[str, Any] | None = None
    icl: dict[str, ICLExperiment] = field(default_factory=dict)
    masked: LMExperiment | None = None
    causal: LMExperiment | None = None

    def validate(self) -> "ReproduceConfig":
        if self.scale not in SCALES:
            raise ConfigError(f"scale: must be one of {SCALES}, got {self.scale!r}")
        if not 0 < self.level < 1 or not 0 < self.alpha < 1:
            raise ConfigError(f"level and alpha must be in (0, 1), got {self.level}, {self.alpha}")
        if self.multiplicity not in MULTIPLICITY:
            raise ConfigError(f"multiplicity: must be one of {MULTIPLICITY}, got {self.multiplicity!r}")
        if self.workers < 1 or (self.threads is not None and self.threads < 1):
            raise ConfigError(f"workers (--workers) and threads must be >= 1, got workers={self.workers}, "
                              f"threads={self.threads}")
        for device in self.devices or []:
            if not isinstance(device, str) or not (device == "cpu" or device == "cuda"
                                                   or (device.startswith("cuda:") and device[5:].isdigit())):
                raise ConfigError(f"devices (--devices): each must be cpu, cuda or cuda:N, got {device!r}")
        if self.launch is not None:
            unknown = sorted(set(self.launch) - set(LAUNCH_KEYS))
            if unknown or not self.launch.get("config_file"):
                raise ConfigError(f"launch: give {{config_file: configs/accelerate/<file>.yaml, num_processes: N}}, "
                                  f"got {self.launch}" + (f" (unknown keys {unknown})" if unknown else ""))
            count = self.launch.get("num_processes")
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
                raise ConfigError(f"launch.num_processes: a whole number >= 1 (or null: every GPU), got {count!r}")
            kinds = self.launch.get("kinds")
            if kinds is not None and (not isinstance(kinds, list) or not set(kinds) <= set(LM_CLAIMS)):
                raise ConfigError(f"launch.kinds: a list of {list(LM_CLAIMS)} (or null: both), got {kinds!r}")
        for name, experiment in self.icl.items():
            where = f"icl.{name}"
            if "seeds" in experiment.config:
                raise ConfigError(f"{where}.config.seeds: give the seeds as {where}.seeds (confirmatory, exploratory)")
            experiment.seeds.validate(f"{where}.seeds")
            if not experiment.claims:
                raise ConfigError(f"{where}.claims: declare at least one claim with its primary endpoint")
            _validate_claims(experiment.claims, where, None)
        for kind, names in LM_CLAIMS.items():
            experiment = getattr(self, kind)
            if experiment is not None:
                _validate_lm(experiment, kind, names)
        return self

    def experiments(self) -> list[tuple[str, Any]]:
        """(section name, experiment) of every experiment, ICL first."""
        out = [(f"icl.{name}", e) for name, e in self.icl.items()]
        return out + [(kind, getattr(self, kind)) for kind in LM_CLAIMS if getattr(self, kind) is not None]


def _validate_claims(claims: dict[str, Claim], where: str, allowed: tuple[str, ...] | None,
                     arms: tuple[str, str] = ("ssa", "softmax"), known_arms: list[str] | None = None) -> None:
    """Check every claim; an endpoint that names no treatment/control gets `arms` (treatment, control); with
    `known_arms` (a language-model experiment's arms) the arms an endpoint compares must be among them."""
    for name, claim in claims.items():
        if allowed is not None and name not in allowed:
            raise ConfigError(f"{where}.claims: unknown claim {name!r}; known: {list(allowed)}")
        endpoints = [(claim.primary, f"{where}.claims.{name}.primary")]
        endpoints += [(e, f"{where}.claims.{name}.secondary[{i}]") for i, e in enumerate(claim.secondary)]
        for endpoint, at in endpoints:
            endpoint.control = arms[1] if endpoint.control is None else endpoint.control
            if endpoint.best_of is not None:
                _validate_best_of(endpoint, at, known_arms)
            else:
                endpoint.treatment = arms[0] if endpoint.treatment is None else endpoint.treatment
            endpoint.validate(at)
            for arm in (endpoint.treatment, endpoint.control, *(endpoint.best_of or [])):
                if arm is None:
                    continue
                if known_arms is not None and arm not in known_arms:
                    raise ConfigError(f"{at}: arm {arm!r} (treatment/control) is not among arms {known_arms}")
        if claim.power is not None:
            claim.power.validate(f"{where}.claims.{name}.power")
        if claim.margin is not None and not claim.margin > 0:
            raise ConfigError(f"{where}.claims.{name}.margin: an equivalence margin must be > 0, got {claim.margin}")
        if claim.floor is not None and claim.ceiling is not None and not claim.floor < claim.ceiling:
            raise ConfigError(f"{where}.claims.{name}: floor ({claim.floor}) must be below ceiling ({claim.ceiling})")
        if claim.size is not None:
            claim.size.validate(f"{where}.claims.{name}.size")


def _validate_best_of(endpoint: Endpoint, at: str, known_arms: list[str] | None) -> None:
    """A best-of endpoint (Endpoint.best_of) selects its treatment after seeing the figures: never a primary."""
    if at.endswith(".primary"):
        raise ConfigError(f"{at}.best_of: a treatment chosen per paradigm after seeing the results cannot decide a "
                          "verdict; declare it as a secondary endpoint")
    if known_arms is None or endpoint.metric != "zorro_mean":
        raise ConfigError(f"{at}.best_of: only for the masked experiment's zorro_mean (per-paradigm choice), got "
                          f"metric {endpoint.metric!r}")
    if endpoint.treatment is not None:
        raise ConfigError(f"{at}: give either treatment or best_of, not both")
    if len(set(endpoint.best_of)) < 2 or len(set(endpoint.best_of)) != len(endpoint.best_of):
        raise ConfigError(f"{at}.best_of: name two or more distinct arms, got {endpoint.best_of}")
    if endpoint.control in endpoint.best_of:
        raise ConfigError(f"{at}.best_of: the control {endpoint.control!r} cannot be among them")


def _validate_lm(experiment: LMExperiment, kind: str, claims: tuple[str, ...]) -> None:
    if not experiment.pretrain:
        raise ConfigError(f"{kind}.pretrain: give a pretraining config file (configs/pretrain/*.yaml)")
    for arm in (experiment.treatment, experiment.control):
        if arm not in experiment.arms:
            raise ConfigError(f"{kind}: arm {arm!r} (treatment/control) is not among arms {list(experiment.arms)}")
    experiment.seeds.validate(f"{kind}.seeds")
    for claim in claims:
        if claim not in experiment.claims:
            raise ConfigError(f"{kind}.claims.{claim}: declare the claim's primary endpoint")
    _validate_claims(experiment.claims, kind, claims, (experiment.treatment, experiment.control), list(experiment.arms))


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {value!r}")
    return dict(value)


def _claim(value: Any, where: str) -> Claim:
    data = _mapping(value, where)
    if "primary" not in data:
        raise ConfigError(f"{where}.primary: declare the claim's primary endpoint")
    primary = from_dict(Endpoint, _mapping(data.pop("primary"), f"{where}.primary"), f"{where}.primary")
    secondary = [from_dict(Endpoint, _mapping(e, f"{where}.secondary[{i}]"), f"{where}.secondary[{i}]")
                 for i, e in enumerate(data.pop("secondary", None) or [])]
    power = data.pop("power", None)
    power = None if power is None else from_dict(Power, _mapping(power, f"{where}.power"), f"{where}.power")
    size = data.pop("size", None)
    size = None if size is None else from_dict(Size, _mapping(size, f"{where}.size"), f"{where}.size")
    claim = from_dict(Claim, data, where)
    claim.primary, claim.secondary, claim.power, claim.size = primary, secondary, power, size
    return claim


def _experiment(cls, value: Any, where: str):
    data = _mapping(value, where)
    claims = {k: _claim(v, f"{where}.claims.{k}") for k, v in _mapping(data.pop("claims", None) or {}, f"{where}.claims").items()}
    seeds = data.pop("seeds", None)
    if not isinstance(seeds, dict):
        raise ConfigError(f"{where}.seeds: give {{confirmatory: [...], exploratory: [...]}} (the exploratory ones: "
                          f"seeds already seen), got {seeds!r}")
    experiment = from_dict(cls, data, where)
    experiment.claims, experiment.seeds = claims, from_dict(Seeds, seeds, f"{where}.seeds")
    return experiment


def config_from_dict(data: dict[str, Any]) -> ReproduceConfig:
    """A validated ReproduceConfig from a mapping (the YAML's content)."""
    data = copy.deepcopy(data)
    icl = {name: _experiment(ICLExperiment, value, f"icl.{name}")
           for name, value in _mapping(data.pop("icl", None) or {}, "icl").items()}
    lm = {kind: _experiment(LMExperiment, data.pop(kind), kind) for kind in LM_CLAIMS if data.get(kind) is not None}
    for kind in LM_CLAIMS:
        data.pop(kind, None)
    config = from_dict(ReproduceConfig, data)
    config.icl, config.masked, config.causal = icl, lm.get("masked"), lm.get("causal")
    return config.validate()


def config_to_dict(config: ReproduceConfig) -> dict[str, Any]:
    """The mapping `config_from_dict` reads back into the same config (what --emit-commands writes)."""
    from dataclasses import asdict

    data = asdict(config)
    for kind in LM_CLAIMS:
        if data[kind] is None:
            data.pop(kind)
    return data


def load_config(path: str | Path) -> ReproduceConfig:
    """A ReproduceConfig from a YAML file (`base: FILE` merges another file under it)."""
    try:
        return config_from_dict(load_yaml(path))
    except (ConfigError, ValueError, TypeError) as error:
        message = str(error)  # (load_yaml's own errors name the file already)
        raise ConfigError(message if message.startswith(str(path)) else f"{path}: {message}") from None


def scale_config_path(scale: str) -> Path:
    """The shipped config of a scale (configs/experiments/, a copy in the working directory first)."""
    from ..resources import config_file

    if scale not in SCALE_FILES:
        raise ConfigError(f"--scale: must be one of {list(SCALE_FILES)}, got {scale!r} (or give --config FILE)")
    return config_file(SCALE_FILES[scale])
