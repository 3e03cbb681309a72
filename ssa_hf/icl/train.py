"""Training of one ICL run (task, scoring function, seed) with accelerate: seeded, checkpointed, resumable.

- Seeds: `seed` fixes the model's initial weights (the same for every scoring function, since the scoring
  parameters start from constants) and the training prompts (a generator of their own, derived from task and seed).
  Two runs that differ only in the scoring function therefore start from the same weights and see the same data.
- Checkpoints: the training state of `ssa_hf.train.state` (model and optimizer as safetensors, scheduler, RNG
  states and the run's own state as JSON: nothing is pickled, so a checkpoint cannot run code) plus the training
  state (step, prompt generator, loss history), written to a temporary folder with a manifest and renamed into
  place (`ssa_hf.reporting.atomic_folder`), so a stop at any moment leaves the previous checkpoint intact. A new
  call on the same folder resumes from it exactly: resumed and uninterrupted training give the same weights. The
  run folder is locked while a run trains in it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import math
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..regular_files import read_json
from ..reporting import ProgressLines, atomic_folder, atomic_write_json, remove_stale_temporaries
from ..train.checkpoint import verify_checkpoint, write_manifest
from ..train.lock import RunLock
from ..train.state import CheckpointError, NonFiniteError, capture_state, load_state, non_finite_tensors, read_process_json, write_state
from .config import ICLModelConfig, TrainConfig
from .model import ICLModel
from .registry import ALIASES, get_task

logger = logging.getLogger("ssa_hf.icl")

CHECKPOINT = "checkpoint"
_OLD = ".checkpoint.old"
_SPEC = "run_spec.json"
_TRAINING = "training_state"  # training_state_rank0.json: step, prompt generator, loss history
_TRAINED_STEPS = "trained_steps"
# fields that may change between a stop and a resume without invalidating the checkpoint
_RESUMABLE_CHANGES = {"steps", "checkpoint_every", "log_every"}


@dataclass
class RunSpec:
    """One run of an experiment: a task (its canonical name; old names accepted), a scoring function, a seed."""

    task: str
    attention_scoring: str
    seed: int
    model: ICLModelConfig = field(default_factory=ICLModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        self.task = get_task(self.task).name

    @property
    def scoring(self) -> str:  # (the name before attention_scoring)
        return self.attention_scoring

    @property
    def name(self) -> str:
        return f"{self.task}-{self.attention_scoring}-seed{self.seed}"

    def model_config(self) -> ICLModelConfig:
        return dataclasses.replace(self.model, attention_scoring=self.attention_scoring)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["model"]["attention_scoring"] = self.attention_scoring
        return out


def upgrade_saved_spec(saved: dict) -> dict:
    """A run_spec.json written before the renames, in today's names (scoring -> attention_scoring, task linear ->
    linear_regression), so that old checkpoints resume and old results are reused."""
    saved = json.loads(json.dumps(saved))
    if "scoring" in saved and "attention_scoring" not in saved:
        saved["attention_scoring"] = saved.pop("scoring")
    model = saved.get("model") or {}
    if "scoring" in model and "attention_scoring" not in model:
        model["attention_scoring"] = model.pop("scoring")
    saved["task"] = ALIASES.get(saved.get("task"), saved.get("task"))
    return saved


@dataclass
class TrainResult:
    name: str
    steps: int
    final_loss: float | None
    train_seconds: float
    seconds_per_step: float | None
    history: list[dict]
    resumed_from: int | None
    scoring_parameters: dict
    checkpoint: str

    def to_dict(self) -> dict:
        return asdict(self)


def loss_fn(task: str, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The task's training loss (its record's): binary cross-entropy for quantifiers, squared error for regression."""
    return get_task(task).loss(outputs, labels)


def data_seed(task: str, seed: int) -> int:
    """Seed of a run's training prompts (from the task's `seed_name`: a renamed task keeps its prompts)."""
    return zlib.crc32(f"icl-train|{get_task(task).seed_name}|{seed}".encode())


