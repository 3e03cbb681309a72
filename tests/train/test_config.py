"""Configs: YAML with `base:` inheritance, typed values, command-line overrides, and the shipped configs."""

import argparse
import runpy
from pathlib import Path

import pytest

from ssa_hf.train import ConfigError, PretrainConfig, add_pretrain_arguments, config_from_args, load_config
from ssa_hf.options import coerce, load_yaml, parse_scalar

from ..conftest import requires_shared_data

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs" / "pretrain").glob("*.yaml"))


def test_base_inheritance_and_dotted_overrides(tmp_path):
    (tmp_path / "base.yaml").write_text("task: masked\nmax_steps: 10\nmodel: {preset: tiny_bert, overrides: {hidden_size: 32}}\n"
                                        "data: {train: corpus.txt, max_length: 24}\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nmax_steps: 20\nmodel: {attention_scoring: softmax}\n")
    config = load_config(tmp_path / "child.yaml", {"learning_rate": "3e-4", "model.overrides": {"num_hidden_layers": 1},
                                                    "data.train.max_documents": "50"})
    assert (config.task, config.max_steps, config.model.preset, config.model.attention_scoring) == ("masked", 20, "tiny_bert", "softmax")
    assert config.model.overrides == {"hidden_size": 32, "num_hidden_layers": 1}
    assert config.data.train.path == "corpus.txt" and config.data.train.max_documents == 50
    assert config.learning_rate == 3e-4 and config.data.max_length == 24
    (tmp_path / "loop.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(ConfigError, match="loops back"):
        load_yaml(tmp_path / "loop.yaml")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"max_step": 3}, "unknown config key 'max_step'; did you mean 'max_steps'"),
        ({"data.blok_size": 3}, "unknown config key 'data.blok_size'; did you mean 'data.block_size'"),
        ({"max_steps": "many"}, "max_steps: expected an integer, got 'many'"),
        ({"max_steps": 0}, "max_steps: must be >= 1"),
        ({"lr_scheduler": "step"}, "lr_scheduler: must be one of"),
        ({"task": "seq2seq"}, "task: must be one of"),
        ({"push_to_hub": "norepo"}, "push_to_hub: give a repository id"),
        ({"stop_after_steps": 50, "max_steps": 10}, "stop_after_steps: must be in 1..max_steps"),
    ],
)
def test_bad_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"data.train": "x.txt", **overrides})


def test_values_are_coerced_by_field_type():
    assert parse_scalar("3e-4") == 3e-4 and parse_scalar("null") is None and parse_scalar("[a, b]") == ["a", "b"]
    assert coerce("true", bool, "k") is True and coerce("1e3", int, "k") == 1000
    assert coerce("ssa", str | list[str] | None, "k") == "ssa"
    assert coerce("[ssa, softmax]", str | list[str] | None, "k") == ["ssa", "softmax"]
    with pytest.raises(ConfigError):
        coerce("1.5", int, "k")


def test_global_batch_size_sets_accumulation():
    config = load_config(None, {"data.train": "x.txt", "global_batch_size": 768, "per_device_train_batch_size": 16})
    assert config.accumulation_steps(8) == 6 and config.accumulation_steps(1) == 48
    with pytest.raises(ConfigError, match="not a multiple"):
        config.accumulation_steps(5)


def test_every_config_key_is_a_command_line_option(tmp_path):
    parser = argparse.ArgumentParser()
    add_pretrain_arguments(parser)
    (tmp_path / "c.yaml").write_text("data: {train: x.txt}\nmodel: {overrides: {hidden_size: 48}}\n")
    args = parser.parse_args(["--config", str(tmp_path / "c.yaml"), "--output_dir", "o", "--max_steps", "7", "--resume",
                              "--data.block_size", "64", "--model.overrides", "num_hidden_layers=3", "--cpu",
                              "--report_to", "tensorboard", "wandb", "--data.validation.path", "dev.txt"])
    config = config_from_args(args)
    assert (config.output_dir, config.max_steps, config.resume, config.data.block_size, config.cpu) == ("o", 7, "latest", 64, True)
    assert config.model.overrides == {"hidden_size": 48, "num_hidden_layers": 3}
    assert config.report_to == ["tensorboard", "wandb"] and config.data.validation.path == "dev.txt"
    assert config_from_args(parser.parse_args(["--config", str(tmp_path / "c.yaml"), "--resume", "ck"])).resume == "ck"


