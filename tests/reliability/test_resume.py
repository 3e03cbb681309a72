"""Resume that does what it says: a setting the checkpoint was trained with cannot change (refused, naming the
checkpoint's value), the step to reach must lie ahead of the checkpoint, a larger max_steps never silently
re-spans a decaying schedule, and a finished run resumes to "nothing to do" with its metrics and card intact."""

from __future__ import annotations

import shutil

import pytest

from ssa_hf.train import ConfigError, pretrain

from .conftest import tiny_config


@pytest.fixture
def finished(reference_runs, tmp_path):
    """A copy of the finished 6-step causal run (its last checkpoint at step 6)."""
    run = tmp_path / "run"
    shutil.copytree(reference_runs("causal").output_dir, run)
    return run


def _files(run):
    names = ["metrics.json", "final/metrics.json", "final/README.md", "final/training_config.yaml",
             "final/model.safetensors", "training_config.yaml", "log_history.jsonl"]
    return {name: (run / name).read_bytes() for name in names}


# (changed settings, message): each refused before any work, the checkpoint's value named
REFUSED = [
    ({"learning_rate": 5e-3}, r"learning_rate was 0\.01 in .*step-00000006, now 0\.005; it cannot change on resume"),
    ({"warmup_steps": 3}, r"warmup_steps was 1 .* now 3"),
    ({"lr_scheduler": "linear"}, r"lr_scheduler was 'cosine' .* now 'linear'"),
    ({"per_device_train_batch_size": 4}, r"per_device_train_batch_size was 8 .* now 4"),
    ({"seed": 1}, r"seed was 0 .* now 1"),
    ({"data": {"block_size": 16}}, r"data\.block_size was 32 .* now 16"),
    ({"model": {"attention_scoring": "softmax"}}, r"model\.attention_scoring was None .* now 'softmax'"),
    ({"max_steps": 4}, r"is at step 6, beyond max_steps=4; resume with max_steps >= 6"),
    ({"max_steps": 10}, r"max_steps=10, but .* had max_steps=6, which its cosine schedule spans: .*re-span"),
]


@pytest.mark.parametrize("changes,message", REFUSED, ids=[",".join(c) for c, _ in REFUSED])
def test_a_resume_that_cannot_do_what_it_says_is_refused(changes, message, finished, corpora):
    before = _files(finished)
    with pytest.raises(ConfigError, match=message):
        pretrain(tiny_config("causal", corpora, finished, resume="latest", **changes))
    assert _files(finished) == before


def test_a_finished_run_resumes_to_nothing_to_do(finished, corpora, caplog):
    """(issue 26, bug 3: it rewrote metrics.json, final/metrics.json and the card with null figures.)"""
    before = _files(finished)
    result = pretrain(tiny_config("causal", corpora, finished, resume="latest", save_steps=1))
    assert "nothing to do" in caplog.text
    assert _files(finished) == before
    assert result.steps == 6 and result.final_dir == str(finished / "final")
    assert result.metrics["eval_perplexity"] is not None and result.metrics["train_tokens_per_second"] is not None


def test_options_that_do_not_change_the_training_may_change(reference_runs, corpora, tmp_path):
    """Logging, saving and validation settings, and data.num_proc, may differ on resume."""
    run = tmp_path / "run"
    pretrain(tiny_config("causal", corpora, run, stop_after_steps=3))
    result = pretrain(tiny_config("causal", corpora, run, resume="latest", logging_steps=2, save_steps=2,
                                  eval_steps=0, data={"num_proc": 2}))
    assert result.steps == 6 and result.final_dir is not None


def test_stop_after_steps_before_the_checkpoint_is_refused(corpora, tmp_path):
    run = tmp_path / "run"
    pretrain(tiny_config("causal", corpora, run, stop_after_steps=3))
    with pytest.raises(ConfigError, match="stop_after_steps=2 is not after .*step 3"):
        pretrain(tiny_config("causal", corpora, run, resume="latest", stop_after_steps=2))


def test_a_constant_schedule_may_be_extended(corpora, tmp_path):
    run = tmp_path / "run"
    pretrain(tiny_config("causal", corpora, run, max_steps=3, lr_scheduler="constant", eval_steps=0))
    result = pretrain(tiny_config("causal", corpora, run, max_steps=4, lr_scheduler="constant", eval_steps=0,
                                  resume="latest"))
    assert result.steps == 4 and result.metrics["resumed_from"].endswith("step-00000003")