class TrainingState:
    """What accelerate's save_state does not know about: the step, the prompt generator, the loss history."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator
        self.step = 0
        self.history: list[dict] = []
        self.train_seconds = 0.0
        # the logging window a checkpoint is saved inside (sum of its float32 step losses, exact in JSON): a resumed
        # run logs the same window loss as an uninterrupted one
        self.window_sum, self.window_steps = 0.0, 0

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "history": self.history,
            "train_seconds": self.train_seconds,
            "window_loss_sum": self.window_sum,
            "window_steps": self.window_steps,
            "generator": base64.b64encode(self.generator.get_state().numpy().tobytes()).decode("ascii"),
        }

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        self.history = list(state["history"])
        self.train_seconds = float(state["train_seconds"])
        window_sum, window_steps = state.get("window_loss_sum", 0.0), state.get("window_steps", 0)  # (older: none)
        if (isinstance(window_sum, bool) or not isinstance(window_sum, (int, float)) or not math.isfinite(window_sum)
                or isinstance(window_steps, bool) or not isinstance(window_steps, int)
                or not 0 <= window_steps <= self.step):
            raise ValueError(f"the logging window (window_loss_sum={window_sum!r}, window_steps={window_steps!r}) is "
                             "not a finite loss sum and a step count")
        self.window_sum, self.window_steps = float(window_sum), window_steps
        raw = bytearray(base64.b64decode(state["generator"], validate=True))
        self.generator.set_state(torch.frombuffer(raw, dtype=torch.uint8))


def resolve_device(device: str) -> str:
    from ..devices import resolve_device as checked

    return checked(device)


def find_checkpoint(run_dir: str | Path) -> Path | None:
    """The run's checkpoint folder, or the previous one if a stop came between the two renames of a save; only
    a folder whose manifest verifies counts (a damaged one is named in a warning and not resumed from)."""
    run_dir = Path(run_dir)
    for name in (CHECKPOINT, _OLD):
        folder = run_dir / name
        if not folder.is_dir():
            continue
        reason = verify_checkpoint(folder, required=(_SPEC, "model.safetensors"))
        if reason is None:
            return folder
        logger.warning("%s: not resuming from it: %s", folder, reason)
    return None


def save_checkpoint(accelerator, run_dir: Path, spec: RunSpec, model, optimizer, scheduler, state) -> Path:
    """The training state into a temporary folder, with a manifest, then renamed to `run_dir/checkpoint`."""
    snapshot = capture_state(accelerator, model, optimizer, scheduler, {_TRAINING: state.state_dict()})
    bad = non_finite_tensors(snapshot.model)
    if bad:
        raise NonFiniteError(f"{spec.name}: the weights hold NaN or inf at step {state.step} ({', '.join(bad)}); "
                             "no checkpoint written (lower train.lr)")
    with atomic_folder(run_dir / CHECKPOINT, overwrite=True) as tmp:
        write_state(tmp, snapshot)
        atomic_write_json(tmp / _SPEC, {**spec.to_dict(), _TRAINED_STEPS: state.step})
        write_manifest(tmp, step=state.step)
    return run_dir / CHECKPOINT


def resume_problem(checkpoint: Path, spec: RunSpec, steps_done: int | None = None) -> str | None:
    """Why `spec` cannot resume or reuse `checkpoint` (None when it can): another run, other settings, or more
    steps trained than `spec` asks for (its results would be reported as those of a shorter run)."""
    saved = upgrade_saved_spec(read_json(checkpoint / _SPEC))
    current = json.loads(json.dumps(spec.to_dict()))  # same types as the saved JSON
    for key in ("task", "attention_scoring", "seed", "model"):
        if saved.get(key) != current[key]:
            return f"it belongs to a different run ({key}: {saved.get(key)!r}, now {current[key]!r})"
    for key, value in current["train"].items():
        if key not in _RESUMABLE_CHANGES and saved["train"].get(key) != value:
            return (f"it was trained with train.{key}={saved['train'].get(key)!r}, now {value!r}; to reuse it, "
                    f"ask for train.{key}={saved['train'].get(key)!r}")
    steps_done = saved.get(_TRAINED_STEPS) if steps_done is None else steps_done
    if steps_done is not None and steps_done > spec.train.steps:
        return (f"it has trained {steps_done} steps, more than train.steps={spec.train.steps}; to reuse it, ask for "
                f"train.steps={steps_done} (ssa-hf icl --steps {steps_done})")
    return None


def _check_resumable(checkpoint: Path, spec: RunSpec, steps_done: int | None = None) -> None:
    problem = resume_problem(checkpoint, spec, steps_done)
    if problem is not None:
        raise ValueError(f"cannot resume {checkpoint}: {problem}; to train anew, use another output folder or "
                         f"delete {checkpoint.parent}")


def build_model(spec: RunSpec, attn_implementation: str = "ssa_auto") -> ICLModel:
    """The run's model with its seeded initial weights."""
    from accelerate.utils import set_seed

    set_seed(spec.seed)
    return ICLModel(spec.model_config(), attn_implementation=attn_implementation)


def train_run(
    spec: RunSpec,
    run_dir: str | Path,
    device: str = "auto",
    progress: bool = True,
    stop_at: int | None = None,
    position: int = 0,
) -> tuple[ICLModel, TrainResult]:
    """Train (or resume, or just load when finished) one run in `run_dir`; returns the model and a summary.

    `stop_at` ends the call after that many steps in all (with a checkpoint), as a stop would; the next call
    resumes. The returned model is unwrapped, in eval mode, on the training device.
    """
    spec.train.validate()
    for name in ("lr", "weight_decay", "grad_clip", "sigma", "sigma_ab"):
        value = getattr(spec.train, name)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"train.{name} must be a finite number, got {value}")
    device = resolve_device(device)
    with RunLock(run_dir, "ICL training run"):
        remove_stale_temporaries(run_dir)
        return _train_locked(spec, Path(run_dir), device, progress, stop_at, position)


