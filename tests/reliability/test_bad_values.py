"""Bad values refused at the door, each in one line that names the option (or file) and what to change, before
any work: one shared runner over the command-line cases, one over damaged checkpoint files, one over write
failures (a full disk, a file-size limit, a read-only folder)."""

from __future__ import annotations

import errno
import json
import shutil

import pytest

from ssa_hf.cli import main
from ssa_hf.train import pretrain
from ssa_hf.train.checkpoint import write_manifest

from ..evaluation import fixtures as eval_fixtures
from .conftest import tiny_config


def one_line_error(argv: list[str], capsys) -> str:
    """Run the command; it must exit 2 with one error line, the last on stderr, and no traceback (progress bars
    of the data preparation may come before it); returns that line."""
    capsys.readouterr()
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, (rc, err)
    errors = [line for line in err.splitlines() if line.startswith(f"ssa-hf {argv[0]}: error:")]
    assert "Traceback" not in err and len(errors) == 1 and err.splitlines()[-1] == errors[0], err
    return errors[0]


@pytest.fixture
def pretrain_yaml(corpora, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(tiny_config("causal", corpora, tmp_path / "run").to_yaml())
    return path


# (id, arguments after `pretrain --config FILE`, message)
PRETRAIN = [
    ("vocab 1e9", ["--tokenizer.vocab_size", "1e9"], r"tokenizer\.vocab_size=1e\+09 is beyond 1,048,576"),
    ("vocab 300.5", ["--tokenizer.vocab_size", "300.5"], r"tokenizer\.vocab_size: expected an integer, got '300\.5'"),
    ("heads not dividing width", ["--model.overrides", "num_attention_heads=5"],
     r"hidden_size=32 is not divisible by num_attention_heads=5"),
    ("kv heads not dividing heads", ["--model.overrides", "num_key_value_heads=3"],
     r"num_attention_heads=4 is not a multiple of num_key_value_heads=3"),
    ("zero width", ["--model.overrides", "hidden_size=0"], r"hidden_size must be a whole number >= 1, got 0"),
    ("negative layers", ["--model.overrides", "num_hidden_layers=-1"], r"num_hidden_layers must be a whole number >= 1"),
    ("zero heads", ["--model.overrides", "num_attention_heads=0"], r"num_attention_heads must be a whole number >= 1"),
    ("zero intermediate", ["--model.overrides", "intermediate_size=0"], r"intermediate_size must be a whole number >= 1"),
    ("negative width", ["--model.overrides", "hidden_size=-64"], r"hidden_size must be a whole number >= 1, got -64"),
    ("batch 0", ["--per_device_train_batch_size", "0"], r"per_device_train_batch_size: must be >= 1, got 0"),
    ("block 0", ["--data.block_size", "0"], r"data\.block_size must be >= 2"),
]


@pytest.mark.parametrize("args,message", [c[1:] for c in PRETRAIN], ids=[c[0] for c in PRETRAIN])
def test_bad_pretraining_values_are_refused_in_one_line(args, message, pretrain_yaml, tmp_path, capsys):
    import re

    err = one_line_error(["pretrain", "--config", str(pretrain_yaml), *args], capsys)
    assert re.search(message, err), err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_gzip_of_garbage_is_refused_in_one_line(pretrain_yaml, tmp_path, capsys):
    garbage = tmp_path / "garbage.jsonl.gz"
    garbage.write_bytes(b"not gzip at all" * 20)
    err = one_line_error(["pretrain", "--config", str(pretrain_yaml), "--data.train.path", str(garbage)], capsys)
    assert "garbage.jsonl.gz, line 1: cannot read the file (Not a gzipped file" in err


# (id, `icl` arguments, message): refused when the config is read, before any run trains
ICL = [
    ("sigma nan", ["--sigmas", "nan"], r"eval\.sigmas must be a non-empty list of numbers > 0, got \[nan\]"),
    ("sigma negative", ["--sigmas", "-1"], r"eval\.sigmas must be .* got \[-1\.0\]"),
    ("primary misspelt", ["--stats.primary.treatment", "sssa"],
     r"stats\.primary\.treatment: unknown scoring function 'sssa'; did you mean 'ssa'\?"),
    ("primary control unknown", ["--stats.primary.control", "softermax"], r"stats\.primary\.control: unknown scoring"),
    ("lengths below from_position", ["--eval.lengths", "3", "--eval.from_position", "4"],
     r"eval\.lengths \[3\]: prompts shorter than eval\.from_position=4 score no position"),
    ("length 1", ["--eval.length", "1"], r"eval\.length \[1\]: prompts shorter than eval\.from_position=4"),
    ("batch 0", ["--batch-size", "0"], r"train\.batch_size must be >= 1, got 0"),
]


@pytest.mark.parametrize("args,message", [c[1:] for c in ICL], ids=[c[0] for c in ICL])
def test_bad_icl_values_are_refused_before_training(args, message, tmp_path, capsys):
    import re

    err = one_line_error(["icl", "--output-dir", str(tmp_path / "icl"), "--steps", "1", "--seeds", "0",
                          "--no-progress", "--device", "cpu", *args], capsys)
    assert re.search(message, err), err
    assert not any((tmp_path / "icl").glob("*/checkpoint")) if (tmp_path / "icl").exists() else True


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_reproduce_refuses_workers_below_one(workers, capsys):
    err = one_line_error(["reproduce", "--workers", workers, "--plan"], capsys)
    assert f"workers (--workers) and threads must be >= 1, got workers={workers}" in err


@pytest.mark.parametrize("option", ["--batch-size", "--windows", "--window-length"])
def test_perplexity_refuses_zero_counts(option, tmp_path, capsys):
    (tmp_path / "model").mkdir()
    err = one_line_error(["perplexity", str(tmp_path / "model"), "--data", "x.txt", option, "0"], capsys)
    assert f"{option} must be a whole number >= 1, got 0" in err


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_an_output_path_that_is_a_file_is_refused(where, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    path = tmp_path / "afile" if where == "file" else tmp_path / "afile" / "sub"
    err = one_line_error(["demo", "--output-dir", str(path)], capsys)
    assert "is a file" in err and (tmp_path / "afile").read_text() == "x"


# ------------------------------------------------------------------------------- damaged checkpoint files


def _edit(file: str, change):
    def apply(checkpoint):
        path = checkpoint / file
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
    return apply


DAMAGE = [
    ("cursor -2", _edit("data_state_rank0.json", lambda d: {**d, "cursor": -2}), r"data position has cursor=-2"),
    ("cursor past the end", _edit("data_state_rank0.json", lambda d: {**d, "cursor": 10**9}), r"cursor=1000000000"),
    ("epoch a string", _edit("data_state_rank0.json", lambda d: {**d, "epoch": "x"}), r"epoch='x'"),
    ("scheduler garbage", _edit("scheduler.json", lambda d: {"garbage": 1}), r"scheduler\.json: .*lacks base_lrs"),
    ("scheduler a list", _edit("scheduler.json", lambda d: [1, 2]), r"scheduler\.json: .*should be a mapping"),
    ("scheduler last_epoch", _edit("scheduler.json", lambda d: {**d, "last_epoch": "x"}),
     r"last_epoch should be a number"),
    ("optimizer groups", _edit("optimizer.json", lambda d: {**d, "param_groups": d["param_groups"][:1]}),
     r"optimizer\.json: .*param_groups should be a list of 2"),
    ("trainer step", _edit("trainer_state.json", lambda d: {**d, "step": -3}), r"trainer_state\.json: step is not"),
    ("tokens per process", _edit("trainer_state.json", lambda d: {**d, "tokens_seen_per_process": []}),
     r"tokens_seen_per_process is not"),
] + [
    (f"logging window {name}", _edit("trainer_state.json", lambda d, c=change: {**d, "logging_window": {**d["logging_window"], **c}}),
     r"trainer_state\.json: logging_window is not the state of a logging window")
    for name, change in [("steps", {"steps": -1}), ("loss nan", {"loss_sum_per_process": [float("nan")]}),
                         ("counted past steps", {"counted_per_process": [5]}), ("no tokens", {"tokens_per_process": []}),
                         ("seconds", {"seconds": "x"})]
]


@pytest.mark.parametrize("damage,message", [c[1:] for c in DAMAGE], ids=[c[0] for c in DAMAGE])
def test_a_damaged_checkpoint_file_is_refused_naming_it(damage, message, corpora, tmp_path, capsys):
    """The manifest is rewritten to match (so only the content checks can catch it): one line, no traceback."""
    import re

    run = tmp_path / "run"
    pretrain(tiny_config("causal", corpora, run, stop_after_steps=2, save_steps=2, eval_steps=0))
    checkpoint = run / "checkpoints" / "step-00000002"
    damage(checkpoint)
    write_manifest(checkpoint, step=2)
    path = tmp_path / "run.yaml"
    path.write_text(tiny_config("causal", corpora, run, save_steps=2, eval_steps=0, resume="latest").to_yaml())
    err = one_line_error(["pretrain", "--config", str(path)], capsys)
    assert re.search(message, err), err


# ------------------------------------------------------------------------------------------ write failures


def _too_large(*args, **kwargs):
    raise RuntimeError("Error while serializing: IoError(Os { code: 27, kind: FileTooLarge, message: \"File too "
                       "large\" })")  # what safetensors raises past `ulimit -f`


def test_a_file_size_limit_on_the_optimizer_file_is_one_line(pretrain_yaml, tmp_path, monkeypatch, capsys):
    import safetensors.torch

    original = safetensors.torch.save_file
    monkeypatch.setattr(safetensors.torch, "save_file",
                        lambda tensors, path, **kw: _too_large() if "optimizer" in str(path) else original(tensors, path, **kw))
    err = one_line_error(["pretrain", "--config", str(pretrain_yaml)], capsys)
    assert "the checkpoint of step 3 was not written: optimizer.safetensors is too large" in err and "ulimit -f" in err
    assert not [p for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith(".")]


def test_a_full_disk_before_the_first_checkpoint_is_one_line(pretrain_yaml, monkeypatch, capsys):
    from transformers import PreTrainedTokenizerBase

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]) if args else None)

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", full)  # the first file a run writes
    err = one_line_error(["pretrain", "--config", str(pretrain_yaml)], capsys)
    assert err.startswith("ssa-hf pretrain: error: no space left on the device") and "free space" in err


