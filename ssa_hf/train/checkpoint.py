"""Training checkpoints: written atomically, the last K kept, resumed exactly.

A checkpoint is the folder `<output_dir>/checkpoints/step-XXXXXXXX/` with
- accelerate's state (`accelerator.save_state`): model weights, optimizer, the registered scheduler, the RNG states
  of every process (torch, numpy, random, CUDA), the gradient scaler;
- `data_state_rank<R>.json`: each process's position in its data stream;
- `tokenizer/`: the run's tokenizer;
- `trainer_state.json`, written last: step, tokens seen, number of processes and the config. A folder without it
  is incomplete and never resumed from.

Every process writes into `.tmp-step-XXXXXXXX/`; the main process renames it to its final name once all are done
(a rename is atomic), then deletes the oldest checkpoints beyond the limit. A crash leaves either the previous
checkpoints or the new one, never a half-written folder under a checkpoint name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from ..reporting import atomic_write_json

STATE_FILE = "trainer_state.json"
PATTERN = re.compile(r"^step-(\d{8})$")


def checkpoints_dir(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / "checkpoints"


def list_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first, as (step, folder)."""
    folder = checkpoints_dir(output_dir)
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        match = PATTERN.match(child.name)
        if match and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    found = list_checkpoints(output_dir)
    return found[-1][1] if found else None


def resolve_resume(resume: str | None, output_dir: str | os.PathLike) -> Path | None:
    """The checkpoint folder `resume` names ("latest" or a path), or None to start afresh."""
    if resume is None or str(resume).lower() in ("false", "no", "none", ""):
        return None
    if str(resume).lower() in ("latest", "true", "yes", "auto"):
        latest = latest_checkpoint(output_dir)
        if latest is None:
            if str(resume).lower() == "auto":
                return None
            raise FileNotFoundError(
                f"--resume: no complete checkpoint in {checkpoints_dir(output_dir)}; start without --resume "
                f"(or --resume auto to resume only when one exists)"
            )
        return latest
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"--resume {resume}: not a complete checkpoint folder (no {STATE_FILE})")
    return path


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(
    accelerator,
    output_dir: str | os.PathLike,
    step: int,
    trainer_state: dict[str, Any],
    data_state: dict[str, Any],
    tokenizer,
    keep: int,
) -> Path:
    """Write the checkpoint of `step` (all processes call this); returns its folder."""
    root = checkpoints_dir(output_dir)
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-step-{step:08d}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    atomic_write_json(tmp / f"data_state_rank{accelerator.process_index}.json", data_state)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        tokenizer.save_pretrained(str(tmp / "tokenizer"))
        atomic_write_json(tmp / STATE_FILE, trainer_state)
        _fsync_dir(tmp)
        if final.exists():  # the same step saved again (e.g. a resumed run that ends where it started)
            old = root / f".old-step-{step:08d}"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(root)
        if keep > 0:
            for _, older in list_checkpoints(output_dir)[:-keep]:
                shutil.rmtree(older, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def read_trainer_state(checkpoint: Path) -> dict[str, Any]:
    return json.loads((Path(checkpoint) / STATE_FILE).read_text())


def load_checkpoint(accelerator, checkpoint: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore accelerate's state from `checkpoint`; returns (trainer state, this process's data state)."""
    checkpoint = Path(checkpoint)
    state = read_trainer_state(checkpoint)
    saved = int(state.get("num_processes", 1))
    if saved != accelerator.num_processes:
        raise ValueError(
            f"{checkpoint} was written by {saved} process(es); resume it with the same number "
            f"(this run has {accelerator.num_processes}): RNG and stream positions are per process"
        )
    data_file = checkpoint / f"data_state_rank{accelerator.process_index}.json"
    if not data_file.is_file():
        raise FileNotFoundError(f"{checkpoint}: missing {data_file.name}; the checkpoint is incomplete")
    accelerator.load_state(str(checkpoint))
    return state, json.loads(data_file.read_text())
