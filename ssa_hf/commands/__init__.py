"""One module per `ssa-hf` subcommand, each with `register(subparsers)`; `ssa_hf.cli` discovers them.

A command parses its arguments and calls one function of the package; it holds no logic of its own. Its options
come from the config dataclass of that function (`add_config_arguments`, through `ssa_hf.options`), so the fields,
their help and the YAML keys are declared once; `config_from_args` builds the config back from the command line.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def add_command(subparsers, name: str, run, summary: str, description: str | None = None, *, config=None,
                skip: tuple[str, ...] = (), config_file: bool = True, progress: bool = False,
                positionals: dict[str, str] | None = None):
    """The parser of the command `name`, which runs `run(args)`: its `positionals` (name -> help), with `config` (a
    dataclass) its options (`add_config_arguments`), with `progress` `--no-progress`."""
    parser = subparsers.add_parser(name, help=summary, description=description or summary)
    for positional, help_text in (positionals or {}).items():
        parser.add_argument(positional, help=help_text)
    if progress:
        parser.add_argument("--no-progress", action="store_true", help="no progress bars (they show on a terminal only)")
    if config is not None:
        add_config_arguments(parser, config, skip=skip, config_file=config_file)
    parser.set_defaults(func=run)
    return parser


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
