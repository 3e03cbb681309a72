"""The configuration of `ssa-hf reproduce`: which experiments run at which scale, and the primary endpoint of
every claim, declared in the file before anything runs (configs/experiments/reproduce_*.yaml).

A config has three sections, each optional:
- `icl`: named ICL experiments (one task each), every one an ICL config (ssa_hf.icl) whose `stats.primary` is the
  claim's primary endpoint, plus `secondary` endpoints reported beside it;
- `masked`: BabyBERTa-style masked LMs trained by the pretraining pipeline, one per (arm, seed), probed on Zorro;
- `causal`: small decoders, one per (arm, seed), with perplexity in and out of distribution and lm-eval.
Unknown keys and bad values raise ConfigError naming the key.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..options import ConfigError, from_dict, load_yaml

DIRECTIONS = ("lower", "higher")
SCALES = ("tiny", "cpu", "paper")
INTERVALS = ("t", "bootstrap")
# repository-relative presets of `--scale`
SCALE_FILES = {"cpu": "configs/experiments/reproduce_cpu.yaml", "paper": "configs/experiments/reproduce_paper.yaml"}


@dataclass
class Endpoint:
    """One declared comparison, treatment minus control paired by seed.

    metric: what is compared (per section: zorro_mean, zorro:<paradigm>; nll_in, nll_out; lm_eval_mean,
        lm_eval:<task>; for ICL secondary endpoints the fields of ssa_hf.icl's PrimaryEndpoint below).
    direction: the paper's direction of treatment minus control: lower (e.g. error, perplexity) or higher.
    interval: t (Student-t interval of the mean paired difference; honest with 3 seeds) or bootstrap (paired
        percentile bootstrap, the ICL report's).
    margin: optional smallest difference that matters: an interval inside (-margin, margin) reads "not reproduced"
        (an effect of the paper's kind, if any, is smaller than that). null: no such verdict.
    label: a name for the table (default: the metric).
    """

    metric: str = ""
    direction: str = "lower"
    interval: str = "t"
    margin: float | None = None
    label: str | None = None
    # ICL secondary endpoints only (same meaning as ssa_hf.icl.config.PrimaryEndpoint)
    treatment: str = "ssa"
    control: str = "softmax"
    sweep: str | None = None
    test_set: str = "balanced"
    min_value: float = 0.0
    max_value: float | None = None

    def validate(self, where: str) -> None:
        if not self.metric:
            raise ConfigError(f"{where}.metric: name the metric of this endpoint")
        if self.direction not in DIRECTIONS:
            raise ConfigError(f"{where}.direction: must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.interval not in INTERVALS:
            raise ConfigError(f"{where}.interval: must be one of {INTERVALS}, got {self.interval!r}")
        if self.margin is not None and self.margin <= 0:
            raise ConfigError(f"{where}.margin: must be > 0 or null, got {self.margin}")
        if self.treatment == self.control:
            raise ConfigError(f"{where}: treatment and control are both {self.treatment!r}")


@dataclass
class ICLExperiment:
    """One ICL experiment: `config` is an ssa_hf.icl config mapping (`preset: quick` plus overrides) whose
    stats.primary is the claim's primary endpoint; `direction` the paper's direction of its treatment minus
    control; `secondary` further endpoints (exploratory)."""

    config: dict[str, Any] = field(default_factory=dict)
    direction: str = "lower"
    claim: str = ""
    secondary: list[Endpoint] = field(default_factory=list)


@dataclass
class LMExperiment:
    """Language models of one kind trained by `ssa-hf pretrain`, one run per (arm, seed).

    pretrain: a pretraining config file (configs/pretrain/*.yaml), relative to the repository or absolute.
    overrides: keys merged over it (nested mappings, as in the YAML).
    arms: arm name -> keys merged over that (e.g. {model: {attention_scoring: ssa}}); the first is the control.
    seeds: one run per arm and seed; the same seed gives both arms the same data order and initial weights of the
        shared parameters, so the comparisons are paired by seed.
    treatment, control: the arms compared (treatment minus control).
    evaluation: settings of the evaluations (masked: zorro; causal: perplexity and lm_eval), see the YAML.
    primary: the claim's primary endpoint per claim name (masked: zorro; causal: perplexity, lm_eval).
    secondary: further endpoints per claim name.
    """

    pretrain: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    treatment: str = "ssa"
    control: str = "softmax"
    evaluation: dict[str, Any] = field(default_factory=dict)
    primary: dict[str, Endpoint] = field(default_factory=dict)
    secondary: dict[str, list[Endpoint]] = field(default_factory=dict)


@dataclass
class ReproduceConfig:
    """Everything `ssa-hf reproduce` runs. scale: the name in RESULTS.md; data_dir: local data in the layout of
    ../shared/data (null: $SSA_HF_DATA_DIR or ../shared/data); level: the intervals' coverage; alpha: the level
    of the tests; workers: runs in parallel processes (CPU); threads: torch threads per process."""

    scale: str = "cpu"
    description: str = ""
    data_dir: str | None = None
    level: float = 0.95
    alpha: float = 0.05
    workers: int = 1
    threads: int | None = 1
    device: str = "auto"
    icl: dict[str, ICLExperiment] = field(default_factory=dict)
    masked: LMExperiment | None = None
    causal: LMExperiment | None = None

    def validate(self) -> "ReproduceConfig":
        if self.scale not in SCALES:
            raise ConfigError(f"scale: must be one of {SCALES}, got {self.scale!r}")
        if not 0 < self.level < 1 or not 0 < self.alpha < 1:
            raise ConfigError(f"level and alpha must be in (0, 1), got {self.level}, {self.alpha}")
        if self.workers < 1 or (self.threads is not None and self.threads < 1):
            raise ConfigError("workers and threads must be >= 1")
        for name, experiment in self.icl.items():
            if experiment.direction not in DIRECTIONS:
                raise ConfigError(f"icl.{name}.direction: must be one of {DIRECTIONS}, got {experiment.direction!r}")
            if not (experiment.config.get("stats") or {}).get("primary"):
                raise ConfigError(f"icl.{name}.config.stats.primary: declare the claim's primary endpoint")
            for i, endpoint in enumerate(experiment.secondary):
                endpoint.validate(f"icl.{name}.secondary[{i}]")
        for kind, claims in (("masked", ("zorro",)), ("causal", ("perplexity", "lm_eval"))):
            experiment = getattr(self, kind)
            if experiment is not None:
                _validate_lm(experiment, kind, claims)
        return self


def _validate_lm(experiment: LMExperiment, kind: str, claims: tuple[str, ...]) -> None:
    if not experiment.pretrain:
        raise ConfigError(f"{kind}.pretrain: give a pretraining config file (configs/pretrain/*.yaml)")
    for arm in (experiment.treatment, experiment.control):
        if arm not in experiment.arms:
            raise ConfigError(f"{kind}: arm {arm!r} (treatment/control) is not among arms {list(experiment.arms)}")
    if not experiment.seeds or len(set(experiment.seeds)) != len(experiment.seeds):
        raise ConfigError(f"{kind}.seeds: give distinct seeds, got {experiment.seeds}")
    for claim in claims:
        if claim not in experiment.primary:
            raise ConfigError(f"{kind}.primary.{claim}: declare the claim's primary endpoint")
    for claim, endpoint in experiment.primary.items():
        if claim not in claims:
            raise ConfigError(f"{kind}.primary: unknown claim {claim!r}; known: {list(claims)}")
        endpoint.validate(f"{kind}.primary.{claim}")
    for claim, endpoints in experiment.secondary.items():
        if claim not in claims:
            raise ConfigError(f"{kind}.secondary: unknown claim {claim!r}; known: {list(claims)}")
        for i, endpoint in enumerate(endpoints):
            endpoint.validate(f"{kind}.secondary.{claim}[{i}]")


def _endpoint(value: Any, where: str) -> Endpoint:
    return from_dict(Endpoint, value, where) if isinstance(value, dict) else _not_mapping(where, value)


def _not_mapping(where: str, value: Any):
    raise ConfigError(f"{where}: expected a mapping, got {value!r}")


def _lm_experiment(data: dict[str, Any], where: str) -> LMExperiment:
    data = dict(data)
    primary = {k: _endpoint(v, f"{where}.primary.{k}") for k, v in (data.pop("primary", None) or {}).items()}
    secondary = {k: [_endpoint(e, f"{where}.secondary.{k}[{i}]") for i, e in enumerate(v or [])]
                 for k, v in (data.pop("secondary", None) or {}).items()}
    experiment = from_dict(LMExperiment, data, where)
    experiment.primary, experiment.secondary = primary, secondary
    return experiment


def config_from_dict(data: dict[str, Any]) -> ReproduceConfig:
    """A validated ReproduceConfig from a mapping (the YAML's content)."""
    data = copy.deepcopy(data)
    icl = {}
    for name, value in (data.pop("icl", None) or {}).items():
        if not isinstance(value, dict):
            _not_mapping(f"icl.{name}", value)
        value = dict(value)
        secondary = [_endpoint(e, f"icl.{name}.secondary[{i}]") for i, e in enumerate(value.pop("secondary", None) or [])]
        icl[name] = from_dict(ICLExperiment, value, f"icl.{name}")
        icl[name].secondary = secondary
    lm = {kind: _lm_experiment(data.pop(kind), kind) for kind in ("masked", "causal") if data.get(kind) is not None}
    data.pop("masked", None), data.pop("causal", None)
    config = from_dict(ReproduceConfig, data)
    config.icl, config.masked, config.causal = icl, lm.get("masked"), lm.get("causal")
    return config.validate()


def load_config(path: str | Path) -> ReproduceConfig:
    """A ReproduceConfig from a YAML file (`base: FILE` merges another file under it)."""
    try:
        return config_from_dict(load_yaml(path))
    except (ConfigError, ValueError, TypeError) as error:
        raise ConfigError(f"{path}: {error}") from None


def scale_config_path(scale: str) -> Path:
    """The shipped config of a scale (configs/experiments/, a copy in the working directory first)."""
    from ..resources import config_file

    if scale not in SCALE_FILES:
        raise ConfigError(f"--scale: must be one of {list(SCALE_FILES)}, got {scale!r} (or give --config FILE)")
    return config_file(SCALE_FILES[scale])
