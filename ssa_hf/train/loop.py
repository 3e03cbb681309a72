"""The pretraining loop (run it under `accelerate launch scripts/pretrain.py`, or in-process with `pretrain(config)`).

Read top to bottom: `pretrain` checks the config and locks the run folder; `setup_run` (train/setup.py) builds the
tokenizer, data, model, optimizer and schedule, or restores them from a checkpoint; `train` runs the steps,
logging, validating and saving as the config says; `finish` writes metrics.json and the final folder.

One step, as in nanoGPT: `gradient_accumulation_steps` micro-batches (gradients synchronised only on the last one),
gradient clipping, AdamW, the scheduler. accelerate provides the device, DDP/FSDP, mixed precision, the trackers
and the checkpoint state; the data position and the masking are this package's own (see `ssa_hf.data.corpus`), so
`--resume` continues exactly where the checkpoint was written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.corpus import batch_generator, collate_causal
from ..models.modeling_common import scoring_parameter_problems
from ..reporting import atomic_write_json, open_for_append, refuse_overlap
from .checkpoint import list_checkpoints, on_main, save_checkpoint
from .config import ConfigError, PretrainConfig
from .lock import RunLock
from .metrics import (
    distributed_summary,
    export_final,
    full_tensor,
    gather_floats,
    gather_ints,
    push_final,
    read_history,
    recorded_start_eval,
    scoring_statistics,
    scoring_values,
    versions,
)
from .resume import finished_run
from .setup import (Run, check_push_settings, check_schedule, make_accelerator, model_config_for, prime_adam_state,
                    refuse_foreign_run_folder, setup_run, start_point)
from .state import NonFiniteError, ScoringParameterError
from .uptrain import hold_all_but_scoring, is_scoring, source_record
from .validation import evaluate

logger = logging.getLogger("ssa_hf.train")


@dataclass
class PretrainResult:
    """What a run produced: folders and the figures of its metrics.json."""

    output_dir: str
    final_dir: str | None
    checkpoint: str | None
    steps: int
    metrics: dict[str, Any] = field(default_factory=dict)
    log_history: list[dict[str, Any]] = field(default_factory=list)


def pretrain(config: PretrainConfig) -> PretrainResult:
    """Train a causal or masked LM as `config` says; returns the output folders and metrics. The output folder
    is locked for the run's lifetime: a second run into it fails with an error naming this one."""
    config.validate()
    model_config_for(config)  # fail before any data work on a model that cannot run this config
    output_dir = Path(config.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(f"output_dir {output_dir} is a file, not a folder; give a folder path")
    for source in (config.model.pretrained, config.tokenizer.pretrained):  # its final/ and checkpoints/ are replaced
        if source and Path(source).expanduser().exists():
            refuse_overlap(output_dir, [Path(source).expanduser()], "output_dir")
    refuse_foreign_run_folder(config, output_dir)
    check_push_settings(config)
    check_schedule(config)
    from ..hub.cards import card_template

    card_template()  # final/ gets a model card: a missing template fails now, not after the last step
    accelerator = make_accelerator(config, output_dir)
    lock = RunLock(output_dir, "pretraining run")
    on_main(accelerator, lambda: lock.acquire() and None)
    try:
        start = on_main(accelerator, lambda: start_point(config, output_dir))
        done = on_main(accelerator, lambda: finished_run(config, output_dir, start.checkpoint, start.step))
        if done is not None:  # a finished run: nothing trained, nothing rewritten
            return PretrainResult(str(output_dir), str(output_dir / "final"), str(start.checkpoint), start.step, done,
                                  read_history(output_dir / "log_history.jsonl"))
        run = setup_run(config, accelerator, output_dir, start)
        report = train(run)
        return finish(run, report)
    finally:
        lock.release()


# --------------------------------------------------------------------------------------------------
# The steps
# --------------------------------------------------------------------------------------------------


@dataclass
class Report:
    """What the loop measured: the logging window in progress and the figures of the run so far.

    Throughput is timed per logging window (ended by the reduce, which waits for the device), without the time
    spent logging, evaluating and saving; the first window (warm-up, compilation) is left out of the total."""

    loss: torch.Tensor  # sum of the finite step losses of this window
    steps: int = 0
    counted: int = 0  # steps of this window whose loss was finite
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)
    windows: list[tuple[float, float]] = field(default_factory=list)  # (global tokens, seconds) per window
    last_loss: float = float("nan")
    last_eval: dict[str, float] | None = None
    start_eval: dict[str, float] | None = None  # before the first step (`eval_at_start`)
    wall_start: float = field(default_factory=time.perf_counter)

    def reset(self) -> None:
        self.loss.zero_()
        self.steps, self.counted, self.tokens = 0, 0, 0

    def window_state(self, accelerator) -> dict[str, Any]:
        """The logging window in progress, for a checkpoint (collective): a run resumed from it logs the window's
        loss over all its steps, as the uninterrupted run does, not over those after the resume only."""
        return {
            "steps": self.steps,
            "seconds": time.perf_counter() - self.started,
            "loss_sum_per_process": gather_floats(accelerator, float(self.loss)),
            "counted_per_process": gather_ints(accelerator, self.counted),
            "tokens_per_process": gather_ints(accelerator, self.tokens),
        }

    def resume(self, window: dict[str, Any] | None, rank: int) -> None:
        """Continue the window a checkpoint was saved inside (`window_state`; None: an empty one)."""
        if not window or not window["steps"]:
            return
        self.loss.fill_(window["loss_sum_per_process"][rank])
        self.steps, self.counted = window["steps"], window["counted_per_process"][rank]
        self.tokens = window["tokens_per_process"][rank]
        self.started = time.perf_counter() - window["seconds"]


