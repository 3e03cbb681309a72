"""Training faults and settings that cannot work: non-finite hyper-parameters, a NaN/inf loss or gradient during
training (stop naming the step, or skip when asked), two runs in one folder, an output_dir that is a file, push
settings checked before training, a device that is not there."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ssa_hf.cli import main
from ssa_hf.train import ConfigError, list_checkpoints, pretrain
from ssa_hf.train import loop, setup
from ssa_hf.train.lock import RunLock, RunLockedError
from ssa_hf.train.state import NonFiniteError

from ..evaluation import fixtures as eval_fixtures
from .conftest import tiny_config


# ------------------------------------------------------------------------------------ non-finite settings


@pytest.mark.parametrize("key,value", [
    ("learning_rate", math.inf), ("learning_rate", math.nan), ("max_grad_norm", math.nan),
    ("max_grad_norm", math.inf), ("min_learning_rate", math.nan), ("weight_decay", math.inf),
    ("adam_epsilon", math.nan), ("adam_beta2", math.nan),
])
def test_non_finite_hyper_parameters_are_rejected_at_config_time(key, value, corpora, tmp_path):
    with pytest.raises(ConfigError, match=f"{key}: must be a finite number"):
        tiny_config("causal", corpora, tmp_path / "run", **{key: value})


def test_cli_rejects_learning_rate_inf(corpora, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(tiny_config("causal", corpora, tmp_path / "run").to_yaml())
    assert main(["pretrain", "--config", str(path), "--learning_rate", "inf"]) == 2
    assert "learning_rate: must be a finite number, got inf" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- non-finite values in training


def _poison(monkeypatch, what: str, at_step: int):
    """Make the loss (or one gradient) NaN at training step `at_step`, through hooks on the run's model."""
    original = setup.build_model_for

    def build(config, tokenizer):
        model = original(config, tokenizer)
        calls = {"n": 0}
        if what == "loss":
            def hook(module, args, kwargs, output):
                if module.training:
                    calls["n"] += 1
                    if calls["n"] == at_step:
                        output.loss = output.loss * float("nan")
                return output

            model.register_forward_hook(hook, with_kwargs=True)
        else:
            def grad_hook(grad):
                calls["n"] += 1
                return grad * float("nan") if calls["n"] == at_step else grad

            next(model.parameters()).register_hook(grad_hook)
        return model

    monkeypatch.setattr(setup, "build_model_for", build)


def _all_checkpoints_finite(output_dir) -> bool:
    return all(all(bool(torch.isfinite(t).all()) for t in load_file(folder / "model.safetensors").values())
               for _, folder in list_checkpoints(output_dir))


@pytest.mark.parametrize("what,named", [("loss", "the loss"), ("gradient", "the gradient norm")])
def test_a_non_finite_step_stops_the_run_naming_it(what, named, corpora, tmp_path, monkeypatch):
    _poison(monkeypatch, what, at_step=3)
    with pytest.raises(NonFiniteError, match=f"step 3: {named} is not finite"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", save_steps=1, save_total_limit=0))
    assert [step for step, _ in list_checkpoints(tmp_path / "run")] == [1, 2]
    assert _all_checkpoints_finite(tmp_path / "run")
    assert not (tmp_path / "run" / "final").exists()


def test_skip_nonfinite_steps_skips_and_counts(corpora, tmp_path, monkeypatch):
    _poison(monkeypatch, "loss", at_step=3)
    result = pretrain(tiny_config("causal", corpora, tmp_path / "run", skip_nonfinite_steps=True))
    assert result.steps == 6 and result.metrics["skipped_nonfinite_steps"] == 1
    assert math.isfinite(result.metrics["final_train_loss"])
    assert [r["skipped_nonfinite_steps"] for r in result.log_history if "loss" in r] == [0, 0, 1, 1, 1, 1]
    assert _all_checkpoints_finite(tmp_path / "run")
    weights = load_file(Path(result.final_dir) / "model.safetensors")
    assert all(bool(torch.isfinite(t).all()) for t in weights.values())


def test_a_huge_learning_rate_never_writes_non_finite_weights(corpora, tmp_path):
    """lr = 1e30 (finite, so accepted) blows the weights up: the run stops with an error, and every checkpoint it
    wrote holds finite weights. The first update drives a softplus b to exactly 0: the loop's check after the
    update stops the run naming the step and the layer, before that step is saved (before that check the
    attention layer refused b = 0 at the next forward, without the step, after checkpoint 1 had been written with
    it; before the layer's check, b = 0 ran as uniform attention until the loss overflowed)."""
    with pytest.raises(ValueError, match=r"^step 1: the optimizer update left scoring parameters .*layers\.\d\.self_attn\.scoring\.b: must be > 0"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", learning_rate=1e30, min_learning_rate=0.0,
                             save_steps=1, save_total_limit=0, warmup_steps=0))
    assert list_checkpoints(tmp_path / "run") == []
    assert _all_checkpoints_finite(tmp_path / "run")
    assert not (tmp_path / "run" / "final").exists()


