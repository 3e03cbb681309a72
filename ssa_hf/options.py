"""The one config loader of ssa-hf: dataclasses -> YAML files and command-line options.

Every pipeline (pretraining, the ICL experiments, the evaluations) declares its settings as dataclasses and
documents each field in the class docstring (`name: what it does`); this module turns them into:

- `load_yaml(path)`: a mapping, with `base: OTHER.yaml` (relative to the file) merged underneath, recursively; so
  twin configs (SSA / softmax) differ in one line.
- `from_dict(cls, data)`: a (nested) dataclass, every value checked against the field's type; an unknown key is an
  error that names it and the closest known key. A class may rename a field and keep the old name working with
  `ALIASES = {"old": "new"}` (a ClassVar): the old key is accepted with a deprecation warning.
- `add_dataclass_arguments(parser, cls)`: one `--key` (`--section.key` for nested sections) per field, so that
  any config key can be overridden on the command line and `--help` lists them all (help from the docstring,
  `choices` and `metavar` from the field's metadata, list values space- or comma-separated).
- `load_dataclass(cls, path, **overrides)`: a flat dataclass from an optional YAML file plus options given;
  `YamlConfig` gives a config class `from_yaml(path, **overrides)` doing the same.

Importing this module is light (no torch), so that `--help` of every command answers at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Union

import logging
import yaml

BASE_KEY = "base"
ALIASES_ATTRIBUTE = "ALIASES"
logger = logging.getLogger("ssa_hf.config")


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


def yaml_error_line(error: Exception) -> str:
    """A YAML parser's error in one line (its own message spans several, with the offending text and a caret)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if problem and mark is not None:
        context = getattr(error, "context", None)
        return f"{context + ': ' if context else ''}{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(error).split())


def load_yaml(path: str | Path, _seen: tuple = ()) -> dict:
    """Read a YAML config; `base: FILE` (relative to this file) is loaded first and this file merged over it.
    A path under `configs/` that the working directory lacks is read from the configs shipped with ssa-hf."""
    from .resources import config_file

    from .regular_files import check_regular_file, read_text

    path = config_file(path)
    if not path.exists():
        raise FileNotFoundError(f"config file {str(path)!r} does not exist")
    check_regular_file(path, "config file")  # (a folder, a FIFO: one line; a FIFO would block the read)
    if path.resolve() in _seen:
        raise ConfigError(f"{path}: 'base' chain loops back to itself")
    try:
        data = yaml.safe_load(read_text(path)) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid YAML: {yaml_error_line(error)}") from None
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
        return _coerce_union(value, typing.get_args(tp), where)
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
        if isinstance(value, str):  # a YAML list, else comma-separated as on the command line ("a,b")
            parsed = parse_scalar(value)
            value = parsed if isinstance(parsed, list) else [part.strip() for part in value.split(",") if part.strip()]
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


def _coerce_union(value: Any, args: tuple, where: str) -> Any:
    """`value` as the first of the types `args` (of `X | Y | None`) that takes it."""
    if value is None or (isinstance(value, str) and value.lower() in ("null", "none") and type(None) in args):
        if type(None) in args:
            return None
        raise ConfigError(f"{where}: a value is required (got null)")
    if isinstance(value, str) and value.strip().startswith(("[", "{")):
        value = parse_scalar(value)
    # exact type matches first (a "3" for `str | int` stays a string, a True for `bool | str` stays a bool)
    for arg in sorted((a for a in args if a is not type(None)), key=lambda a: not _matches_exactly(value, a)):
        try:
            return coerce(value, arg, where)
        except ConfigError:
            continue
    raise ConfigError(f"{where}: {value!r} is not a valid {' or '.join(_type_name(a) for a in args)}")


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


def aliases_of(cls) -> dict[str, str]:
    """Old field name -> current name, as the class declares in `ALIASES`."""
    return dict(getattr(cls, ALIASES_ATTRIBUTE, {}) or {})


