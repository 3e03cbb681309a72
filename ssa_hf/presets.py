"""Model presets: YAML files in `configs/models/` that name a model family and its config fields.

A preset file looks like::

    family: ssa_llama            # a family of ssa_hf/models/families.py: ssa_llama, ssa_bert, ssa_gpt2
    description: one line shown by `ssa-hf params`
    config:                      # any field of the family's config class
      hidden_size: 768
      ...

`load_model_config("decoder_114m", attention_scoring="softmax")` returns the config with the overrides applied,
`build_model(config, task)` the model, `count_parameters(config)` its parameter count without allocating weights.
The folder is `configs/` as shipped with the package (resources.py), or `$SSA_HF_CONFIGS_DIR`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from .models.families import FAMILY_SPECS, family_of_config
from .resources import CONFIGS_ENV, configs_dir


# read from the family table (ssa_hf/models/families.py)
FAMILIES: dict[str, type] = {spec.name: spec.config_class for spec in FAMILY_SPECS}
MODEL_CLASSES: dict[str, dict[str, type]] = {spec.name: dict(spec.model_classes) for spec in FAMILY_SPECS}
DEFAULT_TASK = {spec.name: spec.default_task for spec in FAMILY_SPECS}


def presets_dir() -> Path:
    return configs_dir() / "models"


def list_presets() -> list[str]:
    """Names of the presets in `configs/models/` (file stems)."""
    folder = presets_dir()
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


@dataclass
class Preset:
    """One preset file: its name, family, description and config fields."""

    name: str
    path: Path
    family: str
    description: str
    config: dict[str, Any]

    @property
    def config_class(self) -> type:
        return FAMILIES[self.family]


def resolve_preset_path(name_or_path: str | os.PathLike) -> Path:
    text = str(name_or_path)
    candidate = Path(text).expanduser()
    if candidate.suffix in (".yaml", ".yml") or os.sep in text or candidate.is_file():
        if not candidate.is_file():
            raise FileNotFoundError(f"preset file {text!r} does not exist")
        return candidate
    path = presets_dir() / f"{text}.yaml"
    if not path.is_file():
        from .models.scoring import closest_name

        raise ValueError(
            f"unknown model preset {text!r}{closest_name(text, list_presets())} "
            f"Choose from {list_presets()} or give a YAML file path"
        )
    return path


def load_preset(name_or_path: str | os.PathLike) -> Preset:
    """Read and check a preset file (by name in configs/models/, or by path)."""
    path = resolve_preset_path(name_or_path)
    from .options import yaml_error_line
    from .regular_files import read_text

    try:
        data = yaml.safe_load(read_text(path, "preset file"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not valid YAML: {yaml_error_line(error)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a preset is a mapping with keys 'family' and 'config'")
    unknown = set(data) - {"family", "description", "config"}
    if unknown:
        raise ValueError(f"{path}: unknown top-level keys {sorted(unknown)}; allowed: family, description, config")
    family = data.get("family")
    if family not in FAMILIES:
        raise ValueError(f"{path}: 'family' must be one of {list(FAMILIES)}, got {family!r}")
    fields = data.get("config") or {}
    if not isinstance(fields, dict):
        raise ValueError(f"{path}: 'config' must be a mapping of config fields")
    check_config_fields(FAMILIES[family], fields, where=str(path))
    return Preset(path.stem, path, family, str(data.get("description") or ""), dict(fields))


def config_field_names(config_class: type) -> set[str]:
    """Names a config class accepts: its dataclass fields, properties such as `num_labels` and the common names
    of its `attribute_map` (GPT-2's `hidden_size` for `n_embd`)."""
    names = {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()
    names |= {n for n in dir(config_class) if isinstance(getattr(config_class, n, None), property)}
    names |= set(getattr(config_class, "attribute_map", None) or {})
    return {n for n in names if not n.startswith("_")}


def check_config_fields(config_class: type, fields: dict[str, Any], where: str) -> None:
    """transformers configs keep unknown keyword arguments as attributes, so a typo would be ignored silently:
    refuse names the config class does not define."""
    known = config_field_names(config_class)
    unknown = sorted(k for k in fields if k not in known)
    if unknown:
        import difflib

        hints = [f"{k!r} (did you mean {difflib.get_close_matches(k, known, n=1)[0]!r}?)"
                 if difflib.get_close_matches(k, known, n=1) else repr(k) for k in unknown]
        raise ValueError(f"{where}: {config_class.__name__} has no field {', '.join(hints)}")


def load_model_config(name_or_path: str | os.PathLike, **overrides):
    """The config of a preset (name in configs/models/ or a YAML path) with `overrides` applied,
    e.g. `load_model_config("decoder_114m", attention_scoring="softmax", vocab_size=8192)`."""
    preset = load_preset(name_or_path)
    check_config_fields(preset.config_class, overrides, where=f"override of preset {preset.name!r}")
    fields = {**preset.config, **overrides}
    check_sizes(preset.config_class, fields, where=f"preset {preset.name!r}")
    try:
        return preset.config_class(**fields)
    except (TypeError, ValueError) as error:
        raise ValueError(f"preset {preset.name!r}: {error}") from None


SIZE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
               "vocab_size", "max_position_embeddings", "head_dim")


def check_sizes(config_class, fields: dict[str, Any], where: str) -> None:
    """Sizes of a model config, before it is built: whole numbers >= 1, query heads dividing the width (unless
    head_dim is given) and key-value heads dividing the query heads; a ValueError names the field."""
    real = {name: getattr(config_class, "attribute_map", {}).get(name, name) for name in SIZE_FIELDS}
    given = {name: fields[key] for name, key in real.items() if fields.get(key) is not None}
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {real[name]} must be a whole number >= 1, got {value!r}")
    hidden, heads, kv = (given.get(n) for n in ("hidden_size", "num_attention_heads", "num_key_value_heads"))
    if hidden and heads and "head_dim" not in given and hidden % heads:
        raise ValueError(f"{where}: {real['hidden_size']}={hidden} is not divisible by {real['num_attention_heads']}="
                         f"{heads}; choose a number of heads that divides {hidden}")
    if heads and kv and heads % kv:
        raise ValueError(f"{where}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv} (each "
                         f"key-value head serves a whole group of query heads); choose one that divides {heads}")


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """`["attention_scoring=softmax", "ssa_n_init=2"]` -> {"attention_scoring": "softmax", "ssa_n_init": 2};
    values are read as YAML scalars/lists (numbers, true/false, null, [a, b])."""
    overrides: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"override {item!r}: write KEY=VALUE, e.g. attention_scoring=softmax")
        try:
            overrides[key] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as error:
            raise ValueError(f"override {item!r}: cannot read the value: {error}") from None
    return overrides