# ------------------------------------------------------------------------------------------------ run lock


def _hold_lock(folder: str, ready) -> None:
    held = RunLock(folder).acquire()  # noqa: F841  (held until this process is killed)
    ready.set()
    time.sleep(300)


@pytest.fixture
def lock_holder():
    """Start another process (forked: no second start-up of torch) that holds a folder's run lock."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    started = []

    def start(folder: Path):
        ready = context.Event()
        process = context.Process(target=_hold_lock, args=(str(folder), ready), daemon=True)
        process.start()
        started.append(process)
        assert ready.wait(60), "the lock holder did not start"
        return process

    yield start
    for process in started:
        if process.is_alive():
            process.kill()
        process.join()


def test_a_second_run_in_a_locked_folder_names_the_first(corpora, tmp_path, lock_holder):
    config = tiny_config("causal", corpora, tmp_path / "run", max_steps=2, eval_steps=0)
    pretrain(config)  # checkpoints exist now
    holder = lock_holder(tmp_path / "run")
    host = socket.gethostname()
    with pytest.raises(RunLockedError, match=f"in use by process {holder.pid} on host '{host}'"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", max_steps=2, resume="latest"))
    with pytest.raises(RunLockedError, match=f"process {holder.pid}"):  # --overwrite_output_dir refuses too
        pretrain(tiny_config("causal", corpora, tmp_path / "run", max_steps=2, overwrite_output_dir=True))
    assert [step for step, _ in list_checkpoints(tmp_path / "run")] == [2]  # nothing deleted
    # the holder dies without releasing (kill -9): its lock does not block the next run
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    again = pretrain(tiny_config("causal", corpora, tmp_path / "run", max_steps=2, eval_steps=0,
                                 overwrite_output_dir=True))
    assert again.steps == 2 and again.metrics["resumed_from"] is None


def test_the_lock_is_held_for_the_run_and_released_after(corpora, tmp_path, monkeypatch):
    seen = {}
    original = loop.export_final

    def export(*args, **kwargs):  # during the run: a second lock on the folder is refused
        with pytest.raises(RunLockedError, match=f"process {os.getpid()}"):
            RunLock(tmp_path / "run").acquire()
        seen["checked"] = True
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "export_final", export)
    pretrain(tiny_config("causal", corpora, tmp_path / "run", max_steps=1, eval_steps=0))
    assert seen["checked"]
    with RunLock(tmp_path / "run"):  # released at the end
        pass


def test_icl_run_folders_are_locked_too(tmp_path, lock_holder):
    from ssa_hf.icl.train import RunSpec, train_run

    lock_holder(tmp_path / "icl")
    with pytest.raises(RunLockedError, match="ICL training run"):
        train_run(RunSpec("every", "ssa", 0), tmp_path / "icl", device="cpu", progress=False, stop_at=1)


# ---------------------------------------------------------------------------------------- settings checked


def test_output_dir_that_is_a_file(corpora, tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        pretrain(tiny_config("causal", corpora, tmp_path / "file"))


@pytest.mark.parametrize("settings,message", [
    ({"push_to_hub": "owner/na me"}, "push_to_hub: Repo id must use alphanumeric"),
    ({"push_to_hub": "owner/name.git"}, "push_to_hub: Repo_id cannot end by '.git'"),
    ({"push_to_hub": "owner/name"}, "HF_HUB_OFFLINE is set"),  # (the tests run offline)
    ({"hub_private": True}, "hub_private: true has no effect without push_to_hub"),
])
def test_push_settings_are_checked_before_training(settings, message, corpora, tmp_path):
    with pytest.raises(ConfigError, match=message):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", **settings))
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written


def test_a_missing_card_template_is_reported_before_training(corpora, tmp_path, monkeypatch):
    """final/ gets a model card at the end of the run: without its template (an install lacking model_cards/) the
    run used to train every step and then fail, leaving no final/."""
    monkeypatch.setenv("SSA_HF_MODEL_CARDS_DIR", str(tmp_path / "cards"))
    (tmp_path / "cards").mkdir()
    with pytest.raises(FileNotFoundError, match="model card template .*ssa_model_card.md does not exist"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_warm_up_past_the_last_step_is_warned_at_the_start(corpora, tmp_path, caplog):
    config = tiny_config("causal", corpora, tmp_path / "run", warmup_steps=24000, max_steps=2, eval_steps=0,
                         save_steps=0)
    with caplog.at_level("WARNING", logger="ssa_hf.train"):
        pretrain(config)
    first = next(r for r in caplog.records if "warmup_steps" in r.getMessage())
    assert "warmup_steps (24000) >= max_steps (2)" in first.getMessage() and "--warmup_steps" in first.getMessage()
    assert caplog.records.index(first) == 0 or not any("step 1" in r.getMessage() for r in caplog.records[:caplog.records.index(first)])


def test_a_missing_token_is_reported_before_training(corpora, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(ConfigError, match="no Hugging Face token"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", push_to_hub="owner/name"))
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
@pytest.mark.parametrize("name", ["perplexity", "probe", "eval", "icl"])
def test_device_cuda_without_cuda_is_a_clear_error(name, reference_runs, tmp_path, capsys):
    final = reference_runs("causal").final_dir
    text = tmp_path / "t.txt"
    text.write_text("a b c d e f g h i j k l m n o p\n" * 20)
    argv = {
        "perplexity": ["perplexity", final, "--data", str(text), "--windows", "1", "--window-length", "8"],
        "probe": ["probe", final, "--zorro-dir", str(eval_fixtures.write_zorro(tmp_path / "zorro")), "--limit", "1",
                  "--no-progress", "--output-dir", str(tmp_path / "probe")],
        "eval": ["eval", final, "--data-dir", str(eval_fixtures.write_data(tmp_path / "data")), "--tasks",
                 "arc_easy", "--limit", "1", "--output-dir", str(tmp_path / "eval")],
        "icl": ["icl", "--output-dir", str(tmp_path / "icl"), "--steps", "1", "--no-progress"],
    }[name]
    assert main(argv + ["--device", "cuda"]) == 2
    assert "torch sees no CUDA device here; use --device cpu" in capsys.readouterr().err


def test_metrics_record_resume_details(corpora, tmp_path):
    pretrain(tiny_config("causal", corpora, tmp_path / "run", stop_after_steps=2, max_steps=3, eval_steps=0))
    result = pretrain(tiny_config("causal", corpora, tmp_path / "run", resume="latest", max_steps=3, eval_steps=0))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["resumed_from"] == result.metrics["resumed_from"] and metrics["resume_skipped_checkpoints"] == []
    assert metrics["skipped_nonfinite_steps"] == 0
