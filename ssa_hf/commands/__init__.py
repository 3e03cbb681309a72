"""One module per `ssa-hf` subcommand, each with `register(subparsers)`; `ssa_hf.cli` discovers them.

A command parses its arguments and calls one function of the package; it holds no logic of its own.
"""
