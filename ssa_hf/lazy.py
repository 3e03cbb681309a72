"""Packages whose public names load on first use (PEP 562): importing the package stays light (no torch), so that
the command line can answer `--help` at once, and a name's module is imported when the name is first asked for."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level `__getattr__` and `__dir__` of `package`, for `exports`: public name -> the module that
    defines it, relative to the package ("config", ".config", "..options")."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            module = exports[name]
            return getattr(import_module(module if module.startswith(".") else f".{module}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
