"""Links out of the folders ssa-hf writes or publishes: a run folder whose final/, checkpoints/, a checkpoint or an
output file is a symbolic link to somewhere else is refused before any work (the files the link points at are
left as they were), and nothing is replaced through a link."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ssa_hf.reporting import atomic_folder
LinkOutsideError = Exception
from ssa_hf.train import pretrain

from .conftest import tiny_config


def _outside(tmp_path: Path) -> Path:
    """A folder of the user's outside the run, with a file that must survive."""
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    return folder


def _link_final(run: Path, outside: Path) -> None:
    shutil.rmtree(run / "final")
    (run / "final").symlink_to(outside, target_is_directory=True)


def _link_checkpoints(run: Path, outside: Path) -> None:
    shutil.copytree(run / "checkpoints", outside / "checkpoints")
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to(outside / "checkpoints", target_is_directory=True)


def _link_one_checkpoint(run: Path, outside: Path) -> None:
    step = sorted((run / "checkpoints").iterdir())[-1]
    shutil.copytree(step, outside / step.name)
    shutil.rmtree(step)
    step.symlink_to(outside / step.name, target_is_directory=True)


def _link_file(name: str):
    def plant(run: Path, outside: Path) -> None:
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(outside / "notes.txt")
    return plant


LINKS = {
    "final": _link_final,
    "checkpoints": _link_checkpoints,
    "checkpoint": _link_one_checkpoint,
    "metrics.json": _link_file("metrics.json"),
    "log_history.jsonl": _link_file("log_history.jsonl"),
    "run.lock": _link_file("run.lock"),
    "tokenizer file": _link_file("tokenizer/tokenizer.json"),
}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("resume", ["latest", None])
@pytest.mark.parametrize("what", sorted(LINKS))
def test_a_run_folder_with_a_link_out_is_refused_before_training(what, resume, corpora, reference_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reference_runs("causal").output_dir, run, symlinks=True)
    outside = _outside(tmp_path)
    LINKS[what](run, outside)
    before = _snapshot(outside)
    with pytest.raises(LinkOutsideError, match="symbolic link.*leading out of it"):
        pretrain(tiny_config("causal", corpora, run, resume=resume, overwrite_output_dir=True))
    assert _snapshot(outside) == before, "files outside the run folder were changed through a link"


def test_atomic_folder_never_replaces_through_a_link(tmp_path):
    outside = _outside(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "final").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkOutsideError, match="is a symbolic link"):
        with atomic_folder(tmp_path / "out" / "final", overwrite=True) as tmp:
            (tmp / "x").write_text("new")
    assert (outside / "notes.txt").read_text() == "keep me" and os.path.islink(tmp_path / "out" / "final")


def test_an_icl_run_folder_with_a_link_out_is_refused(tmp_path):
    """ICL runs take the same lock, so the same check (its checkpoint/ linked elsewhere)."""
    from ssa_hf.train.lock import RunLock

    outside = _outside(tmp_path)
    run = tmp_path / "runs" / "every-ssa-seed0"
    run.mkdir(parents=True)
    (run / "checkpoint").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkOutsideError, match="ICL training run folder"):
        RunLock(run, "ICL training run").acquire()
    assert not (run / "run.lock").exists() and (outside / "notes.txt").read_text() == "keep me"
