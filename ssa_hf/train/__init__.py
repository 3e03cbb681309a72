"""Pretraining with accelerate: the config (`PretrainConfig`, YAML + command-line overrides), the training loop
(`pretrain`), atomic checkpoints with exact resumption. (Perplexity on random windows is in
`ssa_hf.evaluation.perplexity`.)

The names load on first use: the config classes import no torch, so that `ssa-hf pretrain --help` answers at once.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    **dict.fromkeys(["latest_checkpoint", "list_checkpoints", "load_checkpoint", "save_checkpoint"], ".checkpoint"),
    **dict.fromkeys(["ModelConfig", "PretrainConfig", "add_pretrain_arguments", "config_from_args", "load_config"],
                    ".config"),
    **dict.fromkeys(["PretrainResult", "pretrain", "push_final"], ".loop"),
    "evaluate": ".validation",
    "scoring_statistics": ".reporting",
    "ConfigError": "..options",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