def rename_aliases(cls, data: dict, where: str = "") -> dict:
    """`data` with the old (aliased) keys of `cls` and of its nested sections renamed to the current ones; each
    old key gets a deprecation warning. Giving both names of one field is an error."""
    if not isinstance(data, dict) or not dataclasses.is_dataclass(cls):
        return data
    out = dict(data)
    prefix = f"{where}." if where else ""
    for old, new in aliases_of(cls).items():
        if old in out:
            if new in out:
                raise ConfigError(f"'{prefix}{old}' and '{prefix}{new}' name the same setting; keep '{prefix}{new}'")
            logger.warning("config key '%s%s' is deprecated; it is now called '%s%s'", prefix, old, prefix, new)
            out[new] = out.pop(old)
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        inner = _dataclass_in(hints[f.name])
        if inner is not None and isinstance(out.get(f.name), dict):
            out[f.name] = rename_aliases(inner, out[f.name], prefix + f.name)
    return out


def from_dict(cls, data: dict, where: str = ""):
    """Build dataclass `cls` from a mapping, checking keys and types (old field names accepted, see `ALIASES`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping for {cls.__name__}, got {type(data).__name__}")
    data = rename_aliases(cls, data, where)
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


def load_dataclass(cls, path: str | Path | None = None, **overrides: Any):
    """`cls` from the YAML file `path` (if given) with `overrides` on top (None values are ignored: they are
    options the user did not give); keys and types checked as in `from_dict`."""
    data = load_yaml(path) if path else {}
    data = rename_aliases(cls, data)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return from_dict(cls, data)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}" if path else str(error)) from None


class YamlConfig:
    """A config dataclass that loads itself: `Config.from_yaml(path, **overrides)`, as `load_dataclass`."""

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any):
        return load_dataclass(cls, path, **overrides)


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
    if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict) and not isinstance(value, ReplacingMapping):
        node[parts[-1]] = deep_merge(node[parts[-1]], value)  # --model.overrides k=v adds to the file's mapping
    else:
        node[parts[-1]] = dict(value) if isinstance(value, ReplacingMapping) else value


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


class ReplacingMapping(dict):
    """A mapping given on the command line after `{}`: it replaces the file's mapping instead of merging into it."""


class _KeyValues(argparse.Action):
    """`--section.mapping KEY=VALUE [KEY=VALUE ...]` -> {KEY: VALUE, ...} (values parsed as YAML scalars); taking one
    word (`one_word`), each occurrence adds its pair."""

    def __call__(self, parser, namespace, values, option_string=None):
        previous = getattr(namespace, self.dest, None) or {}
        mapping = type(previous)(previous) if self.nargs is None else {}
        for item in [values] if isinstance(values, str) else values:
            if item.strip() == "{}":  # replace the file's mapping instead of adding to it
                mapping = ReplacingMapping()
                continue
            if "=" not in item:
                parser.error(f"{option_string} takes KEY=VALUE pairs (or {{}} to drop the file's), got {item!r}")
            key, _, text = item.partition("=")
            mapping[key.strip()] = parse_scalar(text)
        setattr(namespace, self.dest, mapping)