def train(run: Run) -> Report:
    """Steps until `stop_after_steps` (or `max_steps`), each followed by the logging, validation and checkpoint
    it is due for."""
    config = run.config
    report = Report(loss=torch.zeros((), device=run.accelerator.device))
    report.resume(run.open_window, run.accelerator.process_index)
    progress = progress_bar(run)
    run.model.train()
    if config.eval_at_start and run.step == 0 and run.validation:
        report.start_eval = evaluate(run.model, run.validation, config.task, run.tokenizer.pad_token_id,
                                     config.per_device_eval_batch_size, run.accelerator)
        log(run, {"eval_loss": report.start_eval["loss"], "eval_perplexity": report.start_eval["perplexity"],
                  "eval_tokens": report.start_eval["tokens"]})
        report.started = time.perf_counter()
    elif config.eval_at_start and run.main:  # resumed: the first invocation's (log_history.jsonl keeps it)
        report.start_eval = recorded_start_eval(run.output_dir / "log_history.jsonl")
    while run.step < run.stop_at:
        step_loss, grad_norm = train_step(run, report)
        run.step += 1
        report.steps += 1
        progress.update(1)
        is_last = run.step == run.stop_at
        if run.step % config.logging_steps == 0 or is_last:
            log_training(run, report, step_loss, grad_norm, progress)
        if run.validation and ((config.eval_steps and run.step % config.eval_steps == 0) or is_last):
            report.last_eval = evaluate(run.model, run.validation, config.task, run.tokenizer.pad_token_id,
                                        config.per_device_eval_batch_size, run.accelerator)
            log(run, {"eval_loss": report.last_eval["loss"], "eval_perplexity": report.last_eval["perplexity"],
                      "eval_tokens": report.last_eval["tokens"]})
        if (config.save_steps and run.step % config.save_steps == 0) or is_last:
            save(run, report)
        if report.steps == 0:
            report.started = time.perf_counter()  # the next window starts after logging, evaluating and saving
    progress.close()
    return report


def progress_bar(run: Run):
    """The run's progress bar on a terminal; off a terminal (a log file, CI) no bar: the logged records (every
    `logging_steps`) are the progress, without carriage returns and escape sequences in the file."""
    import sys

    from tqdm.auto import tqdm

    shown = run.accelerator.is_local_main_process and sys.stderr.isatty()
    return tqdm(total=run.config.max_steps, initial=run.step, disable=not shown, desc=f"pretrain {run.run_name}",
                dynamic_ncols=True)