def family_of(config) -> str:
    spec = family_of_config(config)
    if spec is None:
        names = " or ".join(s.config_class.__name__ for s in FAMILY_SPECS)
        raise ValueError(f"expected an {names} (from load_model_config), got {type(config).__name__}")
    return spec.name


def model_class(config, task: str | None = None) -> type:
    """The ssa-hf model class for a config and a task (default: the family's default task, e.g. causal_lm for
    ssa_llama, masked_lm for ssa_bert)."""
    family = family_of(config)
    task = task or DEFAULT_TASK[family]
    classes = MODEL_CLASSES[family]
    if task not in classes:
        raise ValueError(f"task {task!r} is not available for {family}; choose from {list(classes)}")
    return classes[task]


def build_model(config, task: str | None = None, *, attn_implementation: str | None = None,
                dtype: torch.dtype | None = None):
    """A freshly initialised model for `config`. The config is copied first (building a model records the
    attention implementation in its config, which must not leak into a second model built from the same one)."""
    cls = model_class(config, task)
    config = copy.deepcopy(config)
    kwargs = {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if dtype is not None:
        kwargs["dtype"] = dtype
    return cls._from_config(config, **kwargs)


def count_parameters(config, task: str | None = None, trainable_only: bool = False) -> int:
    """Number of parameters of `build_model(config, task)`, built on the meta device (no memory for weights).
    Tied weights count once; fixed scoring values (buffers) are not parameters."""
    cls = model_class(config, task)
    with torch.device("meta"):
        model = cls(copy.deepcopy(config))
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


@dataclass
class ParameterCount:
    preset: str
    model_class: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    parameters: int
    embedding_parameters: int

    @property
    def parameters_m(self) -> float:
        return self.parameters / 1e6

    def row(self) -> list:
        return [self.preset, self.model_class, self.layers, self.hidden, self.intermediate, self.heads,
                self.kv_heads, self.vocab, f"{self.parameters:,}", f"{self.parameters / 1e6:.2f}",
                f"{(self.parameters - self.embedding_parameters) / 1e6:.2f}"]


PARAMETER_TABLE_HEADERS = ["preset", "class", "layers", "hidden", "intermediate", "heads", "kv heads", "vocab",
                           "parameters", "parameters (M)", "without input embeddings (M)"]


def describe_parameters(name_or_path: str | os.PathLike, task: str | None = None, **overrides) -> ParameterCount:
    """Shape and parameter count of a preset (the `ssa-hf params` row)."""
    config = load_model_config(name_or_path, **overrides)
    cls = model_class(config, task)
    with torch.device("meta"):
        model = cls(copy.deepcopy(config))
    total = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    return ParameterCount(
        preset=Path(str(name_or_path)).stem,
        model_class=cls.__name__,
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        intermediate=family_of_config(config).feed_forward_size(config),
        heads=config.num_attention_heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        vocab=config.vocab_size,
        parameters=total,
        embedding_parameters=embedding,
    )


def parameter_table(names: list[str], task: str | None = None, **overrides) -> str:
    from .reporting import markdown_table

    return markdown_table(PARAMETER_TABLE_HEADERS, [describe_parameters(n, task, **overrides).row() for n in names])


__all__ = [
    "CONFIGS_ENV",
    "FAMILIES",
    "ParameterCount",
    "Preset",
    "build_model",
    "configs_dir",
    "count_parameters",
    "describe_parameters",
    "family_of",
    "list_presets",
    "load_model_config",
    "load_preset",
    "model_class",
    "parameter_table",
    "parse_overrides",
]