def test_script_help_lists_the_options(capsys):
    script = runpy.run_path(str(REPO / "scripts" / "pretrain.py"), run_name="not_main")
    with pytest.raises(SystemExit) as done:
        script["main"](["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "--max_steps" in text and "--data.block_size" in text and "--resume" in text


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_load_and_build(path):
    config = load_config(path)
    assert isinstance(config, PretrainConfig)
    from ssa_hf.train.setup import model_config_for

    model_config = model_config_for(config)  # preset exists, family matches the task, positions suffice
    if config.model.attention_scoring:
        assert model_config.attention_scoring == config.model.attention_scoring


@pytest.mark.parametrize("family", ["decoder_114m_fineweb", "babyberta_aochildes"])
def test_twins_differ_only_in_scoring(family):
    ssa = load_config(REPO / "configs" / "pretrain" / f"{family}_ssa.yaml").to_dict()
    softmax = load_config(REPO / "configs" / "pretrain" / f"{family}_softmax.yaml").to_dict()
    differences = {k for k in ssa if ssa[k] != softmax[k]}
    assert differences == {"output_dir", "model"}
    assert {k for k in ssa["model"] if ssa["model"][k] != softmax["model"][k]} == {"attention_scoring"}


@pytest.mark.integration
@requires_shared_data("aochildes")
@requires_shared_data("webtext_c4")
@pytest.mark.parametrize("name", ["tiny_causal", "tiny_masked"])
def test_tiny_configs_start_on_the_shared_data(name, tmp_path):
    from ssa_hf.train import pretrain

    overrides = {"output_dir": str(tmp_path / name), "max_steps": 2, "eval_steps": 0, "save_steps": 0,
                 "report_to": ["none"], "data.train.max_documents": 300, "tokenizer.vocab_size": 400,
                 "data.validation_documents": 20}
    result = pretrain(load_config(REPO / "configs" / "pretrain" / f"{name}.yaml", overrides))
    assert result.steps == 2 and result.metrics["eval_loss"] > 0 and Path(result.final_dir, "model.safetensors").is_file()


@pytest.mark.slow
@requires_shared_data("aochildes")
@requires_shared_data("webtext_c4")
@pytest.mark.parametrize("name", ["tiny_causal", "tiny_masked"])
def test_tiny_configs_full_run(name, tmp_path):
    """The whole tiny run (about a minute each): the validation loss must have fallen well below its start."""
    from ssa_hf.train import pretrain

    result = pretrain(load_config(REPO / "configs" / "pretrain" / f"{name}.yaml",
                                  {"output_dir": str(tmp_path / name), "report_to": ["none"]}))
    evals = [r["eval_loss"] for r in result.log_history if "eval_loss" in r]
    first_loss = next(r["loss"] for r in result.log_history if "loss" in r)
    assert result.steps == result.metrics["max_steps"] and evals[-1] < first_loss - 0.5


def _parsed(*argv):
    import argparse

    from ssa_hf.train.config import add_pretrain_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_pretrain_arguments(parser)
    return config_from_args(parser.parse_args(["--config", "configs/pretrain/tiny_causal.yaml", *argv]))


def test_model_overrides_merge_and_say_where_an_offending_key_came_from(monkeypatch):
    """A Llama pretraining config could not switch to a GPT-2 preset from the command line: the file's overrides
    were merged in and the error did not say they came from the file. Merge key by key; `{}` drops the file's."""
    from ssa_hf.options import ConfigError

    from ..conftest import REPO

    monkeypatch.chdir(REPO)
    merged = _parsed("--model.overrides", "hidden_size=32")
    assert merged.model.overrides["hidden_size"] == 32 and merged.model.overrides["num_key_value_heads"] == 2
    with pytest.raises(ConfigError, match=r"intermediate_size from configs/pretrain/tiny_causal.yaml \(model.overrides"
                                          r".*--model.overrides \{\}"):
        _parsed("--model.preset", "tiny_gpt2")
    assert _parsed("--model.preset", "tiny_gpt2", "--model.overrides", "{}", "n_embd=64").model.overrides == {"n_embd": 64}
    with pytest.raises(ConfigError, match="bogus from --model.overrides"):
        _parsed("--model.preset", "tiny_gpt2", "--model.overrides", "{}", "bogus=1")
