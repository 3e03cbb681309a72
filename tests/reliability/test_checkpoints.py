"""Checkpoints under faults: planted pickles never load, damaged checkpoints are skipped for the newest intact one,
a full disk keeps the previous checkpoint and leaves no temporary folder, kill -9 resumes bit-identically."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ssa_hf.reporting import NoSpaceError, atomic_folder
from ssa_hf.train import list_checkpoints, pretrain
from ssa_hf.train.checkpoint import MANIFEST_FILE, verify_checkpoint, write_manifest
from ssa_hf.train.state import CheckpointError

from ..train.launch import kill_9_after_checkpoints
from .conftest import planted_pickle_bytes, tiny_config

# what accelerate's save_state used to write (and load_state unpickled), and torch's usual pickle names
PICKLE_NAMES = ["custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin", "scheduler.bin",
                "pytorch_model.bin", "scaler.pt", "training_args.bin", "rng_state.pth"]


def assert_same_weights(a_dir, b_dir):
    a = load_file(Path(a_dir) / "model.safetensors")
    b = load_file(Path(b_dir) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def stopped_run(corpora, folder, **overrides):
    """A causal run stopped after 3 of 6 steps, checkpoints after every step kept."""
    return pretrain(tiny_config("causal", corpora, folder, stop_after_steps=3, save_steps=1, save_total_limit=0,
                                **overrides))


def resume(corpora, folder, **overrides):
    return pretrain(tiny_config("causal", corpora, folder, resume="latest", save_steps=1, save_total_limit=0,
                                **overrides))


def test_checkpoints_hold_no_pickle_and_planted_pickles_never_load(corpora, reference_runs, tmp_path, marker):
    reference = reference_runs("causal")
    stopped_run(corpora, tmp_path / "run")
    newest = list_checkpoints(tmp_path / "run")[-1][1]
    stored = [p.relative_to(newest).as_posix() for p in newest.rglob("*") if p.is_file()]
    assert stored and all(name.endswith((".json", ".safetensors")) for name in stored), stored
    for name in PICKLE_NAMES:
        (newest / name).write_bytes(planted_pickle_bytes(marker))
    resumed = resume(corpora, tmp_path / "run")
    assert not marker.exists(), "a planted pickle in the checkpoint was unpickled"
    assert resumed.metrics["resumed_from"] == str(newest)
    assert resumed.metrics["final_step_loss"] == pytest.approx(reference.metrics["final_step_loss"], abs=1e-6)
    assert_same_weights(reference.final_dir, resumed.final_dir)


@pytest.mark.parametrize("damage", ["truncated", "no_manifest", "flipped_byte"])
def test_resume_skips_a_damaged_newest_checkpoint(damage, corpora, reference_runs, tmp_path, caplog):
    reference = reference_runs("causal")
    stopped_run(corpora, tmp_path / "run")
    newest = tmp_path / "run" / "checkpoints" / "step-00000003"
    weights = newest / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "no_manifest":  # a save stopped before its last file (what a rename-less copy could leave)
        (newest / MANIFEST_FILE).unlink()
    else:
        data = bytearray(weights.read_bytes())
        data[-5] ^= 0xFF
        weights.write_bytes(bytes(data))
    assert verify_checkpoint(newest) is not None
    resumed = resume(corpora, tmp_path / "run")
    assert resumed.metrics["resumed_from"].endswith("step-00000002")
    skipped = resumed.metrics["resume_skipped_checkpoints"]
    assert [Path(s["checkpoint"]).name for s in skipped] == ["step-00000003"]
    assert {"truncated": "truncated", "no_manifest": "no manifest.json", "flipped_byte": "sha256"}[damage] in skipped[0]["reason"]
    assert "skipped" in caplog.text and "step-00000003" in caplog.text
    assert_same_weights(reference.final_dir, resumed.final_dir)  # still exact: 2 + 4 steps == 6 steps


def test_an_explicit_damaged_checkpoint_is_refused(corpora, tmp_path):
    stopped_run(corpora, tmp_path / "run", max_steps=3)
    newest = tmp_path / "run" / "checkpoints" / "step-00000003"
    (newest / "optimizer.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="optimizer.safetensors has 0 bytes"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", resume=str(newest), max_steps=3))


def test_a_corrupt_rng_state_fails_resume_with_a_clear_error(corpora, tmp_path):
    """Documented choice (docs/dev/reliability.md): an RNG state that does not parse stops the resume (an inexact
    resume is never silent). A damaged file with an intact manifest is skipped like any damage (above); here the
    manifest was rewritten to match, so only the content check can catch it."""
    stopped_run(corpora, tmp_path / "run", max_steps=4)
    newest = tmp_path / "run" / "checkpoints" / "step-00000003"
    state = json.loads((newest / "rng_state_rank0.json").read_text())
    state["torch"] = state["torch"][: len(state["torch"]) // 2]
    (newest / "rng_state_rank0.json").write_text(json.dumps(state))
    write_manifest(newest, step=3)
    with pytest.raises(CheckpointError, match="rng_state_rank0.json: not a valid random-generator state"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", resume="latest", max_steps=4))


def _fail_on_call(monkeypatch, module, name, call: int):
    """Make `module.name` raise OSError(ENOSPC) on its `call`-th call (1-based), as a full disk would."""
    original = getattr(module, name)
    calls = {"n": 0}

    def fake(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, fake)


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(corpora, tmp_path, monkeypatch):
    import safetensors.torch

    _fail_on_call(monkeypatch, safetensors.torch, "save_file", call=3)  # step 2's optimizer file
    with pytest.raises(NoSpaceError, match=r"no space left on .*checkpoints: the checkpoint of step 2"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", save_steps=1, save_total_limit=1))
    folder = tmp_path / "run" / "checkpoints"
    assert [step for step, _ in list_checkpoints(tmp_path / "run")] == [1]
    assert verify_checkpoint(folder / "step-00000001") is None
    assert not [p.name for p in folder.iterdir() if "tmp" in p.name or p.name.startswith(".")]
    monkeypatch.undo()  # space again: the run resumes from step 1 (the lock was released)
    assert resume(corpora, tmp_path / "run").steps == 6


def test_disk_full_while_writing_the_final_folder_leaves_no_temporary_folder(corpora, tmp_path, monkeypatch):
    from ssa_hf.models.modeling_ssa_llama import SSALlamaForCausalLM

    _fail_on_call(monkeypatch, SSALlamaForCausalLM, "save_pretrained", call=1)
    with pytest.raises(NoSpaceError, match="no space left on"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", max_steps=2, eval_steps=0))
    assert not [p.name for p in (tmp_path / "run").iterdir() if "tmp" in p.name]
    assert not (tmp_path / "run" / "final").exists()
    assert [step for step, _ in list_checkpoints(tmp_path / "run")] == [2]


def test_atomic_folder_is_all_or_nothing(tmp_path):
    target = tmp_path / "folder"
    with atomic_folder(target) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_folder(target, overwrite=True) as tmp:
            (tmp / "a").write_text("2")
            raise RuntimeError("stopped while writing")
    assert (target / "a").read_text() == "1" and [p.name for p in tmp_path.iterdir()] == ["folder"]
    with atomic_folder(target, overwrite=True) as tmp:
        (tmp / "a").write_text("3")
    assert (target / "a").read_text() == "3" and [p.name for p in tmp_path.iterdir()] == ["folder"]


def test_kill_9_during_training_resumes_bit_identically(corpora, reference_runs, tmp_path):
    """A run killed (SIGKILL) while it trains and saves; the resumed run ends with the uninterrupted run's weights."""
    reference = reference_runs("causal")
    kill_9_after_checkpoints(tiny_config("causal", corpora, tmp_path / "run", save_steps=1, save_total_limit=2), tmp_path)
    assert not (tmp_path / "run" / "final").exists()
    resumed = pretrain(tiny_config("causal", corpora, tmp_path / "run", resume="latest", save_steps=1,
                                   save_total_limit=2))
    assert resumed.steps == 6 and resumed.metrics["resumed_from"] is not None
    assert_same_weights(reference.final_dir, resumed.final_dir)
    leftovers = [p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith(".")]
    assert not leftovers  # temporary folders of the killed save are removed on resume
