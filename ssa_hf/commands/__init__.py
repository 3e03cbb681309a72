"""One module per `ssa-hf` subcommand, each with `register(subparsers)`; `ssa_hf.cli` discovers them.

A command parses its arguments and calls one function of the package; it holds no logic of its own. Its options
come from the config dataclass of that function (`add_config_arguments`, through `ssa_hf.options`), so the fields,
their help and the YAML keys are declared once; `config_from_args` builds the config back from the command line.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def add_config_arguments(parser, cls, skip: tuple[str, ...] = (), config_file: bool = True) -> None:
    """One option per field of `cls` but those in `skip` (`--key` and `--key-with-hyphens`, each taking one word so
    that positional arguments may come anywhere) and, with `config_file`, `--config FILE` (YAML of the fields)."""
    from ..options import add_dataclass_arguments

    if config_file:
        parser.add_argument("--config", metavar="FILE", help=f"YAML file of {cls.__name__} fields (options win)")
    add_dataclass_arguments(parser, cls, skip=skip, one_word=True)


def config_from_args(cls, args, **values: Any):
    """`cls` from --config (if any), the options of `add_config_arguments` given on top, then `values` (the
    positional arguments; None: not given). Keys and types are checked by `ssa_hf.options`."""
    from ..options import load_dataclass

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    return load_dataclass(cls, getattr(args, "config", None), **{**given, **values})
