"""Links out of the folders ssa-hf writes or publishes: a run folder whose final/, checkpoints/, a checkpoint or an
output file is a symbolic link to somewhere else is refused before any work (the files the link points at are
left as they were), and nothing is replaced through a link."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ssa_hf.reporting import LinkOutsideError, OutputDir, atomic_folder, open_for_append, refuse_link_path
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


# the one check every write goes through (`refuse_link_path`): on the path as given, from the output folder down


@pytest.mark.parametrize("where", ["last", "middle", "pointing inside"])
def test_refuse_link_path_refuses_a_link_anywhere_below_the_folder(where, tmp_path):
    out, outside = tmp_path / "out", _outside(tmp_path)
    (out / "runs").mkdir(parents=True)
    if where == "last":
        (out / "runs" / "a").symlink_to(outside, target_is_directory=True)
    elif where == "middle":
        (out / "runs" / "a").symlink_to(outside, target_is_directory=True)
    else:
        (out / "runs" / "b").mkdir()
        (out / "runs" / "a").symlink_to(out / "runs" / "b", target_is_directory=True)
    path = out / "runs" / "a" if where != "middle" else out / "runs" / "a" / "checkpoint" / "x"
    with pytest.raises(LinkOutsideError, match="runs/a is a symbolic link"):
        refuse_link_path(out, path)
    assert refuse_link_path(out, out / "runs" / "c") == out / "runs" / "c"


def test_refuse_link_path_refuses_a_path_that_climbs_out(tmp_path):
    with pytest.raises(LinkOutsideError, match="not inside"):
        refuse_link_path(tmp_path / "out", tmp_path / "out" / ".." / "elsewhere")


def test_a_log_is_never_appended_through_a_link(tmp_path):
    """reproduce's run.log: a link planted there (even after the check) is refused, its target left alone."""
    outside = _outside(tmp_path)
    run = tmp_path / "out" / "causal" / "softmax-seed0"
    run.mkdir(parents=True)
    (run / "run.log").symlink_to(outside / "notes.txt")
    with pytest.raises(LinkOutsideError, match="symbolic link"):
        open_for_append(tmp_path / "out", run / "run.log")
    (run / "run.log").unlink()
    with open_for_append(tmp_path / "out", run / "run.log") as log:
        log.write("progress\n")
    assert (run / "run.log").read_text() == "progress\n" and (outside / "notes.txt").read_text() == "keep me"


def test_atomic_folder_checks_the_destination_unresolved_and_its_owner(tmp_path):
    """A destination reached through a linked parent given as `root` is refused; with owner_file, a folder without
    it (the user's) is never replaced; one with it is."""
    outside = _outside(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "models").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkOutsideError, match="models is a symbolic link"):
        with atomic_folder(tmp_path / "out" / "models" / "final", overwrite=True, root=tmp_path / "out"):
            pass
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep")
    with pytest.raises(ValueError, match="not a folder ssa-hf wrote"):
        with atomic_folder(mine, overwrite=True, owner_file="ssa_conversion.json"):
            pass
    (mine / "ssa_conversion.json").write_text("{}")
    with atomic_folder(mine, overwrite=True, owner_file="ssa_conversion.json") as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in mine.iterdir()) == ["new.txt"] and (outside / "notes.txt").read_text() == "keep me"


def test_atomic_folder_refuses_a_destination_that_holds_its_source(tmp_path):
    models = tmp_path / "models"
    (models / "llama").mkdir(parents=True)
    (models / "llama" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds the source"):
        with atomic_folder(models, overwrite=True, sources=[models / "llama"]):
            pass
    assert (models / "llama" / "config.json").is_file()


def test_an_owned_output_folder_with_a_link_out_is_refused_at_once(tmp_path):
    outside = _outside(tmp_path)
    (tmp_path / "out" / "runs" / "a").mkdir(parents=True)
    (tmp_path / "out" / "runs" / "a" / "checkpoint").symlink_to(outside, target_is_directory=True)
    OutputDir(tmp_path / "out")  # (a folder the command only writes into: its other contents are the user's)
    with pytest.raises(LinkOutsideError, match="leading out of it"):
        OutputDir(tmp_path / "out", owned=True)
    with pytest.raises(LinkOutsideError, match="symbolic link"):
        OutputDir(tmp_path / "out", writes=["runs/a/checkpoint"])
