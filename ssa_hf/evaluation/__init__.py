"""Evaluation: lm-evaluation-harness (zero-shot multiple choice, offline on local data), Zorro grammar probes, and
comparison reports.

- `run_eval(EvalConfig(...))` -> `EvalResults` (`ssa-hf eval`)
- `run_probe(ProbeConfig(...))` -> `ProbeResults` (`ssa-hf probe`)
- `run_compare(CompareConfig(...))` -> `CompareResults` (`ssa-hf compare`)
- `write_local_tasks(data_dir, folder)`: lm-eval task YAMLs reading local files (`lm_eval --include_path folder`)

Importing this package registers the lm-eval model name `ssa-hf` (lazily: lm-eval's HFLM is imported only when the
name is used). lm-eval and its task system are imported only when an evaluation runs, so the rest of ssa-hf works
where lm-eval is not installed.
"""

from __future__ import annotations

from ..lazy import lazy_exports

LM_EVAL_MODEL_NAME = "ssa-hf"
_LM_EVAL_MODEL_TARGET = "ssa_hf.evaluation.lm_eval_model:SSAHFLM"

_EXPORTS = {
    "EvalConfig": "config",
    "EvalResults": "harness",
    "run_eval": "harness",
    "run_eval_models": "harness",
    "DEFAULT_TASKS": "config",
    "PerplexityConfig": "config",
    "ProbeConfig": "config",
    "ProbeResults": "zorro",
    "run_probe": "zorro",
    "ZORRO_PARADIGMS": "zorro",
    "SCORING_METHODS": "zorro",
    "CompareConfig": "config",
    "CompareResults": "compare",
    "run_compare": "compare",
    "LOCAL_TASKS": "lm_tasks",
    "LocalTask": "lm_tasks",
    "write_local_tasks": "lm_tasks",
}


def register_lm_eval_model() -> bool:
    """Register `ssa-hf` with lm-eval's model registry (a lazy placeholder); False when lm-eval is absent."""
    try:
        # lm-eval fills its registry with its own models only when the registry is empty at the first lookup:
        # import them first, so that registering ssa-hf never hides `hf` and the rest
        import lm_eval.models  # noqa: F401
        from lm_eval.api.registry import model_registry
    except ImportError:
        return False
    if LM_EVAL_MODEL_NAME not in model_registry:
        model_registry.register(LM_EVAL_MODEL_NAME, target=_LM_EVAL_MODEL_TARGET)
    return True


register_lm_eval_model()


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["LM_EVAL_MODEL_NAME", "register_lm_eval_model", *_EXPORTS]