def train_step(run: Run, report: Report) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One optimizer step over `accumulation` micro-batches; returns (mean loss, gradient norm)."""
    config, accelerator, model = run.config, run.accelerator, run.model
    step_loss = torch.zeros((), device=accelerator.device)
    for micro in range(run.accumulation):
        batch = next_batch(run, report)
        sync = micro == run.accumulation - 1
        with contextlib.nullcontext() if sync else accelerator.no_sync(model):
            loss = model(**batch).loss
            accelerator.backward(loss / run.accumulation)
        step_loss += loss.detach().float() / run.accumulation
    if config.scoring_warmup_steps:
        hold_all_but_scoring(model, run.step, config)
    # (max_grad_norm 0: an infinite bound computes the norm and leaves the gradients unchanged)
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
    grad_norm = full_tensor(grad_norm) if grad_norm is not None else None
    if nonfinite_step(accelerator, config, run.step + 1, step_loss, grad_norm):
        run.skipped_steps += 1
    else:
        saved = scoring_snapshot(run) if config.skip_nonfinite_steps else None
        run.optimizer.step()
        if not scoring_update_valid(run, run.step + 1, saved):
            run.rejected_scoring_updates += 1
        report.loss += step_loss
        report.counted += 1
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return step_loss, grad_norm


def next_batch(run: Run, report: Report) -> dict[str, torch.Tensor]:
    """The next micro-batch of this process on its device (masked LM: masked with a generator seeded by the
    seed, the process and the micro-batch number, so that a resumed run masks as an uninterrupted one)."""
    rows = run.stream.next_batch()
    if run.first_indices is None:
        run.first_indices = list(getattr(run.stream, "last_indices", []))
    if run.config.task == "causal":
        batch = collate_causal(rows)
    else:
        generator = batch_generator(run.config.seed, run.accelerator.process_index, run.stream.batches_taken)
        batch = run.masked_collator(rows, generator)
    tokens = int(batch["attention_mask"].sum()) if "attention_mask" in batch else batch["input_ids"].numel()
    report.tokens += tokens
    run.tokens_local += tokens
    run.examples_seen += len(rows)
    return {k: v.to(run.accelerator.device) for k, v in batch.items()}


def nonfinite_step(accelerator, config: PretrainConfig, step: int, loss: torch.Tensor, grad_norm) -> bool:
    """True if this step's loss (on any process) or gradient norm is NaN/inf and the user asked to skip such
    steps; raises NonFiniteError naming the step if not. With fp16 loss scaling, non-finite gradients are the
    scaler's business (it skips those updates itself), so only the loss is checked."""
    checks = [loss.detach().float().reshape(())]
    if grad_norm is not None and getattr(accelerator, "scaler", None) is None:
        checks.append(grad_norm.detach().float().reshape(()).to(loss.device))
    bad = (~torch.isfinite(torch.stack(checks))).float()
    bad = accelerator.reduce(bad, reduction="sum") if accelerator.num_processes > 1 else bad
    if not bool(bad.any()):
        return False
    if config.skip_nonfinite_steps:
        logger.warning("step %d: non-finite loss or gradient norm; update skipped (--skip_nonfinite_steps)", step)
        return True
    what = "the loss" if bad[0] > 0 else "the gradient norm"
    raise NonFiniteError(
        f"step {step}: {what} is not finite (loss {float(loss):.6g}"
        + (f", gradient norm {float(grad_norm):.6g}" if grad_norm is not None else "")
        + "); training stopped before the update, no checkpoint of this step is written. Lower learning_rate, "
        "check the data, or pass --skip_nonfinite_steps to skip such steps (counted in metrics.json)"
    )


def _listed(problems: list[str], shown: int = 4) -> str:
    return "; ".join(problems[:shown]) + (f"; and {len(problems) - shown} more" if len(problems) > shown else "")


def scoring_snapshot(run: Run) -> list[tuple[torch.Tensor, torch.Tensor, dict[str, Any]]]:
    """(parameter, copy of its values, copy of its optimizer state) for every trained scoring parameter: a few
    floats per layer, taken before the update so that `scoring_update_valid` can undo the scoring part of it."""
    inner = getattr(run.optimizer, "optimizer", run.optimizer)
    trained = [p for name, p in run.unwrapped.named_parameters() if p.requires_grad and is_scoring(name)]
    if any(not inner.state.get(p) for p in trained):
        # before its first update a parameter has no state; AdamW's initial one (step 0, zero moments) is what
        # an undone update restores, so that a checkpoint holds every parameter's state and resumes exactly
        prime_adam_state(run.optimizer)
    with torch.no_grad():
        return [(p, p.detach().clone(), {k: v.clone() if isinstance(v, torch.Tensor) else v
                                          for k, v in inner.state[p].items()}) for p in trained]


