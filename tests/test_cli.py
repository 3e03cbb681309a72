"""The `ssa-hf` command line: parsed before anything heavy is imported, typos answered with the closest name,
and the light `import ssa_hf` that this needs still registers everything with transformers."""

import argparse
import os
import subprocess
import sys
import time

import pytest

from ssa_hf.cli import main

from .conftest import REPO

HEAVY = ("torch", "transformers", "numpy", "accelerate", "datasets", "matplotlib")


def run_python(*args: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=REPO, stdin=stdin,
                          timeout=300)


def imported_modules(importtime_log: str) -> set[str]:
    """Top-level module names in the output of `python -X importtime`."""
    return {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in importtime_log.splitlines() if "|" in line}


def test_help_imports_no_heavy_library():
    started = time.perf_counter()
    result = run_python("-X", "importtime", "-m", "ssa_hf.cli", "--help")
    seconds = time.perf_counter() - started
    assert result.returncode == 0 and "pretrain" in result.stdout and "icl" in result.stdout
    heavy = imported_modules(result.stderr) & set(HEAVY)
    assert not heavy, f"`ssa-hf --help` imported {sorted(heavy)}"
    print(f"ssa-hf --help: {seconds:.2f} s wall (with -X importtime)")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["ical"], "invalid choice: 'ical'.*did you mean 'icl'"),
        (["icl", "--stepz", "3"], r"unrecognized arguments: --stepz 3 \(did you mean: --stepz -> --steps\?\)"),
        (["icl", "--device", "cdua"], "did you mean 'cuda'"),
        (["perplexity", "m", "--windowz", "4"], "--windowz -> --windows"),
        (["pretrain", "--max_stepz", "3"], "--max_stepz -> --max_steps"),
        (["icl", "--zzzzzz"], r"unrecognized arguments: --zzzzzz$"),
    ],
)
def test_typos_get_the_closest_name(capsys, argv, expected):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert __import__("re").search(expected, capsys.readouterr().err.strip().splitlines()[-1])


