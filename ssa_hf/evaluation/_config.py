"""Loading the evaluation config dataclasses from YAML (unknown keys are errors that name the key)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


# dtypes a model can be evaluated in ("auto": the checkpoint's own); float8 and integer types cannot run a forward
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16", "float64")


def closest(value: Any, choices) -> str:
    """'; did you mean X?' for a near miss among `choices`, else '.'."""
    from ..models.scoring import closest_name

    return closest_name(value, choices)


def did_you_mean(names, choices) -> str:
    """' (did you mean 'x' for 'y'?)' for those of `names` with a near miss among `choices`, else ''."""
    import difflib

    pairs = []
    for name in names:
        match = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1)
        if match:
            pairs.append(f"{match[0]!r} for {name!r}")
    return f" (did you mean {', '.join(pairs)}?)" if pairs else ""


def check_dtype(name: Any, option: str = "dtype") -> str:
    """`name` if it is one of DTYPE_NAMES, else a ValueError that names the option and the choices."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"{option}: {name!r} is not a supported dtype{closest(name, DTYPE_NAMES)} Choose from {list(DTYPE_NAMES)}")
    return name


def config_from_dict(cls: type[T], values: dict[str, Any], source: str = "config") -> T:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(
            f"{source}: unknown key(s) {unknown}{did_you_mean(unknown, names)} for {cls.__name__}; "
            f"known keys: {sorted(names)}"
        )
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
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a readable YAML file ({error})") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a YAML mapping of {cls.__name__} fields")
    values.update({k: v for k, v in overrides.items() if v is not None})
    return config_from_dict(cls, values, str(path))