@pytest.mark.parametrize("command", ["pretrain", "eval", "icl"])
def test_a_read_only_output_folder_is_one_line(command, pretrain_yaml, tmp_path, monkeypatch, capsys):
    """(This machine runs the tests as root, which writes anywhere: the folder's mode is reported through
    os.access, as it would be to another user.)"""
    import os

    out = tmp_path / "run" if command == "pretrain" else tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if os.path.abspath(p) == str(out) else
                        real_access(p, mode, **kw))
    argv = {"pretrain": ["pretrain", "--config", str(pretrain_yaml)],
            "eval": ["eval", "--baselines", "--data-dir", str(eval_fixtures.write_data(tmp_path / "data")), "--tasks",
                     "arc_easy", "--output-dir", str(out)],
            "icl": ["icl", "--output-dir", str(out), "--steps", "1", "--seeds", "0", "--no-progress"]}[command]
    try:
        err = one_line_error(argv, capsys)
    finally:
        out.chmod(0o755)
    assert "is not writable (read-only)" in err and str(out) in err


# ------------------------------------------------------------------------------------------ damaged model folders


def _truncate(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def _not_safetensors(folder):
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)


def _without(field):
    def apply(folder):
        config = json.loads((folder / "config.json").read_text())
        del config[field]
        (folder / "config.json").write_text(json.dumps(config))
    return apply