def scoring_update_valid(run: Run, step: int, saved) -> bool:
    """Check the scoring parameters the optimizer update of `step` has just changed, before the step is counted,
    logged, evaluated or saved (the attention layers would refuse them at the next forward, without the step).

    Valid: True. Invalid (b <= 0, n < 1, NaN, ...: an update too large for them, e.g. a learning rate that drives a
    softplus b to exactly 0): with `--skip_nonfinite_steps` (`saved` taken), the scoring part of the update is
    undone, values and optimizer state restored bitwise from `saved`, the rest of the update kept; False.
    Otherwise ScoringParameterError naming the step; no checkpoint of it is written."""
    problems = scoring_parameter_problems(run.unwrapped)
    if not problems:
        return True
    if saved:
        inner = getattr(run.optimizer, "optimizer", run.optimizer)
        with torch.no_grad():
            for parameter, values, state in saved:
                parameter.copy_(values)
                inner.state[parameter] = state  # (the copies: nothing else holds them)
        left = scoring_parameter_problems(run.unwrapped)
        if not left:
            logger.warning(
                "step %d: the update left scoring parameters invalid (%s); their update is undone (values and "
                "optimizer state restored), the other weights keep theirs (--skip_nonfinite_steps). Lower "
                "learning_rate or scoring_learning_rate if this repeats", step, _listed(problems))
            return False
        problems = left  # (not restorable: e.g. parameters the optimizer holds under other names)
    checkpoints = list_checkpoints(run.output_dir)
    resume = (f"the last checkpoint is {checkpoints[-1][1]} (continue from it with --resume after the change)"
              if checkpoints else "no checkpoint was written before it")
    raise ScoringParameterError(
        f"step {step}: the optimizer update left scoring parameters outside their valid range (b > 0, n >= 1, "
        f"t, s, m > 0, alpha > 1, all finite): {_listed(problems)}. Training stopped after that update; no checkpoint of this "
        f"step is written, {resume}. Lower learning_rate (or set a smaller scoring_learning_rate), lengthen "
        "warmup_steps, or check the parameters' bounds and parametrization (scoring_parametrization: softplus keeps "
        "b > 0 and n >= 1 until an update far too large underflows them); --skip_nonfinite_steps undoes such "
        "scoring updates and continues, counting them (rejected_scoring_updates)"
    )


# --------------------------------------------------------------------------------------------------
# Reporting and saving
# --------------------------------------------------------------------------------------------------


def log(run: Run, record: dict[str, Any]) -> None:
    """One record of the run's history: the trackers, log_history.jsonl and `run.history`."""
    record = {"step": run.step, **record}
    run.history.append(record)
    numbers = {k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float))}
    run.accelerator.log(numbers, step=run.step)
    if run.main:
        with open_for_append(run.output_dir, run.output_dir / "log_history.jsonl", "run folder") as handle:
            handle.write(json.dumps(record) + "\n")


def log_training(run: Run, report: Report, step_loss: torch.Tensor, grad_norm, progress) -> None:
    """The window's mean loss, learning rate, throughput and scoring parameters, over all processes."""
    accelerator = run.accelerator
    reduced = accelerator.reduce(
        torch.stack([report.loss.double() / max(report.counted, 1), step_loss.double(),
                     torch.tensor(float(report.tokens), dtype=torch.float64, device=accelerator.device)]),
        reduction="sum",
    ).tolist()
    seconds = time.perf_counter() - report.started
    report.windows.append((reduced[2], seconds))
    world = accelerator.num_processes
    report.last_loss = reduced[1] / world
    record = {
        "loss": reduced[0] / world,
        "step_loss": report.last_loss,
        "learning_rate": run.scheduler.get_last_lr()[0],
        "tokens_per_second": reduced[2] / max(seconds, 1e-9),
        "seconds_per_step": seconds / report.steps,
        "tokens_seen": sum(gather_ints(accelerator, run.tokens_local)),
        "epoch": run.stream.epoch,
    }
    if grad_norm is not None:
        record["grad_norm"] = float(grad_norm)
    if run.config.skip_nonfinite_steps:
        record["skipped_nonfinite_steps"] = run.skipped_steps
        record["rejected_scoring_updates"] = run.rejected_scoring_updates
    record.update(scoring_statistics(run.unwrapped))
    log(run, record)
    progress.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['learning_rate']:.2e}",
                         tok_s=f"{record['tokens_per_second']:.0f}")
    if progress.disable and run.main:  # off a terminal: a plain line per logging window is the progress
        logger.info("step %d/%d: loss %.4f, lr %.2e, %.0f tokens/s", run.step, run.config.max_steps, record["loss"],
                    record["learning_rate"], record["tokens_per_second"])
    report.reset()


def save(run: Run, report: Report) -> None:
    """A checkpoint of this step (collective; the main process writes it)."""
    accelerator, config = run.accelerator, run.config
    tokens_per_process = gather_ints(accelerator, run.tokens_local)
    trainer_state = {
        "step": run.step,
        "max_steps": config.max_steps,
        "tokens_seen": sum(tokens_per_process),
        "tokens_seen_per_process": tokens_per_process,
        "num_processes": accelerator.num_processes,
        "examples_seen_per_process": gather_ints(accelerator, run.examples_seen),
        "skipped_nonfinite_steps": run.skipped_steps,
        "rejected_scoring_updates": run.rejected_scoring_updates,
        "logging_window": report.window_state(accelerator),
        "run_name": run.run_name,
        "config": config.to_dict(),
    }
    save_checkpoint(accelerator, run.output_dir, run.step, trainer_state, run.stream.state_dict(), run.tokenizer,
                    config.save_total_limit, run.prepared, run.optimizer, run.scheduler)