def _progress(spec: RunSpec, step: int, progress: bool, position: int):
    """The run's progress bar on a terminal, and off one a plain line at most every 30 s (`ProgressLines`)."""
    from tqdm.auto import tqdm

    bar = tqdm(total=spec.train.steps, initial=step, desc=spec.name, disable=not progress, leave=False,
               mininterval=0.5, dynamic_ncols=True, position=position)
    return bar, ProgressLines(logger, enabled=not progress)


def _resume(checkpoint: Path, spec: RunSpec, accelerator, model, optimizer, scheduler, state: TrainingState) -> None:
    _check_resumable(checkpoint, spec)
    load_state(checkpoint, accelerator, model, optimizer, scheduler)
    try:
        state.load_state_dict(read_process_json(checkpoint, _TRAINING, 0))
    except (KeyError, TypeError, ValueError) as error:  # (binascii.Error is a ValueError)
        raise CheckpointError(f"{checkpoint}/{_TRAINING}_rank0.json: {error}; the checkpoint is damaged: delete "
                              f"{checkpoint} to train the run again") from None
    _check_resumable(checkpoint, spec, steps_done=state.step)  # for checkpoints without trained_steps
    logger.info("%s: resuming from step %d (%s)", spec.name, state.step, checkpoint)


def _train_locked(spec: RunSpec, run_dir: Path, device: str, progress: bool, stop_at: int | None, position: int):
    from accelerate import Accelerator
    from transformers import get_constant_schedule_with_warmup

    accelerator = Accelerator(cpu=device == "cpu", mixed_precision=spec.train.mixed_precision)
    model = build_model(spec)
    optimizer = torch.optim.Adam(model.parameters(), lr=spec.train.lr, weight_decay=spec.train.weight_decay)
    scheduler = get_constant_schedule_with_warmup(optimizer, spec.train.warmup_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    state = TrainingState(torch.Generator().manual_seed(data_seed(spec.task, spec.seed)))

    checkpoint = find_checkpoint(run_dir)
    resumed_from = None
    if checkpoint is not None:
        _resume(checkpoint, spec, accelerator, model, optimizer, scheduler, state)
        resumed_from = state.step

    total = spec.train.steps if stop_at is None else min(spec.train.steps, stop_at)
    task = get_task(spec.task)
    bar, lines = _progress(spec, state.step, progress, position)
    model.train()
    window = torch.tensor(state.window_sum, dtype=torch.float32, device=accelerator.device)
    window_steps = state.window_steps
    started = time.perf_counter()
    steps_here = 0
    while state.step < total:
        points = spec.train.curriculum.points(state.step)
        prompts = task.sample(spec.train.batch_size, points, spec.train.sigma, state.generator, spec.train.sigma_ab)
        prompts = prompts.to(accelerator.device)
        with accelerator.autocast():
            outputs = model(prompts.features())[:, 0::2]
        loss = task.loss(outputs.float(), prompts.ys)
        if not torch.isfinite(loss):
            raise NonFiniteError(f"{spec.name}: the training loss is {float(loss)} at step {state.step + 1}; "
                                 "training stopped before the update (lower train.lr)")
        accelerator.backward(loss)
        if spec.train.grad_clip is not None:
            accelerator.clip_grad_norm_(model.parameters(), spec.train.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state.step += 1
        steps_here += 1
        window += loss.detach()
        window_steps += 1
        if state.step % spec.train.log_every == 0 or state.step == total:
            mean = float(window) / window_steps
            state.history.append({"step": state.step, "loss": mean, "points": points})
            bar.set_postfix(loss=f"{mean:.4f}", points=points)
            lines.update("%s: step %d/%d, loss %.4f", spec.name, state.step, total, mean)
            window, window_steps = torch.zeros((), device=accelerator.device), 0
        bar.update(1)
        if state.step % spec.train.checkpoint_every == 0 or state.step == total:
            state.train_seconds += time.perf_counter() - started
            started = time.perf_counter()
            state.window_sum, state.window_steps = float(window), window_steps
            save_checkpoint(accelerator, run_dir, spec, model, optimizer, scheduler, state)
    bar.close()
    state.train_seconds += time.perf_counter() - started if steps_here else 0.0
    if checkpoint is None and steps_here == 0:
        save_checkpoint(accelerator, run_dir, spec, model, optimizer, scheduler, state)

    model = accelerator.unwrap_model(model)
    model.eval()
    result = TrainResult(
        name=spec.name,
        steps=state.step,
        final_loss=state.history[-1]["loss"] if state.history else None,
        train_seconds=state.train_seconds,
        seconds_per_step=state.train_seconds / state.step if state.step else None,
        history=list(state.history),
        resumed_from=resumed_from,
        scoring_parameters=model.scoring_parameters(),
        checkpoint=str(run_dir / CHECKPOINT),
    )
    accelerator.free_memory()
    return model, result