FOLDER_DAMAGE = [
    ("truncated weights", _truncate, r"model\.safetensors: not a readable safetensors file .*damaged or truncated"),
    ("not safetensors", _not_safetensors, r"model\.safetensors: not a readable safetensors file"),
    ("config without hidden_size", _without("hidden_size"),
     r"weights' shapes do not match .* config\.json lacks hidden_size"),
]


@pytest.fixture(scope="module")
def causal_model_folder(tmp_path_factory):
    tokenizer = eval_fixtures.tokenizer(masked=False)
    return eval_fixtures.save(eval_fixtures.causal_lm(tokenizer, "ssa"), tokenizer,
                              tmp_path_factory.mktemp("model") / "ssa")


@pytest.mark.parametrize("command", ["perplexity", "eval", "probe", "convert"])
@pytest.mark.parametrize("damage,message", [c[1:] for c in FOLDER_DAMAGE], ids=[c[0] for c in FOLDER_DAMAGE])
def test_a_damaged_model_folder_is_one_line(damage, message, command, causal_model_folder, tmp_path, capsys):
    """(A library traceback before: safetensors' SafetensorError, transformers' RuntimeError of mismatched shapes.)"""
    import re

    if command == "convert" and "hidden_size" in message:
        message = r"hidden_size|shape"  # convert compares the weights with the config itself (hub/convert.py)
    folder = shutil.copytree(causal_model_folder, tmp_path / "damaged")
    damage(folder)
    text = tmp_path / "text.txt"
    text.write_text("one short document\nanother short document\n")
    argv = {
        "perplexity": ["perplexity", str(folder), "--data", str(text), "--windows", "2", "--window-length", "4"],
        "eval": ["eval", str(folder), "--data-dir", str(eval_fixtures.write_data(tmp_path / "data")), "--tasks", "boolq",
                 "--limit", "2", "--output-dir", str(tmp_path / "out")],
        "probe": ["probe", str(folder), "--zorro-dir", str(eval_fixtures.write_zorro(tmp_path / "zorro")),
                  "--limit", "2", "--output-dir", str(tmp_path / "out")],
        "convert": ["convert", str(folder), str(tmp_path / "converted"), "--attention-scoring", "softmax"],
    }[command]
    err = one_line_error(argv, capsys)
    assert re.search(message, err), err