def finish(run: Run, report: Report) -> PretrainResult:
    """metrics.json, the final folder (when max_steps is reached), the optional push; the trackers closed."""
    accelerator, config, output_dir = run.accelerator, run.config, run.output_dir
    metrics = run_metrics(run, report)
    final_dir = None
    if run.main:
        atomic_write_json(output_dir / "metrics.json", metrics)
    if run.step == config.max_steps:
        final_dir = export_final(accelerator, run.unwrapped, run.tokenizer, config, metrics, output_dir)
    accelerator.wait_for_everyone()
    checkpoints = list_checkpoints(output_dir)
    history = read_history(output_dir / "log_history.jsonl") if run.main else run.history
    result = PretrainResult(str(output_dir), str(final_dir) if final_dir else None,
                            str(checkpoints[-1][1]) if checkpoints else None, run.step, metrics, history)
    if run.main and config.push_to_hub and final_dir is not None:
        push_final(final_dir, config)
    accelerator.wait_for_everyone()
    release_training_objects(run)
    accelerator.end_training()  # closes the trackers (and, when distributed, the process group): last
    return result


def release_training_objects(run: Run) -> None:
    """Drop the prepared model, optimizer and schedule before the process group is destroyed. DDP's Reducer holds
    the group: when the Reducer's deallocation drops the group's last reference (after `destroy_process_group`), it
    joins gloo's worker threads holding the GIL, and a worker still freeing a finished collective's tensors waits
    for the GIL: both hang (seen here: one of two CPU processes hung at exit in 1 run of 3 on a loaded machine).
    Dropped first, the group's last reference is torch's own, whose destructor releases the GIL."""
    run.model = run.prepared = run.optimizer = run.scheduler = None
    run.accelerator.free_memory()  # accelerate's references, and a garbage collection for any cycle through them


def run_metrics(run: Run, report: Report) -> dict[str, Any]:
    """The figures of metrics.json (collective: every process must call it)."""
    accelerator, config, model = run.accelerator, run.config, run.unwrapped
    wall = time.perf_counter() - report.wall_start
    distributed = distributed_summary(accelerator, model, run.examples_seen, run.first_indices,
                                      config.per_device_train_batch_size)
    tokens_seen = sum(gather_ints(accelerator, run.tokens_local))
    timed = report.windows[1:] if len(report.windows) > 1 else report.windows
    timed_seconds = sum(seconds for _, seconds in timed)
    last_eval = report.last_eval or {}
    return {
        "run_name": run.run_name,
        "task": config.task,
        "model_preset": config.model.preset if config.model.pretrained is None else None,
        "uptrained_from": source_record(config),
        "eval_loss_at_start": (report.start_eval or {}).get("loss"),
        "attention_scoring": model.config.attention_scoring,
        "attn_implementation": model.config._attn_implementation,  # what ran (a standard name maps onto ssa-hf's)
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": run.step,
        "max_steps": config.max_steps,
        "tokens_seen": tokens_seen,
        "final_step_loss": report.last_loss,
        "final_train_loss": next((r["loss"] for r in reversed(run.history) if "loss" in r), None),
        "eval_loss": last_eval.get("loss"),
        "eval_perplexity": last_eval.get("perplexity"),
        "eval_tokens": last_eval.get("tokens"),
        "train_tokens_per_second": sum(t for t, _ in timed) / timed_seconds if timed_seconds > 0 else None,
        "wall_time_s": wall,
        "resumed_from": str(run.start.checkpoint) if run.start.checkpoint is not None else None,
        "resume_skipped_checkpoints": run.start.skipped,
        "skipped_nonfinite_steps": run.skipped_steps,
        "rejected_scoring_updates": run.rejected_scoring_updates,
        "global_batch_size": config.per_device_train_batch_size * run.accumulation * accelerator.num_processes,
        "gradient_accumulation_steps": run.accumulation,
        "mixed_precision": accelerator.mixed_precision,
        "device": str(accelerator.device),
        "train_data": run.corpus.train_description,
        "train_examples": run.corpus.train_examples,
        "validation_data": run.corpus.validation_description,
        "validation_examples": len(run.validation),
        "scoring_parameters": scoring_values(model),
        "distributed": distributed,
        "versions": versions(),
    }
