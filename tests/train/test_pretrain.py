"""The pretraining loop end to end: outputs, checkpoints, exact resumption, the softmax twin, the CLI."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from ssa_hf.train import ConfigError, list_checkpoints, pretrain, push_final
from ssa_hf.train.validation import evaluate, prepare_validation

from .conftest import tiny_config

TASKS = ["causal", "masked"]
AUTO = {"causal": AutoModelForCausalLM, "masked": AutoModelForMaskedLM}


class _Main:  # the little of an Accelerator that `evaluate` uses, for one process
    process_index, num_processes, device = 0, 1, torch.device("cpu")

    def reduce(self, tensor, reduction):
        return tensor

    def autocast(self):
        import contextlib

        return contextlib.nullcontext()


@pytest.mark.parametrize("task", TASKS)
def test_run_writes_a_hub_ready_folder_and_logs(task, reference_runs):
    result = reference_runs(task)
    out, final = Path(result.output_dir), Path(result.final_dir)
    metrics = json.loads((out / "metrics.json").read_text())
    assert result.steps == metrics["steps"] == 6
    history = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in history if "loss" in r]
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.5  # it learns
    assert [r["step"] for r in history if "eval_loss" in r] == [3, 6]
    logged = history[-2]
    for key in ("learning_rate", "tokens_per_second", "grad_norm", "ssa/layer_01/n_mean", "ssa/layer_00/b_max"):
        assert key in logged
    assert logged["ssa/layer_00/b_min"] <= logged["ssa/layer_00/b_mean"] <= logged["ssa/layer_00/b_max"]
    assert list((out / "logs").rglob("events.out.tfevents.*"))  # TensorBoard through accelerate's tracker
    # checkpoints: every 3 steps, the last one kept, no temporary folders left
    assert [step for step, _ in list_checkpoints(out)] == [6]
    assert not [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
    # the final folder: model with remote code, tokenizer, card, config and metrics
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md", "training_config.yaml", "metrics.json"):
        assert (final / name).is_file(), name
    assert json.loads((final / "config.json").read_text())["auto_map"]
    card = (final / "README.md").read_text()
    assert "## Training" in card and f"| steps | 6 |" in card
    # the saved weights are the trained ones: they reproduce the final validation loss
    model = AUTO[task].from_pretrained(final)
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert model.config.vocab_size == len(tokenizer) == 300
    from ssa_hf.train import load_config

    # final/ carries no absolute local path (push uploads it): the run by name, the data by file name, and its
    # config still loads; the run folder's own copy names the data as given
    for name in ("training_config.yaml", "metrics.json", "README.md", "ssa_hf_card.json"):
        text = (final / name).read_text()
        assert str(out.parent) not in text and "/tmp" not in text, name
    assert load_config(final / "training_config.yaml").output_dir == "run"
    config = load_config(out / "training_config.yaml")
    from ssa_hf.data.corpus import build_corpus

    corpus = build_corpus(config.data, tokenizer, task, seed=config.seed, show_progress=False)
    again = evaluate(model, prepare_validation(corpus, tokenizer, config), task, tokenizer.pad_token_id, 16, _Main())
    assert again["loss"] == pytest.approx(metrics["eval_loss"], rel=1e-5)
    assert metrics["eval_perplexity"] == pytest.approx(torch.tensor(metrics["eval_loss"]).exp().item(), rel=1e-6)


@pytest.mark.parametrize("task", TASKS)
def test_resume_continues_exactly(task, reference_runs, corpora, tmp_path):
    reference = reference_runs(task)
    first = pretrain(tiny_config(task, corpora, tmp_path / "run", stop_after_steps=3))
    assert first.steps == 3 and first.final_dir is None
    resumed = pretrain(tiny_config(task, corpora, tmp_path / "run", resume="latest"))
    assert resumed.metrics["resumed_from"].endswith("step-00000003")
    assert resumed.steps == 6
    assert resumed.metrics["final_step_loss"] == pytest.approx(reference.metrics["final_step_loss"], abs=1e-6)
    assert resumed.metrics["eval_loss"] == pytest.approx(reference.metrics["eval_loss"], abs=1e-6)
    assert resumed.metrics["tokens_seen"] == reference.metrics["tokens_seen"]
    a = load_file(Path(reference.final_dir) / "model.safetensors")
    b = load_file(Path(resumed.final_dir) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the log history holds each step once
    steps = [r["step"] for r in resumed.log_history if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_checkpoint_guards(corpora, tmp_path):
    config = tiny_config("causal", corpora, tmp_path / "run", max_steps=2, save_steps=1, save_total_limit=0, eval_steps=0)
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", resume="latest"))
    pretrain(config)
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [1, 2]  # save_total_limit 0 keeps all
    with pytest.raises(ConfigError, match="already has checkpoints"):
        pretrain(config)
    # an interrupted save (no manifest.json, written last) is never resumed from
    partial = tmp_path / "run" / "checkpoints" / "step-00000003"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"partial")
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [1, 2]


def test_softmax_twin_and_push_dry_run(corpora, tmp_path):
    config = tiny_config("causal", corpora, tmp_path / "run", max_steps=2, eval_steps=0, save_steps=0,
                         model={"attention_scoring": "softmax"}, push_to_hub="someone/tiny-softmax")
    result = pretrain(config.__class__(**{**config.__dict__, "push_to_hub": None}))
    assert result.metrics["attention_scoring"] == "softmax"
    assert result.metrics["scoring_parameters"] == {}
    assert not any(k.startswith("ssa/") for r in result.log_history for k in r)
    push = push_final(result.final_dir, config, dry_run=True)
    assert {"model.safetensors", "README.md", "tokenizer.json", "metrics.json"} <= set(push.files)
    assert not any(f.startswith("checkpoints") for f in push.files)


def test_every_causal_family_of_the_table_pretrains(corpora, tmp_path):
    """`task: causal` takes any family whose default head is a causal LM (ssa_gpt2 besides ssa_llama)."""
    config = tiny_config("causal", corpora, tmp_path / "run", max_steps=2, eval_steps=0, save_steps=0,
                         model={"preset": "tiny_gpt2"})
    result = pretrain(config)
    assert result.steps == 2 and result.metrics["scoring_parameters"]
    from transformers import AutoModelForCausalLM

    assert type(AutoModelForCausalLM.from_pretrained(result.final_dir)).__name__ == "SSAGPT2LMHeadModel"


def test_bad_configs_name_the_key(corpora, tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        tiny_config("causal", corpora, tmp_path, max_step=3)
    with pytest.raises(ConfigError, match="block_size=200 exceeds the model's max_position_embeddings=128"):
        pretrain(tiny_config("causal", corpora, tmp_path / "a", data={"block_size": 200}))
    with pytest.raises(ConfigError, match="task 'causal' needs a ssa_llama preset or ssa_gpt2 preset"):
        pretrain(tiny_config("causal", corpora, tmp_path / "b", model={"preset": "tiny_bert"}))


def test_cli_runs_a_config_with_overrides(corpora, tmp_path, capsys):
    from ssa_hf.cli import main

    config = tiny_config("masked", corpora, tmp_path / "cli")
    path = tmp_path / "masked.yaml"
    path.write_text(config.to_yaml())
    code = main(["pretrain", "--config", str(path), "--max_steps", "2", "--eval_steps", "0", "--save_steps", "0",
                 "--model.overrides", "num_hidden_layers=1", "--data.max_length", "16"])
    assert code == 0
    out = capsys.readouterr().out
    assert "steps 2" in out
    saved = json.loads((tmp_path / "cli" / "final" / "config.json").read_text())
    assert saved["num_hidden_layers"] == 1 and saved["hidden_dropout_prob"] == 0.1  # override merged, not replaced
    assert main(["pretrain", "--config", str(path), "--data.max_length", "100"]) == 2
    assert "max_position_embeddings" in capsys.readouterr().err


def test_streamed_data_trains_and_resumes_exactly(corpora, tmp_path):
    overrides = {"max_steps": 4, "eval_steps": 0, "save_steps": 0, "data": {"train": {"streaming": True}}}
    whole = pretrain(tiny_config("causal", corpora, tmp_path / "whole", **overrides))
    pretrain(tiny_config("causal", corpora, tmp_path / "split", stop_after_steps=2, **overrides))
    resumed = pretrain(tiny_config("causal", corpora, tmp_path / "split", resume="latest", **overrides))
    assert whole.metrics["train_examples"] is None  # streamed: no length
    assert resumed.metrics["final_step_loss"] == pytest.approx(whole.metrics["final_step_loss"], abs=1e-6)
    assert json.loads((tmp_path / "split" / "checkpoints" / "step-00000004" / "data_state_rank0.json").read_text())["kind"] == "stream"


def test_bench_throughput_from_the_log():
    from ssa_hf.train.bench import _tokens_per_second

    history = [{"step": 1, "tokens_per_second": 10.0, "seconds_per_step": 100.0},  # warm-up: left out
               {"step": 2, "tokens_per_second": 100.0, "seconds_per_step": 1.0},
               {"step": 2, "eval_loss": 3.0},
               {"step": 3, "tokens_per_second": 50.0, "seconds_per_step": 2.0}]
    assert _tokens_per_second(history, warmup=1) == pytest.approx(200 / 3)
    with pytest.raises(ValueError, match="no timed steps"):
        _tokens_per_second(history, warmup=3)


def test_a_log_file_gets_plain_lines_not_progress_bar_escapes(corpora, tmp_path):
    """`ssa-hf pretrain` with stderr to a file: no carriage returns or ANSI escapes, a plain line per logging step."""
    import os
    import subprocess
    import sys

    from ..conftest import REPO

    log = tmp_path / "pretrain.log"
    argv = ["-m", "ssa_hf.cli", "pretrain", "--data.train.path", str(corpora["causal"]), "--data.block_size", "32",
            "--data.pack_documents", "40", "--data.validation_documents", "20", "--tokenizer.vocab_size", "300",
            "--max_steps", "3", "--logging_steps", "1", "--per_device_train_batch_size", "8", "--report_to", "none",
            "--cpu", "--output_dir", str(tmp_path / "run")]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log, "w") as handle:
        result = subprocess.run([sys.executable, *argv], stdout=subprocess.PIPE, stderr=handle, text=True, env=env,
                                cwd=REPO, stdin=subprocess.DEVNULL, timeout=600)
    text = log.read_text()
    assert result.returncode == 0, text[-3000:]
    assert "\r" not in text and "\x1b[" not in text, repr(text[-2000:])
    assert [n for n in range(1, 4) if f"step {n}/3: loss" in text] == [1, 2, 3]


@pytest.mark.parametrize("aliases, ran", [(None, "ssa_auto"), ({}, "sdpa")], ids=["mapped", "pytorch-sdpa"])
def test_softmax_run_reports_the_implementation_that_ran(corpora, tmp_path, aliases, ran):
    """`model.attn_implementation: sdpa` runs ssa-hf's own attention (the standard names are mapped) unless the
    config's aliases are emptied, which gives a softmax model PyTorch's SDPA; the run's metrics say which ran
    (a baseline labelled "sdpa" once silently ran ssa_auto)."""
    model = {"preset": "tiny_llama", "attention_scoring": "softmax", "attn_implementation": "sdpa"}
    if aliases is not None:
        model["overrides"] = {"attn_implementation_aliases": aliases}
    result = pretrain(tiny_config("causal", corpora, tmp_path / "run", max_steps=2, eval_steps=0, save_steps=0,
                                  model=model))
    assert result.metrics["attn_implementation"] == ran


def test_bench_refuses_a_variant_that_ran_something_else(monkeypatch, tmp_path):
    from types import SimpleNamespace

    import ssa_hf.train.loop as loop
    from ssa_hf.train.bench import BenchConfig, benchmark_training

    history = [{"step": s, "tokens_per_second": 1.0, "seconds_per_step": 1.0} for s in (1, 2)]
    fake = SimpleNamespace(log_history=history, metrics={"attn_implementation": "ssa_auto", "parameters": 1,
                                                         "global_batch_size": 1})
    monkeypatch.setattr(loop, "pretrain", lambda config: fake)
    with pytest.raises(RuntimeError, match="asked for 'sdpa', the run used 'ssa_auto'"):
        benchmark_training(BenchConfig(variants=["softmax@sdpa"], steps=1, warmup_steps=0, repeats=1))


def test_a_resume_inside_a_logging_window_logs_the_whole_window(corpora, tmp_path):
    """A checkpoint saved between two logging steps carries the window's loss sums: the resumed run logs the same
    window loss as the uninterrupted one (before, only the steps after the resume were averaged)."""
    settings = dict(logging_steps=4, save_steps=2, save_total_limit=0, eval_steps=0)
    whole = pretrain(tiny_config("causal", corpora, tmp_path / "whole", **settings))
    run = tmp_path / "killed"
    shutil.copytree(tmp_path / "whole", run)
    for later in ("checkpoints/step-00000004", "checkpoints/step-00000006", "final"):  # killed after step 3
        shutil.rmtree(run / later)
    window = json.loads((run / "checkpoints/step-00000002/trainer_state.json").read_text())["logging_window"]
    assert window["steps"] == 2 and window["counted_per_process"] == [2] and window["loss_sum_per_process"][0] > 0
    resumed = pretrain(tiny_config("causal", corpora, run, resume="latest", **settings))
    assert resumed.metrics["resumed_from"].endswith("step-00000002")

    def logged(result):
        return {r["step"]: (r["loss"], r["step_loss"]) for r in result.log_history if "loss" in r}

    assert logged(whole).keys() == {4, 6}
    assert logged(resumed) == logged(whole)  # bit-identical: the float32 sums are saved exactly



def test_adamw_runs_fused_unless_told_and_a_resume_cannot_switch_it(corpora, tmp_path, monkeypatch):
    """adam_fused (default true) builds torch's fused AdamW, false its default update; the checkpoint's update is
    the one a resume continues with, so switching it on resume is refused by name."""
    made = []
    real = torch.optim.AdamW

    class Recording(real):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("fused"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    pretrain(tiny_config("causal", corpora, tmp_path / "run", stop_after_steps=2))
    with pytest.raises(ConfigError, match="adam_fused was True"):
        pretrain(tiny_config("causal", corpora, tmp_path / "run", resume="latest", adam_fused=False))
    loop = pretrain(tiny_config("causal", corpora, tmp_path / "loop", max_steps=2, adam_fused=False))
    assert made == [True, None] and loop.steps == 2
