"""The SSA paper's in-context-learning experiments (REFERENCE §3): tasks, model, training, evaluation, report.

    from ssa_hf.icl import preset, run_icl
    results = run_icl(preset("quick"), "outputs/icl")

`ssa-hf icl --preset quick --output-dir DIR` is the same from the command line. The names load on first use (the
config classes import no torch, so that the command line can list their keys at once).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    **dict.fromkeys(["PRESETS", "Curriculum", "EvalConfig", "ICLConfig", "ICLModelConfig", "TrainConfig",
                     "config_from_dict", "load_config", "preset"], "config"),
    **dict.fromkeys(["evaluate_task", "probe"], "evaluate"),
    **dict.fromkeys(["linear_metrics", "majority_baseline", "quantifier_metrics"], "metrics"),
    "ICLModel": "model",
    **dict.fromkeys(["ICLResults", "run_icl", "run_one", "run_specs"], "pipeline"),
    **dict.fromkeys(["TASKS", "Task", "get_task"], "registry"),
    "mean_ci": "stats",
    **dict.fromkeys(["Prompts", "probe_prompts", "quantifier_labels", "sample", "sample_balanced", "sample_standard"],
                    "tasks"),
    **dict.fromkeys(["RunSpec", "TrainResult", "train_run"], "train"),
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
