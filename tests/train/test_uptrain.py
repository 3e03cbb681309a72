"""ssa_hf.train.uptrain: continuing to train a model folder (`model.pretrained`), softmax-matched SSA conversions
starting at their source's validation loss, the scoring parameters' learning rate and warm-up, PEFT LoRA with b and
n trainable, two processes, and an exact resume after kill -9."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ssa_hf.hub import convert_checkpoint
from ssa_hf.options import ConfigError
from ssa_hf.train import load_config, pretrain

from .conftest import tiny_config
from .launch import kill_9_after_checkpoints, torchrun_two_processes

TASKS = ("causal", "masked")


@pytest.fixture(scope="module")
def uptrain_sources(corpora, tmp_path_factory):
    """task -> (the softmax source run, its softmax-matched SSA conversion folder)."""
    out = {}
    for task in TASKS:
        folder = tmp_path_factory.mktemp(f"uptrain_{task}")
        source = pretrain(tiny_config(task, corpora, folder / "source", model={"attention_scoring": "softmax"}))
        matched = folder / f"matched_{task}"
        convert_checkpoint(source.final_dir, matched, "ssa", init="matched")
        out[task] = (source, matched)
    return out


def uptrain_config(task, corpora, folder, output_dir, **overrides):
    """The tiny run of `tiny_config` (same data, seed, optimiser) starting from the model folder `folder`."""
    values = tiny_config(task, corpora, output_dir, **overrides).to_dict()
    values["model"] = {"pretrained": str(folder)}
    return load_config(None, values)


def _scoring(state: dict) -> dict:
    return {k: v for k, v in state.items() if ".scoring." in k}


@pytest.mark.parametrize("task", TASKS)
def test_matched_uptraining_starts_at_the_sources_validation_loss(task, uptrain_sources, corpora, tmp_path):
    source, matched = uptrain_sources[task]
    run = pretrain(uptrain_config(task, corpora, matched, tmp_path / "ssa", eval_at_start=True, max_steps=3,
                                  scoring_learning_rate=0.05))
    assert run.metrics["attention_scoring"] == "ssa"
    # the source's last validation loss (its step 6, same validation set and tokenizer) is the SSA run's at step 0
    assert run.metrics["eval_loss_at_start"] == pytest.approx(source.metrics["eval_loss"], rel=1e-5)
    assert run.log_history[0]["step"] == 0 and "eval_loss" in run.log_history[0]
    record = run.metrics["uptrained_from"]
    assert record == {"name": matched.name, "converted_from": "final",
                      "init": {"method": "matched", "b": 1e-3, "n": 1000.0, "c": 1.0}}
    final = Path(run.final_dir)
    card = (final / "README.md").read_text()
    assert f"| uptrained_from | {matched.name} (converted from final, softmax-matched init, b=0.001, n=1000) |" in card
    assert str(matched.parent) not in card and str(matched.parent) not in (final / "training_config.yaml").read_text()
    # training moved b and n (the scoring parameters train), and the weights
    for values in json.loads((final / "metrics.json").read_text())["scoring_parameters"].values():
        assert all(b != pytest.approx(1e-3, rel=1e-3) for b in values["b"])


def test_softmax_continuation_starts_exactly_at_the_source(uptrain_sources, corpora, tmp_path):
    source, _ = uptrain_sources["causal"]
    run = pretrain(uptrain_config("causal", corpora, source.final_dir, tmp_path / "softmax", eval_at_start=True,
                                  max_steps=2))
    assert run.metrics["attention_scoring"] == "softmax"
    assert run.metrics["eval_loss_at_start"] == source.metrics["eval_loss"]
    assert run.metrics["uptrained_from"] == {"name": "final"} and run.metrics["model_preset"] is None


def test_scoring_warmup_trains_only_b_and_n_at_their_own_rate(uptrain_sources, corpora, tmp_path):
    source, matched = uptrain_sources["causal"]
    run = pretrain(uptrain_config("causal", corpora, matched, tmp_path / "warm", max_steps=4, stop_after_steps=2,
                                  scoring_warmup_steps=2, scoring_learning_rate=0.05, save_steps=2))
    before = load_file(matched / "model.safetensors")
    after = load_file(Path(run.checkpoint) / "model.safetensors")
    held = [k for k in before if ".scoring." not in k]
    assert held and all(torch.equal(before[k], after[k]) for k in held)
    moved = _scoring(before)
    assert moved and all(not torch.equal(before[k], after[k]) for k in moved)
    # the learning rate of the scoring group is its own (peak 0.05 after the 1-step warm-up, cosine after)
    scheduler = json.loads((Path(run.checkpoint) / "scheduler.json").read_text())
    assert scheduler["base_lrs"] == [1e-2, 1e-2, 0.05]


def test_lora_with_trainable_scoring_moves_b_and_n(uptrain_sources, corpora, tmp_path):
    source, matched = uptrain_sources["masked"]
    run = pretrain(uptrain_config("masked", corpora, matched, tmp_path / "lora", max_steps=3, eval_steps=0,
                                  save_steps=3, scoring_learning_rate=0.05, lora={"rank": 4, "alpha": 8.0}))
    before = load_file(matched / "model.safetensors")
    merged = load_file(Path(run.final_dir) / "model.safetensors")
    assert merged.keys() == before.keys()  # a plain ssa-hf model: the adapters merged, no PEFT names
    scoring = _scoring(before)
    assert scoring and all(not torch.equal(before[k], merged[k]) for k in scoring)  # b and n trained
    projections = [k for k in before if "attention.self.query.weight" in k or "attention.self.value.weight" in k]
    assert projections and all(not torch.equal(before[k], merged[k]) for k in projections)  # LoRA merged in
    frozen = [k for k in before if "intermediate.dense" in k or "embeddings" in k]
    assert frozen and all(torch.equal(before[k], merged[k]) for k in frozen)  # only the adapters trained
    assert "| lora | rank 4, alpha 8, merged into the weights; scoring parameters trained |" in (
        Path(run.final_dir) / "README.md").read_text()


def test_uptraining_refusals(uptrain_sources, corpora, tmp_path):
    source, matched = uptrain_sources["causal"]
    values = tiny_config("causal", corpora, tmp_path / "x").to_dict()
    values["model"] = {"pretrained": str(matched), "attention_scoring": "softmax"}  # the folder is SSA
    with pytest.raises(ConfigError, match=r"attention_scoring='softmax' \(the folder has 'ssa'\).*convert the folder"):
        pretrain(load_config(None, values))
    with pytest.raises(ConfigError, match="not a model folder"):
        pretrain(uptrain_config("causal", corpora, tmp_path / "missing", tmp_path / "a"))
    with pytest.raises(ConfigError, match="no trainable scoring parameters"):
        pretrain(uptrain_config("causal", corpora, source.final_dir, tmp_path / "b", scoring_learning_rate=0.05))
    with pytest.raises(ConfigError, match="task 'masked' needs"):
        pretrain(uptrain_config("masked", corpora, matched, tmp_path / "c"))
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((matched / "config.json").read_text())
    with pytest.raises(ConfigError, match="no tokenizer files"):
        pretrain(uptrain_config("causal", corpora, pickled, tmp_path / "e"))
    (pickled / "tokenizer.json").write_text((matched / "tokenizer.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ConfigError, match="no .safetensors weights"):
        pretrain(uptrain_config("causal", corpora, pickled, tmp_path / "e"))
    stock = tmp_path / "stock"
    from tests.hub.helpers import make_llama

    make_llama(stock)
    with pytest.raises(ConfigError, match="convert it first"):
        pretrain(uptrain_config("causal", corpora, stock, tmp_path / "d"))


def test_uptraining_resumes_bit_identically_after_kill_9(uptrain_sources, corpora, tmp_path):
    _, matched = uptrain_sources["causal"]
    settings = dict(save_steps=1, save_total_limit=2, scoring_learning_rate=0.05, scoring_warmup_steps=2,
                    eval_at_start=True)
    reference = pretrain(uptrain_config("causal", corpora, matched, tmp_path / "reference", **settings))
    kill_9_after_checkpoints(uptrain_config("causal", corpora, matched, tmp_path / "run", **settings), tmp_path)
    resumed = pretrain(uptrain_config("causal", corpora, matched, tmp_path / "run", resume="latest", **settings))
    assert resumed.steps == 6 and resumed.metrics["resumed_from"] is not None
    # the validation before step 1 ran in the killed invocation: the resumed run reports it, metrics and card
    assert resumed.metrics["eval_loss_at_start"] == reference.metrics["eval_loss_at_start"] is not None
    assert "validation_loss_at_start" in (Path(resumed.final_dir) / "README.md").read_text()
    a, b = load_file(Path(reference.final_dir) / "model.safetensors"), load_file(Path(resumed.final_dir) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_two_processes_uptrain_one_model(uptrain_sources, corpora, tmp_path):
    source, matched = uptrain_sources["causal"]
    config = uptrain_config("causal", corpora, matched, tmp_path / "ddp", max_steps=2, eval_steps=0, save_steps=0,
                            per_device_train_batch_size=4, eval_at_start=True, scoring_learning_rate=0.05)
    metrics = torchrun_two_processes(config, tmp_path)
    assert metrics["distributed"]["num_processes"] == 2
    assert metrics["distributed"]["parameter_fingerprint_max_abs_diff"] == 0.0
    assert metrics["eval_loss_at_start"] == pytest.approx(source.metrics["eval_loss"], rel=1e-5)
    assert metrics["uptrained_from"]["name"] == matched.name


@pytest.mark.slow  # one launch of two FSDP processes
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_fsdp_on_two_cpu_processes_uptrains_from_the_folder(uptrain_sources, corpora, tmp_path):
    from .test_distributed import _launch_fsdp

    source, matched = uptrain_sources["causal"]
    config = uptrain_config("causal", corpora, matched, tmp_path / "fsdp", max_steps=2, eval_steps=0, save_steps=2,
                            per_device_train_batch_size=4, eval_at_start=True, scoring_learning_rate=0.05)
    (tmp_path / "run.yaml").write_text(config.to_yaml())
    _launch_fsdp(tmp_path / "run.yaml", tmp_path)
    metrics = json.loads((tmp_path / "fsdp" / "metrics.json").read_text())
    assert metrics["distributed"]["num_processes"] == 2
    assert metrics["eval_loss_at_start"] == pytest.approx(source.metrics["eval_loss"], rel=1e-5)
    final = load_file(tmp_path / "fsdp" / "final" / "model.safetensors")
    before = load_file(matched / "model.safetensors")
    assert final.keys() == before.keys() and any(not torch.equal(final[k], before[k]) for k in _scoring(before))
