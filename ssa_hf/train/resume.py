"""What a resume may change: the settings a checkpoint's optimizer, schedule and data order were built from are
fixed (a different value is refused, naming the checkpoint's), the step to reach must lie ahead of the
checkpoint, and a run that already reached `max_steps` has nothing to do (its metrics and final folder are kept)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ..regular_files import read_json_object
from .checkpoint import read_trainer_state
from .config import ConfigError, PretrainConfig

logger = logging.getLogger("ssa_hf.train")

# settings the checkpoint's weights, optimizer, schedule and data position were made with
FIXED_ON_RESUME = (
    "task", "seed", "model", "tokenizer", "data", "per_device_train_batch_size", "gradient_accumulation_steps",
    "global_batch_size", "learning_rate", "min_learning_rate", "lr_scheduler", "warmup_steps", "weight_decay",
    "adam_beta1", "adam_beta2", "adam_epsilon", "adam_fused", "max_grad_norm", "scoring_learning_rate", "scoring_warmup_steps",
    "lora",
)
# ... except these, which change neither the training data, its order nor the model (validation, the cache's work
# split, which attention implementation computes the same function)
FREE_FIELDS = {"data": ("num_proc", "validation_max_samples"), "model": ("attn_implementation",)}


def _differences(saved: Any, current: Any, name: str) -> list[tuple[str, Any, Any]]:
    if isinstance(saved, dict) and isinstance(current, dict):
        found = []
        for key in sorted(set(saved) | set(current)):
            found += _differences(saved.get(key), current.get(key), f"{name}.{key}")
        return found
    return [] if saved == current else [(name, saved, current)]


def check_resume(config: PretrainConfig, checkpoint: Path) -> int:
    """The checkpoint's step, once `config` is one the checkpoint can continue; else a ConfigError saying what
    differs (with the checkpoint's value) or why the run's range does not fit."""
    state = read_trainer_state(checkpoint)
    step = int(state["step"])
    saved = state.get("config") or {}
    current = json.loads(json.dumps(config.to_dict()))  # the types the checkpoint's JSON has
    for key in FIXED_ON_RESUME:
        if key not in saved:
            continue  # (a checkpoint of an older version without that setting)
        a, b = saved[key], current.get(key)
        if key in FREE_FIELDS and isinstance(a, dict) and isinstance(b, dict):
            a, b = ({k: v for k, v in d.items() if k not in FREE_FIELDS[key]} for d in (a, b))
        for name, was, now in _differences(a, b, key):
            raise ConfigError(
                f"--resume: {name} was {was!r} in {checkpoint}, now {now!r}; it cannot change on resume (the "
                f"optimizer, schedule and data position come from the checkpoint). Resume with {name}={was!r}, or "
                "start a new run in another output_dir")
    if step > config.max_steps:
        raise ConfigError(f"--resume: {checkpoint} is at step {step}, beyond max_steps={config.max_steps}; resume "
                          f"with max_steps >= {step} (the checkpoint's run had max_steps={saved.get('max_steps')})")
    saved_max = saved.get("max_steps", state.get("max_steps"))
    if saved_max is not None and saved_max != config.max_steps and config.lr_scheduler != "constant":
        raise ConfigError(
            f"--resume: max_steps={config.max_steps}, but {checkpoint}'s run had max_steps={saved_max}, which its "
            f"{config.lr_scheduler} schedule spans: changing it would silently re-span the schedule from step {step}. "
            f"Resume with max_steps={saved_max}; or, to train on from its weights with a new schedule, start a new run "
            f"from its final folder: --model.pretrained {checkpoint.parent.parent / 'final'} --output_dir NEW_DIR "
            f"(a constant schedule can be extended in place)")
    if config.stop_after_steps is not None and config.stop_after_steps <= step < config.max_steps:
        raise ConfigError(f"--resume: stop_after_steps={config.stop_after_steps} is not after {checkpoint}'s step "
                          f"{step}; give a later step (or drop stop_after_steps)")
    return step


def finished_run(config: PretrainConfig, output_dir: Path, checkpoint: Path | None, step: int) -> dict | None:
    """metrics.json of a run that already reached max_steps and wrote its final folder (None otherwise): a resume
    of it has nothing to do, and rewrites nothing."""
    final_metrics = output_dir / "final" / "metrics.json"
    if checkpoint is None or step != config.max_steps or not final_metrics.is_file():
        return None
    logger.warning("--resume: the run already reached max_steps=%d (%s); nothing to do: metrics.json and final/ are "
                   "kept as they are", step, checkpoint)
    source = output_dir / "metrics.json"
    return read_json_object(source if source.is_file() else final_metrics)  # (damaged: one line naming it)
