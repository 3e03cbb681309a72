"""The optional parts of the install (pyproject's extras) and the check a command makes before any work.

`pip install ssa-hf` is the models, the kernel, convert and push; pretraining, evaluation, the ICL experiments,
serving and export each need an extra. A command names its extra (`EXTRA = "train"` in its module) and the
command line checks it before running, so a missing one costs one line, not a traceback halfway through a run.
Importing this module imports nothing heavy.
"""

from __future__ import annotations

import importlib.util

# extra -> the modules it installs that the code imports (import names, not distribution names)
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("accelerate", "datasets", "matplotlib"),
    "eval": ("lm_eval", "datasets", "matplotlib"),
    "icl": ("accelerate", "matplotlib"),
    "entmax": ("entmax",),
    "peft": ("peft",),
    "serve": ("fastapi", "uvicorn"),
    "export": ("onnx", "onnxscript", "onnxruntime"),
    "experiments": ("accelerate", "datasets", "lm_eval", "matplotlib", "entmax"),
}


class MissingExtraError(ImportError, ValueError):
    """A command or function needs an optional part of the install that is not there."""


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def install_line(extra: str) -> str:
    return f'pip install "ssa-hf[{extra}]"'


def require_extra(extra: str, what: str) -> None:
    """Raise MissingExtraError (one line: what needs it and the pip command) if `extra` is not installed."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(f"{what} needs the [{extra}] extra ({', '.join(missing)} not installed): "
                                f"{install_line(extra)}")