def test_pretrain_help_lists_the_config_keys(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["pretrain", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ssa-hf pretrain") and "--data.block_size" in out and "--max_steps" in out


def test_import_is_light_and_registers_when_transformers_loads():
    script = (
        "import sys, ssa_hf\n"
        f"assert not set({HEAVY!r}) & set(sys.modules), 'import ssa_hf imported a heavy library'\n"
        "from transformers import AutoConfig, AutoModelForCausalLM\n"
        "config = AutoConfig.for_model('ssa_llama', vocab_size=64, hidden_size=16, intermediate_size=32,\n"
        "    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)\n"
        "assert type(AutoModelForCausalLM.from_config(config)).__name__ == 'SSALlamaForCausalLM'\n"
        "assert type(AutoConfig.for_model('ssa_bert')).__name__ == 'SSABertConfig'\n"
        "import torch\n"
        "q = torch.randn(1, 2, 4, 8)\n"
        "assert ssa_hf.ssa_attention(q, q, q, b=1.0, n=1.5, is_causal=True).shape == q.shape\n"
        "assert ssa_hf.SSALlamaConfig is type(config) and ssa_hf.models.attention.__name__ == 'ssa_hf.models.attention'\n"
        "print('ok')\n"
    )
    result = run_python("-c", script)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_public_api_names_resolve():
    import ssa_hf

    for name in ssa_hf.__all__:
        assert getattr(ssa_hf, name) is not None
    assert set(ssa_hf.__all__) <= set(dir(ssa_hf))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ssa_hf.nope  # noqa: B018


def test_library_noise_is_dropped_or_summarised(caplog):
    import logging

    from ssa_hf.cli import configure_logging, show_progress, summarised_warnings

    configure_logging()
    configure_logging()  # idempotent: one filter
    with caplog.at_level(logging.INFO):
        logging.getLogger("accelerate.utils.other").warning("Removed shared tensor {'lm_head.weight'} while saving.")
        logging.getLogger("accelerate.accelerator").info("Saving current state to /tmp/x")
        logging.getLogger("accelerate.utils.other").warning("something else")
        with summarised_warnings("lm_eval.models.huggingface", ("Truncating",), "cut %d requests") as counter:
            for _ in range(3):
                logging.getLogger("lm_eval.models.huggingface").warning("... Truncating 5 tokens from the left.")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["something else", "cut 3 requests"] and counter.dropped == 3
    assert len(logging.getLogger("accelerate.utils.other").filters) == 1
    assert not show_progress(argparse.Namespace(no_progress=False))  # pytest's stderr is not a terminal


@pytest.mark.parametrize("command", ["pretrain", "icl", "eval", "probe", "perplexity", "compare", "convert", "push"])
def test_command_help_imports_no_heavy_library(command):
    result = run_python("-X", "importtime", "-m", "ssa_hf.cli", command, "--help")
    assert result.returncode == 0 and result.stdout.startswith(f"usage: ssa-hf {command}"), result.stderr[-2000:]
    heavy = imported_modules(result.stderr) & set(HEAVY)
    assert not heavy, f"`ssa-hf {command} --help` imported {sorted(heavy)}"


def test_icl_help_lists_every_config_key_and_the_old_names():
    result = run_python("-m", "ssa_hf.cli", "icl", "--help")
    for option in ("--train.lr", "--eval.seed", "--model.attention_scoring", "--attention_scoring", "--steps",
                   "--linear-sigmas", "--scoring"):
        assert option in result.stdout, option
    assert "deprecated name of --attention_scoring" in " ".join(result.stdout.split())


def test_evaluation_options_come_from_the_config_classes_and_take_one_word(tmp_path):
    """eval/probe/perplexity/convert/push list no field by hand: their options are the config dataclasses' fields,
    each taking one word, so that an option never swallows a positional argument."""
    from ssa_hf.cli import parse_args
    from ssa_hf.commands import config_from_args
    from ssa_hf.commands.push import PushOptions
    from ssa_hf.evaluation.config import EvalConfig, PerplexityConfig

    args = parse_args(["eval", "--tasks", "boolq,arc_easy", "m1", "m2", "--limit", "0.5", "--model-args",
                       "max_length=512", "--model-args", "add_bos_token=true", "--trust-remote-code"])
    config = config_from_args(EvalConfig, args)
    assert args.models == ["m1", "m2"] and config.tasks == ["boolq", "arc_easy"] and config.limit == 0.5
    assert config.model_args == {"max_length": 512, "add_bos_token": True} and config.trust_remote_code is True
    path = tmp_path / "eval.yaml"
    path.write_text("tasks: hellaswag,piqa\nbatch_size: 2\n")  # a YAML string list reads as on the command line
    config = config_from_args(EvalConfig, parse_args(["eval", "m", "--config", str(path), "--batch-size", "4"]))
    assert config.tasks == ["hellaswag", "piqa"] and config.batch_size == 4
    config = config_from_args(PerplexityConfig, parse_args(["perplexity", "m", "--data", "a", "--data", "b,c"]))
    assert config.data == ["a", "b", "c"] and config.windows == 1000
    assert config_from_args(PushOptions, parse_args(["push", "d", "o/r", "--no-validate-online"])).validate_online is False
    path.write_text("num_fewshots: 1\n")
    with pytest.raises(ValueError, match="unknown config key 'num_fewshots'; did you mean 'num_fewshot'"):
        config_from_args(EvalConfig, parse_args(["eval", "m", "--config", str(path)]))


def test_accelerate_launch_with_the_single_process_cpu_config_prints_no_defaults_block(tmp_path):
    """docs/pretraining.md: with configs/accelerate/cpu.yaml accelerate states nothing of its own (without a config
    it prints the block of defaults it picked)."""
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [accelerate, "launch", "--config_file", str(REPO / "configs" / "accelerate" / "cpu.yaml"),
               "--num_cpu_threads_per_process", "1", "-m", "ssa_hf.cli", "--help"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0 and "usage: ssa-hf" in result.stdout
    assert "were not passed to `accelerate launch`" not in result.stdout + result.stderr
