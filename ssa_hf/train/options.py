"""Dataclass configs from YAML files and command-line overrides.

- `load_yaml(path)`: a mapping, with `base: OTHER.yaml` (relative to the file) merged underneath, recursively; so
  twin configs (SSA / softmax) differ in one line.
- `from_dict(cls, data)`: a (nested) dataclass, every value checked against the field's type; an unknown key is an
  error that names it and the closest known key.
- `add_dataclass_arguments(parser, cls)`: one `--key` (`--section.key` for nested sections) per field, so that
  any config key can be overridden on the command line and `--help` lists them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Union

import yaml

BASE_KEY = "base"


class ConfigError(ValueError):
    """A config value or key that is wrong, with where it came from."""


def deep_merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_yaml(path: str | Path, _seen: tuple = ()) -> dict:
    """Read a YAML config; `base: FILE` (relative to this file) is loaded first and this file merged over it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {str(path)!r} does not exist")
    if path.resolve() in _seen:
        raise ConfigError(f"{path}: 'base' chain loops back to itself")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config is a mapping of keys to values")
    base = data.pop(BASE_KEY, None)
    if base:
        data = deep_merge(load_yaml(path.parent / base, _seen + (path.resolve(),)), data)
    return data


def parse_scalar(text: str) -> Any:
    """A command-line value: YAML scalars (null, true, 3, [a, b], {k: v}) plus floats YAML 1.1 misses (3e-4)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value) if any(c in value.lower() for c in ".e") and value.lower() not in ("inf", "nan") else value
        except ValueError:
            return value
    return value


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """`value` as type `tp` (a field annotation), or ConfigError naming `where`."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return parse_scalar(value) if isinstance(value, str) else value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none") and type(None) in args):
            if type(None) in args:
                return None
            raise ConfigError(f"{where}: a value is required (got null)")
        if isinstance(value, str) and value.strip().startswith(("[", "{")):
            value = parse_scalar(value)
        errors = []
        # exact type matches first (a "3" for `str | int` stays a string, a True for `bool | str` stays a bool)
        for arg in sorted((a for a in args if a is not type(None)), key=lambda a: not _matches_exactly(value, a)):
            try:
                return coerce(value, arg, where)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(f"{where}: {value!r} is not a valid {' or '.join(_type_name(a) for a in args)}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if isinstance(value, str) and "path" in {f.name for f in dataclasses.fields(tp)}:
            value = {"path": value}  # a source given as a plain path
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        (item,) = typing.get_args(tp)[:1] or (Any,)
        if isinstance(value, str):
            parsed = parse_scalar(value)
            value = parsed if isinstance(parsed, list) else [value]
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = parse_scalar(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1", "false", "no", "off", "0"):
            return value.lower() in ("true", "yes", "on", "1")
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                number = float(value.replace("_", ""))
            except ValueError:
                number = None
            if number is not None and number.is_integer():
                return int(number)
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _matches_exactly(value, tp) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if tp in (int, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    origin = typing.get_origin(tp) or tp
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return False


def field_types(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _dataclass_in(tp):
    """The dataclass inside `tp` (`X` or `X | None`), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg):
                return arg
    return None


def from_dict(cls, data: dict, where: str = ""):
    """Build dataclass `cls` from a mapping, checking keys and types."""
    hints = field_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), names, n=1)
        prefix = f"{where}." if where else ""
        hint = f"; did you mean '{prefix}{close[0]}'?" if close else f"; known keys: {', '.join(prefix + n for n in names)}"
        raise ConfigError(f"unknown config key '{prefix}{key}'{hint}")
    values = {}
    for name, value in data.items():
        values[name] = coerce(value, hints[name], f"{where}.{name}" if where else name)
    return cls(**values)


def to_dict(obj) -> dict:
    return dataclasses.asdict(obj)


def set_dotted(data: dict, key: str, value: Any) -> None:
    """`data["a"]["b"] = value` for key "a.b" (intermediate mappings created)."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        if isinstance(node.get(part), str):
            node[part] = {"path": node[part]}  # a source given as a plain path, now with more keys
        elif not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
        node[parts[-1]] = deep_merge(node[parts[-1]], value)  # --model.overrides k=v adds to the file's mapping
    else:
        node[parts[-1]] = value


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


class _KeyValues(argparse.Action):
    """`--section.mapping KEY=VALUE [KEY=VALUE ...]` -> {KEY: VALUE, ...} (values parsed as YAML scalars)."""

    def __call__(self, parser, namespace, values, option_string=None):
        mapping = {}
        for item in values:
            if "=" not in item:
                parser.error(f"{option_string} takes KEY=VALUE pairs, got {item!r}")
            key, _, text = item.partition("=")
            mapping[key.strip()] = parse_scalar(text)
        setattr(namespace, self.dest, mapping)


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
    """One option per field of `cls` (recursively for nested dataclasses), each stored under its dotted key and
    absent from the namespace unless given."""
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        if key in skip:
            continue
        tp = hints[f.name]
        inner = _dataclass_in(tp)
        if inner is not None:
            add_dataclass_arguments(parser, inner, prefix=key + ".", skip=skip)
            continue
        help_text = _field_help(cls, f.name)
        kwargs: dict[str, Any] = {"dest": key, "default": argparse.SUPPRESS, "help": help_text}
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if tp is bool or (origin in (Union, types.UnionType) and bool in args):
            kwargs.update(nargs="?", const="true", metavar="BOOL")
        elif origin is dict or tp is dict or (origin in (Union, types.UnionType) and any(
            typing.get_origin(a) is dict for a in args
        )):
            kwargs.update(nargs="+", action=_KeyValues, metavar="KEY=VALUE")
        elif origin is list:
            kwargs.update(nargs="+", metavar="VALUE")
        else:
            kwargs["metavar"] = "VALUE"
        parser.add_argument(f"--{key}", **kwargs)


def _field_help(cls, name: str) -> str | None:
    doc = cls.__doc__ or ""
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.startswith(f"{name}:"):
            return stripped[len(name) + 1 :].strip().replace("%", "%%")
    return None


def overrides_from_namespace(namespace: argparse.Namespace, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The dotted keys given on the command line -> their (string) values."""
    return {k: v for k, v in vars(namespace).items() if k not in exclude}