class _ListValues(argparse.Action):
    """`--key A B` or `--key A,B` -> ["A", "B"] (the items are typed when the config is built); taking one word
    (`one_word`), the items of every occurrence add up."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = list(getattr(namespace, self.dest, None) or []) if self.nargs is None else []
        words = [values] if isinstance(values, str) else values
        setattr(namespace, self.dest, items + [item for value in words for item in value.split(",") if item.strip()])


def _option_kwargs(tp, dest: str, help_text: str | None, choices=None, one_word: bool = False) -> dict[str, Any]:
    """argparse keywords of the option of a field of type `tp`: absent from the namespace unless given. With
    `one_word`, the option takes one command-line word at most (see `add_dataclass_arguments`)."""
    kwargs: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS, "help": help_text}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    union = origin in (Union, types.UnionType)
    several = None if one_word else "+"
    if tp is bool or (union and bool in args):
        kwargs.update(action=argparse.BooleanOptionalAction) if one_word else kwargs.update(
            nargs="?", const="true", metavar="BOOL")
    elif origin is dict or tp is dict or (union and any(typing.get_origin(a) is dict for a in args)):
        kwargs.update(nargs=several, action=_KeyValues, metavar="KEY=VALUE")
    elif origin is list or (union and all(typing.get_origin(a) is list for a in args if a is not type(None))):
        kwargs.update(nargs=several, action=_ListValues, metavar="VALUE")
    else:
        kwargs["metavar"] = "VALUE"
    if choices:
        kwargs.update(choices=list(choices), metavar=None)
    return kwargs


def dataclass_fields(cls, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, type, owning class) of every leaf field of `cls`, nested sections flattened."""
    out = []
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        inner = _dataclass_in(hints[f.name])
        if inner is not None:
            out += dataclass_fields(inner, prefix + f.name + ".")
        else:
            out.append((prefix + f.name, hints[f.name], cls))
    return out


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls, prefix: str = "", skip: tuple[str, ...] = (),
                            shortcuts: dict[str, str | tuple[str, ...]] | None = None, one_word: bool = False) -> None:
    """One option per field of `cls` (recursively for nested dataclasses), each stored under its dotted key and
    absent from the namespace unless given. `shortcuts` adds short names: {"steps": "train.steps"} makes
    `--steps` (and `--steps` spelled with hyphens) set `train.steps`; a tuple of keys sets each of them. Old
    field names (`ALIASES`) stay options too, marked deprecated.

    `one_word=True` (commands with positional arguments, which an option taking several words would swallow):
    every option takes one word at most: a list `--key A,B` (repeatable, the items add up), a mapping
    `--key K=V` (repeatable), a boolean a flag `--key` with its negation `--no-key`; options are spelled with
    hyphens only (`--data-dir`), as in the commands' own options."""
    leaves = {key: (tp, owner) for key, tp, owner in dataclass_fields(cls, prefix)}

    def add(name: str, spelled: str, dest: str, help_text: str | None, tp, owner) -> None:
        metadata = {f.name: f.metadata for f in dataclasses.fields(owner)}[name]
        kwargs = _option_kwargs(tp, dest, help_text, metadata.get("choices"), one_word)
        if "metavar" in metadata:
            kwargs["metavar"] = metadata["metavar"]
        hyphens = spelled.replace("_", "-")
        spellings = [f"--{hyphens}"] if one_word else [f"--{spelled}"] + (
            [f"--{hyphens}"] if "_" in spelled.rsplit(".", 1)[-1] else [])
        parser.add_argument(*spellings, **kwargs)

    for key, (tp, owner) in leaves.items():
        if key in skip:
            continue
        name = key.rsplit(".", 1)[-1]
        add(name, key, key, _field_help(owner, name), tp, owner)
        for old, new in aliases_of(owner).items():
            if new == name:
                add(name, key[: len(key) - len(name)] + old, key, f"deprecated name of --{key}", tp, owner)
    for short, targets in (shortcuts or {}).items():
        targets = (targets,) if isinstance(targets, str) else tuple(targets)
        tp, owner = leaves[targets[0]]
        name = targets[0].rsplit(".", 1)[-1]
        help_text = _field_help(owner, name) if len(targets) == 1 else f"sets {', '.join(targets)}"
        add(name, short, "shortcut:" + "+".join(targets), help_text, tp, owner)


def options_given(namespace: argparse.Namespace, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The dotted config keys given on the command line -> their values (shortcuts expanded; a key given
    both ways keeps its full `--section.key` value)."""
    values = {k: v for k, v in vars(namespace).items() if k not in exclude and not k.startswith("shortcut:")}
    for dest, value in vars(namespace).items():
        if dest.startswith("shortcut:"):
            for key in dest[len("shortcut:"):].split("+"):
                values.setdefault(key, value)
    return values


def dotted_to_nested(values: dict[str, Any]) -> dict:
    """{"train.steps": 3} -> {"train": {"steps": 3}}."""
    data: dict = {}
    for key, value in values.items():
        set_dotted(data, key, value)
    return data


def _field_help(cls, name: str) -> str | None:
    """The help of field `name`: its line `name: text` in the class docstring, with the lines below it that are
    indented deeper (its continuation)."""
    lines = (cls.__doc__ or "").splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(f"{name}:"):
            indent = len(line) - len(line.lstrip())
            parts = [stripped[len(name) + 1 :].strip()]
            for more in lines[i + 1 :]:
                if not more.strip() or len(more) - len(more.lstrip()) <= indent:
                    break
                parts.append(more.strip())
            return " ".join(parts).replace("%", "%%")
    return None
