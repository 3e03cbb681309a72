"""An optimizer update that leaves a scoring parameter (SSA's b, n) outside its range: the loop checks the values
right after the update, before the step is counted, logged or saved. It stops naming the step and the last
checkpoint, or, with --skip_nonfinite_steps, undoes the scoring part of the update; checkpoints never hold the
broken value and a resumed run continues exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import ssa_hf
from ssa_hf.train import list_checkpoints, pretrain, setup
from ssa_hf.train.state import ScoringParameterError

from .conftest import tiny_config

BROKEN = "model.layers.1.self_attn.scoring.params.b.raw"  # softplus(-1e4) is exactly 0: b must be > 0


def _break_b_at(monkeypatch, at_step: int) -> None:
    """After the optimizer update of training step `at_step` (1-based, read from the schedule, so that it holds
    across a resume), set one layer's b to 0, as an update far too large for it would."""
    original = setup.build_training

    def build(config, tokenizer):
        model, optimizer, scheduler = original(config, tokenizer)
        parameter = dict(model.named_parameters())[BROKEN]

        def hook(optimizer, args, kwargs):
            if scheduler.last_epoch + 1 == at_step:  # (the scheduler steps after the optimizer)
                with torch.no_grad():
                    parameter[0] = -1e4

        optimizer.register_step_post_hook(hook)
        return model, optimizer, scheduler

    monkeypatch.setattr(setup, "build_training", build)


def _b_values(state: dict) -> list[float]:
    return torch.nn.functional.softplus(state[BROKEN]).tolist()


def test_a_broken_b_stops_the_run_naming_the_step_and_the_last_checkpoint(corpora, tmp_path, monkeypatch):
    _break_b_at(monkeypatch, 3)
    run = tmp_path / "run"
    with pytest.raises(ScoringParameterError) as caught:
        pretrain(tiny_config("causal", corpora, run, save_steps=1, save_total_limit=0))
    message = str(caught.value)
    assert message.startswith("step 3: the optimizer update left scoring parameters outside their valid range")
    assert "model.layers.1.self_attn.scoring.b: must be > 0.0, got [0.0," in message
    assert "step-00000002" in message and "--resume" in message and "learning_rate" in message
    # the broken update is never saved: checkpoints 1 and 2 only, each with a valid b; no final folder
    assert [step for step, _ in list_checkpoints(run)] == [1, 2]
    for _, folder in list_checkpoints(run):
        assert min(_b_values(load_file(folder / "model.safetensors"))) > 0
    assert not (run / "final").exists()
    assert [r["step"] for r in map(json.loads, (run / "log_history.jsonl").read_text().splitlines())] == [1, 2]


def test_skip_nonfinite_steps_undoes_the_scoring_update_and_continues(corpora, tmp_path, monkeypatch):
    _break_b_at(monkeypatch, 2)
    result = pretrain(tiny_config("causal", corpora, tmp_path / "run", skip_nonfinite_steps=True, save_steps=1,
                                  save_total_limit=0))
    assert result.steps == 6 and result.metrics["rejected_scoring_updates"] == 1
    assert result.metrics["skipped_nonfinite_steps"] == 0  # the loss and the other weights' update counted
    logged = [r for r in result.log_history if "loss" in r]
    assert [r["rejected_scoring_updates"] for r in logged] == [0, 1, 1, 1, 1, 1]
    # step 2 kept b (and every scoring parameter) as step 1 left them; the other weights moved; b trains on after
    states = {step: load_file(folder / "model.safetensors") for step, folder in list_checkpoints(tmp_path / "run")}
    scoring = [k for k in states[1] if ".scoring." in k]
    assert scoring and all(torch.equal(states[1][k], states[2][k]) for k in scoring)
    others = [k for k in states[1] if k not in scoring]
    assert others and all(not torch.equal(states[1][k], states[2][k]) for k in others if k.endswith("proj.weight"))
    assert not torch.equal(states[2][BROKEN], states[3][BROKEN])
    assert min(_b_values(states[6])) > 0
    # the optimizer state of the scoring parameters was restored too: step count of b as after step 1
    optimizer = load_file(list_checkpoints(tmp_path / "run")[1][1] / "optimizer.safetensors")
    steps = [v for k, v in optimizer.items() if k.startswith(BROKEN + "/") and k.endswith("step")]
    assert steps and all(float(v) == 1.0 for v in steps)
    model = ssa_hf.SSALlamaForCausalLM.from_pretrained(result.final_dir)  # the final folder passes the load checks
    assert min(v for values in model.scoring_parameters().values() for v in values["b"]) > 0


def test_an_undone_scoring_update_resumes_exactly(corpora, tmp_path, monkeypatch):
    _break_b_at(monkeypatch, 2)
    options = {"skip_nonfinite_steps": True}
    reference = pretrain(tiny_config("causal", corpora, tmp_path / "reference", **options))
    first = pretrain(tiny_config("causal", corpora, tmp_path / "run", stop_after_steps=3, **options))
    assert first.metrics["rejected_scoring_updates"] == 1
    resumed = pretrain(tiny_config("causal", corpora, tmp_path / "run", resume="latest", **options))
    assert resumed.steps == 6 and resumed.metrics["rejected_scoring_updates"] == 1
    assert resumed.metrics["final_step_loss"] == pytest.approx(reference.metrics["final_step_loss"], abs=1e-6)
    a = load_file(Path(reference.final_dir) / "model.safetensors")
    b = load_file(Path(resumed.final_dir) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
