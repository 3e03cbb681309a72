"""The SSA paper's in-context-learning experiments (REFERENCE §3): tasks, model, training, evaluation, report.

    from ssa_hf.icl import preset, run_icl
    results = run_icl(preset("quick"), "outputs/icl")

`ssa-hf icl --preset quick --output-dir DIR` is the same from the command line. The names load on first use (the
config classes import no torch, so that the command line can list their keys at once).
"""

from __future__ import annotations

from ..lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
