"""Training checkpoints: written atomically with a manifest, never unpickled, resumed exactly.

A checkpoint is the folder `<output_dir>/checkpoints/step-XXXXXXXX/` with
- the training state of `ssa_hf.train.state` (safetensors and JSON only: weights, optimizer, scheduler, the RNG
  states of every process);
- `data_state_rank<R>.json`: each process's position in its data stream;
- `tokenizer/`: the run's tokenizer;
- `trainer_state.json`: step, tokens seen, number of processes and the config;
- `manifest.json`, written last: the size and sha256 of every other file.

The main process gathers the state (a collective step), writes it into a temporary sibling folder and renames
that into place (`ssa_hf.reporting.atomic_folder`); a failed write (a full disk) removes the temporary folder,
keeps the previous checkpoints and is reported to every process. A checkpoint is resumed from only if its
manifest verifies; `--resume latest` takes the newest that does and names the newer ones it skipped, and why.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..regular_files import NotARegularFileError, read_json, sha256_file
from ..reporting import FileTooLargeError, NoSpaceError, atomic_folder, atomic_write_json
from .state import CheckpointError, NonFiniteError, capture_state, load_state, non_finite_tensors, read_process_json, write_state

logger = logging.getLogger("ssa_hf.train")

STATE_FILE = "trainer_state.json"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "ssa-hf-checkpoint/1"
PATTERN = re.compile(r"^step-(\d{8})$")


def checkpoints_dir(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "checkpoints"


# ----------------------------------------------------------------------------------------------- manifests


def write_manifest(folder: Path, **extra: Any) -> Path:
    """`manifest.json`: size and sha256 of every file in `folder` (written last: its presence marks the folder
    complete)."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name != MANIFEST_FILE:
            files[name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    return atomic_write_json(folder / MANIFEST_FILE, {"format": MANIFEST_FORMAT, **extra, "files": files})


def verify_checkpoint(folder: str | os.PathLike, required: tuple[str, ...] = (STATE_FILE, "model.safetensors")) -> str | None:
    """None if every file the manifest lists is there with its size and hash, the `required` ones among them;
    else what is wrong."""
    folder = Path(folder)
    try:
        manifest = read_json(folder / MANIFEST_FILE)  # (a FIFO is refused, never waited on)
        files = manifest["files"]
        if manifest.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
            return f"{MANIFEST_FILE} is not an ssa-hf checkpoint manifest ({manifest.get('format')!r})"
    except FileNotFoundError:
        return f"no {MANIFEST_FILE} (written last, so the save did not finish)"
    except NotARegularFileError as error:
        return str(error)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"{MANIFEST_FILE} is unreadable ({type(error).__name__})"
    for name, entry in files.items():
        path = folder / name
        if ".." in Path(name).parts or not path.exists():
            return f"{name} is missing"
        if not path.is_file():  # a FIFO or a device would block the hash below
            return f"{name} is not a regular file"
        if path.stat().st_size != entry.get("size"):
            return f"{name} has {path.stat().st_size} bytes, the manifest says {entry.get('size')} (truncated?)"
        if sha256_file(path) != entry.get("sha256"):
            return f"{name} does not match its sha256 in the manifest (damaged)"
    for name in required:
        if name not in files:
            return f"the manifest lists no {name}"
    return None


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Checkpoints of a run that finished writing (they have a manifest), oldest first, as (step, folder).
    Whether their files are intact is checked on resume (`verify_checkpoint`)."""
    folder = checkpoints_dir(output_dir)
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        match = PATTERN.match(child.name)
        if match and (child / MANIFEST_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


@dataclass
class ResumePoint:
    """The checkpoint a run resumes from, and the newer ones it skipped with the reason."""

    checkpoint: Path | None
    skipped: list[dict[str, str]] = field(default_factory=list)
    step: int = 0  # the checkpoint's step (set once the resume is checked against the config)


def newest_intact_checkpoint(output_dir: str | os.PathLike) -> ResumePoint:
    """The newest checkpoint whose manifest verifies (folders without a manifest count as skipped too)."""
    root = checkpoints_dir(output_dir)
    candidates = sorted((int(m.group(1)), c) for c in (root.iterdir() if root.is_dir() else [])
                        if (m := PATTERN.match(c.name)) and c.is_dir())
    skipped = []
    for _, folder in reversed(candidates):
        reason = verify_checkpoint(folder)
        if reason is None:
            return ResumePoint(folder, skipped)
        skipped.append({"checkpoint": str(folder), "reason": reason})
    return ResumePoint(None, skipped)


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    return newest_intact_checkpoint(output_dir).checkpoint


def resolve_resume(resume: str | None, output_dir: str | os.PathLike) -> ResumePoint:
    """The checkpoint `resume` names ("latest"/"auto" or a path), verified; ResumePoint(None) to start afresh."""
    if resume is None or str(resume).lower() in ("false", "no", "none", ""):
        return ResumePoint(None)
    if str(resume).lower() in ("latest", "true", "yes", "auto"):
        point = newest_intact_checkpoint(output_dir)
        for entry in point.skipped:
            logger.warning("--resume: skipped %s: %s", entry["checkpoint"], entry["reason"])
        if point.checkpoint is None:
            if str(resume).lower() == "auto" and not point.skipped:
                return point
            damaged = f" ({len(point.skipped)} damaged or incomplete, listed above)" if point.skipped else ""
            raise FileNotFoundError(
                f"--resume: no complete checkpoint in {checkpoints_dir(output_dir)}{damaged}; start without --resume "
                f"(or --resume auto to resume only when one exists)"
            )
        logger.info("--resume: using %s, the newest checkpoint whose manifest verifies", point.checkpoint)
        return point
    path = Path(resume)
    if not path.is_dir():
        raise FileNotFoundError(f"--resume {resume}: no such checkpoint folder")
    reason = verify_checkpoint(path)
    if reason is not None:
        raise CheckpointError(f"--resume {resume}: not an intact checkpoint: {reason}; give another checkpoint "
                              "folder or --resume latest (the newest intact one)")
    return ResumePoint(path)


# ------------------------------------------------------------------------------------------ process agreement


def on_main(accelerator, fn: Callable[[], Any]) -> Any:
    """Run `fn` on the main process only and hand its result (or its exception) to every process, so that a
    failure on the main process stops all of them instead of leaving the others waiting."""
    outcome: list[Any] = [None, None]
    if accelerator.is_main_process:
        try:
            outcome[0] = fn()
        except Exception as error:  # handed to the other processes, then raised everywhere
            outcome[1] = error
    if accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        broadcast_object_list(outcome, from_process=0)  # between this run's own processes
    if outcome[1] is not None:
        raise outcome[1]
    return outcome[0]


# --------------------------------------------------------------------------------------------------- saving


def _write_checkpoint(final: Path, snapshot, trainer_state: dict[str, Any], tokenizer) -> None:
    bad = non_finite_tensors(snapshot.model)
    if bad:
        raise NonFiniteError(
            f"step {trainer_state['step']}: the weights hold NaN or inf ({', '.join(bad)}); no checkpoint written "
            "(lower the learning rate, or check the data and the loss)"
        )
    try:
        with atomic_folder(final, overwrite=True) as tmp:
            write_state(tmp, snapshot)
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp / "tokenizer"))
            atomic_write_json(tmp / STATE_FILE, trainer_state)
            write_manifest(tmp, step=trainer_state["step"])
    except FileTooLargeError as error:
        raise FileTooLargeError(error.errno, f"the checkpoint of step {trainer_state['step']} was not written: "
                                f"{error.strerror} (earlier checkpoints are kept; resume with --resume once it "
                                "fits)") from error
    except NoSpaceError as error:
        raise NoSpaceError(error.errno, f"no space left on {final.parent}: the checkpoint of step "
                           f"{trainer_state['step']} was not written (earlier checkpoints are kept); free space and "
                           "resume with --resume") from error


def _prune(output_dir: Path, keep: int) -> None:
    if keep > 0:
        for _, older in list_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(older, ignore_errors=True)


def save_checkpoint(
    accelerator,
    output_dir: str | os.PathLike,
    step: int,
    trainer_state: dict[str, Any],
    data_state: dict[str, Any],
    tokenizer,
    keep: int,
    model,
    optimizer,
    scheduler,
) -> Path:
    """Write the checkpoint of `step` (all processes call this); returns its folder."""
    final = checkpoints_dir(output_dir) / f"step-{step:08d}"
    snapshot = capture_state(accelerator, model, optimizer, scheduler, {"data_state": data_state})

    def write() -> None:
        _write_checkpoint(final, snapshot, trainer_state, tokenizer)
        _prune(Path(output_dir), keep)

    on_main(accelerator, write)
    return final


# -------------------------------------------------------------------------------------------------- loading


def read_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """trainer_state.json, its counters checked (whole numbers >= 0, one per process)."""
    path = Path(checkpoint) / STATE_FILE
    try:
        state = read_json(path)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable ({type(error).__name__}); the checkpoint is damaged") from None
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    processes = state.get("num_processes", 1) if isinstance(state, dict) else None
    problem = None if isinstance(state, dict) and whole(processes) and processes > 0 else "num_processes"
    for name in ("step", "tokens_seen_per_process", "examples_seen_per_process"):
        value = state.get(name) if problem is None else None
        per_process = name.endswith("_per_process")
        if problem is None and not (whole(value) if not per_process else
                                    isinstance(value, list) and len(value) == processes and all(map(whole, value))):
            problem = name
    if problem is not None:
        raise CheckpointError(f"{path}: {problem} is not a whole number >= 0 (one per process); the checkpoint is "
                              "damaged: resume from another one (--resume PATH)")
    if "logging_window" in state and not _valid_window(state["logging_window"], processes, whole):
        raise CheckpointError(f"{path}: logging_window is not the state of a logging window (steps, seconds and one "
                              "finite loss sum, step count and token count per process); the checkpoint is damaged: "
                              "resume from another one (--resume PATH)")
    return state


def _valid_window(window: Any, processes: int, whole) -> bool:
    # (saved by loop.Report.window_state; checkpoints written before it have none: an empty window)
    if not isinstance(window, dict) or not whole(window.get("steps")):
        return False
    seconds = window.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf:
        return False
    per_process = [window.get(k) for k in ("loss_sum_per_process", "counted_per_process", "tokens_per_process")]
    if not all(isinstance(v, list) and len(v) == processes for v in per_process):
        return False
    sums, counted, tokens = per_process
    return (all(not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) for v in sums)
            and all(whole(v) and v <= window["steps"] for v in counted) and all(map(whole, tokens)))


def load_checkpoint(accelerator, checkpoint: Path, model, optimizer, scheduler) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore the training state from `checkpoint` (verified by `resolve_resume`); returns (trainer state, this
    process's data state)."""
    checkpoint = Path(checkpoint)
    state = read_trainer_state(checkpoint)
    saved = int(state.get("num_processes", 1))
    if saved != accelerator.num_processes:
        raise ValueError(
            f"{checkpoint} was written by {saved} process(es); resume it with the same number "
            f"(this run has {accelerator.num_processes}): RNG and stream positions are per process"
        )
    load_state(checkpoint, accelerator, model, optimizer, scheduler)
    return state, read_process_json(checkpoint, "data_state", accelerator.process_index)
