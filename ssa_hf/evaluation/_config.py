"""Loading the evaluation config dataclasses from YAML (unknown keys are errors that name the key)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def config_from_dict(cls: type[T], values: dict[str, Any], source: str = "config") -> T:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {unknown} for {cls.__name__}; known keys: {sorted(names)}")
    return cls(**values)


def load_config(cls: type[T], path: str | Path | None, **overrides: Any) -> T:
    """`cls` from the YAML file `path` with `overrides` on top, or from `overrides` alone when there is no file
    (None values are ignored either way: they are options the user did not give)."""
    if path:
        return config_from_yaml(cls, path, **overrides)
    return cls(**{k: v for k, v in overrides.items() if v is not None})


def config_from_yaml(cls: type[T], path: str | Path, **overrides: Any) -> T:
    """`cls` from a YAML mapping, with `overrides` (e.g. from the command line; None values are ignored) on top."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} not found")
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a YAML mapping of {cls.__name__} fields")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return config_from_dict(cls, values, str(path))
