"""Careless input to every subcommand gets one line that names the file (or option) and what to change, exit code 2,
never a library's traceback: each case here was a traceback (or a line naming no file, or a misleading one)
before. One shared runner; each case builds its bad input in a fresh folder."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from ..evaluation import fixtures as eval_fixtures
from .conftest import tiny_config
from .test_bad_values import one_line_error


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    tokenizer = eval_fixtures.tokenizer(masked=False)
    return eval_fixtures.save(eval_fixtures.causal_lm(tokenizer), tokenizer, tmp_path_factory.mktemp("m") / "model")


def _edit_json(name, change):
    def apply(folder):
        path = folder / name
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
    return apply


def _write(name, content):
    def apply(folder):
        path = folder / name
        if path.is_dir():
            shutil.rmtree(path)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return apply


def _make_folder(name):
    def apply(folder):
        (folder / name).unlink()
        (folder / name).mkdir()
    return apply


def _remove(*names):
    def apply(folder):
        for name in names:
            (folder / name).unlink()
    return apply


# what each broken model folder did before -> (change, message now)
MODEL_FOLDERS = {
    "config.json a JSON list (AttributeError)": (_write("config.json", "[1, 2]"),
                                                 r"config\.json: expected a JSON object \(\{\.\.\.\}\), got a list"),
    "tokenizer_config.json a JSON list (AttributeError)": (
        _write("tokenizer_config.json", "[1]"), r"tokenizer_config\.json: expected a JSON object"),
    "config.json vocab_size a string (StrictDataclassFieldValidationError)": (
        _edit_json("config.json", lambda c: {**c, "vocab_size": "abc"}),
        r"config\.json: vocab_size must be a whole number >= 1, got 'abc'"),
    "config.json hidden_size negative (RuntimeError: negative dimension)": (
        _edit_json("config.json", lambda c: {**c, "hidden_size": -4}),
        r"config\.json: hidden_size must be a whole number >= 1, got -4"),
    "config.json without model_type (asked for trust_remote_code)": (
        _edit_json("config.json", lambda c: {k: v for k, v in c.items() if k != "model_type"}),
        r"config\.json: no model_type"),
    "config.json not UTF-8 (no file named)": (_write("config.json", b"\xff\xfe\x00"), r"config\.json: not UTF-8 text"),
    "tokenizer.json not JSON (no file named)": (_write("tokenizer.json", "{bad"), r"tokenizer\.json: not valid JSON"),
    "model.safetensors a folder (os error 19)": (_make_folder("model.safetensors"),
                                                 r"weights file .*model\.safetensors is a folder, not a file"),
}
COMMANDS = {
    "perplexity": lambda m, t: ["perplexity", str(m), "--data", str(t), "--windows", "2", "--window-length", "8"],
    "eval": lambda m, t: ["eval", str(m), "--tasks", "boolq", "--limit", "2", "--data-dir",
                          str(eval_fixtures.write_data(m.parent / "data")), "--output-dir", str(m.parent / "eval")],
    "probe": lambda m, t: ["probe", str(m), "--limit", "2", "--zorro-dir", str(eval_fixtures.write_zorro(m.parent / "z")),
                           "--output-dir", str(m.parent / "probe")],
    "convert": lambda m, t: ["convert", str(m), str(m.parent / "converted")],
    "push": lambda m, t: ["push", str(m), "someone/x", "--dry-run"],
    "export": lambda m, t: ["export", str(m), "--format", "onnx", "--output", str(m.parent / "exported")],
    "serve": lambda m, t: ["serve", str(m), "--exit-after", "1"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(MODEL_FOLDERS))
def test_a_broken_model_folder_gets_one_line_naming_the_file(case, command, saved_model, tmp_path, capsys):
    change, message = MODEL_FOLDERS[case]
    folder = tmp_path / "model"
    shutil.copytree(saved_model, folder)
    change(folder)
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat . " * 20 + "\n")
    err = one_line_error(COMMANDS[command](folder, text), capsys)
    assert re.search(message, err), err


def _tokenizer_missing(tmp_path):
    return str(tmp_path / "no_such_tokenizer")


def _tokenizer_empty(tmp_path):
    (tmp_path / "empty_tokenizer").mkdir()
    return str(tmp_path / "empty_tokenizer")


def _binary(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"\xff\xfe\x00 not text")
    return str(path)


def _config(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return str(path)


@pytest.fixture
def pretrain_yaml(corpora, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(tiny_config("causal", corpora, tmp_path / "run").to_yaml())
    return str(path)


# (id: what it did before, arguments (a function of the fixtures), message now)
OTHER = [
    ("perplexity model path missing (OSError: Repo id must be ...)",
     lambda p: ["perplexity", str(p["tmp"] / "nomodel"), "--data", p["text"]], r"model folder .*nomodel' does not exist"),
    ("perplexity model without weights (OSError)",
     lambda p: ["perplexity", p["no_weights"], "--data", p["text"]], r"cannot load model .*no file named model\.safetensors"),
    ("perplexity --tokenizer missing (OSError: Repo id must be ...)",
     lambda p: ["perplexity", p["model"], "--data", p["text"], "--tokenizer", _tokenizer_missing(p["tmp"])],
     r"tokenizer folder .*no_such_tokenizer' does not exist"),
    ("perplexity --tokenizer an empty folder (sentencepiece / tiktoken message over several lines)",
     lambda p: ["perplexity", p["model"], "--data", p["text"], "--tokenizer", _tokenizer_empty(p["tmp"])],
     r"tokenizer folder .*empty_tokenizer has no tokenizer files"),
    ("probe --tokenizer missing (wrapped: Repo id must be ...)",
     lambda p: ["probe", p["model"], "--tokenizer", _tokenizer_missing(p["tmp"]), "--zorro-dir", str(p["tmp"])],
     r"tokenizer folder .*no_such_tokenizer' does not exist"),
    ("pretrain tokenizer.pretrained missing (OSError: Repo id must be ...)",
     lambda p: ["pretrain", "--config", p["yaml"], "--tokenizer.pretrained", _tokenizer_missing(p["tmp"])],
     r"tokenizer folder .*no_such_tokenizer' does not exist"),
    ("pretrain tokenizer.pretrained an empty folder (several lines)",
     lambda p: ["pretrain", "--config", p["yaml"], "--tokenizer.pretrained", _tokenizer_empty(p["tmp"])],
     r"tokenizer folder .*empty_tokenizer has no tokenizer files"),
    ("a YAML syntax error (the parser's message over four lines)",
     lambda p: ["pretrain", "--config", _config(p["tmp"], "a: [1,\n")],
     r"bad\.yaml: not valid YAML: while parsing a flow node: .* \(line 2, column 1\)"),
    ("--config a folder ('does not exist')",
     lambda p: ["compare", "--config", str(p["tmp"])], r"config file .* is a folder, not a file"),
    ("a config whose base is a folder ('does not exist')",
     lambda p: ["pretrain", "--config", _config(p["tmp"], f"base: {p['tmp']}\n")], r"config file .* is a folder"),
    ("reproduce --results-file a folder (IsADirectoryError)",
     lambda p: ["reproduce", "--report-only", "--results-file", str(p["tmp"]), "--output-dir", str(p["tmp"] / "rp")],
     r"is a folder where a file is expected"),
    ("push README.md with a broken YAML header (exit 1, several lines)",
     lambda p: ["push", p["bad_card"], "someone/x", "--dry-run"], r"README\.md: not a readable model card \(.*line 1"),
    ("push --training a folder ('does not exist')",
     lambda p: ["push", p["model"], "someone/x", "--dry-run", "--training", str(p["tmp"])],
     r"training file .* is a folder, not a file"),
    ("push DIR a file ('does not exist')",
     lambda p: ["push", p["text"], "someone/x", "--dry-run"], r"checkpoint folder .* is a file, not a folder"),
    ("uptrain-demo --train-path not UTF-8 (no file named)",
     lambda p: ["uptrain-demo", "--train-path", _binary(p["tmp"]), "--output-dir",
                str(p["tmp"] / "ud")], r"train\.jsonl, line 1: not valid UTF-8"),
    ("icl --config a YAML list (the file named twice)",
     lambda p: ["icl", "--config", _config(p["tmp"], "- a\n"), "--output-dir", str(p["tmp"] / "icl")],
     r"error: \S+bad\.yaml: a config is a mapping"),
    ("reproduce --config a YAML list (the file named twice)",
     lambda p: ["reproduce", "--config", _config(p["tmp"], "- a\n"), "--output-dir", str(p["tmp"] / "rp")],
     r"error: \S+bad\.yaml: a config is a mapping"),
    ("icl --config a folder ('not found')",
     lambda p: ["icl", "--config", str(p["tmp"]), "--output-dir", str(p["tmp"] / "icl")],
     r"config file .* is a folder, not a file"),
    ("push with a damaged model.safetensors (exit 1: SafetensorError naming no file)",
     lambda p: ["push", p["damaged"], "someone/x", "--dry-run"],
     r"model\.safetensors: not a readable safetensors file"),
    ("serve --exit-after nan (a timer that never fires, or at once for -1)",
     lambda p: ["serve", p["model"], "--exit-after", "nan"], r"--exit-after must be a positive, finite number"),
    ("convert SRC a file ('does not exist')",
     lambda p: ["convert", p["text"], str(p["tmp"] / "dst")], r"source checkpoint folder .* is a file, not a folder"),
]


@pytest.mark.parametrize("arguments,message", [c[1:] for c in OTHER], ids=[c[0] for c in OTHER])
def test_careless_input_gets_one_line(arguments, message, saved_model, pretrain_yaml, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat . " * 20 + "\n")
    no_weights, bad_card = tmp_path / "no_weights", tmp_path / "bad_card"
    shutil.copytree(saved_model, no_weights)
    (no_weights / "model.safetensors").unlink()
    shutil.copytree(saved_model, bad_card)
    (bad_card / "README.md").write_text("---\na: [\n---\nhello\n")
    damaged = tmp_path / "damaged"
    shutil.copytree(saved_model, damaged)
    (damaged / "model.safetensors").write_bytes(b"garbage" * 100)
    fixtures = {"tmp": tmp_path / "work", "text": str(text), "model": str(saved_model), "yaml": pretrain_yaml,
                "no_weights": str(no_weights), "bad_card": str(bad_card), "damaged": str(damaged)}
    fixtures["tmp"].mkdir()
    err = one_line_error(arguments(fixtures), capsys)
    assert re.search(message, err), err


@pytest.fixture(scope="module")
def stopped_run(corpora, tmp_path_factory):
    from ssa_hf.train import pretrain

    folder = tmp_path_factory.mktemp("stopped")
    pretrain(tiny_config("causal", corpora, folder / "run", stop_after_steps=3))
    return folder / "run"


def test_a_damaged_run_history_is_named_on_resume(stopped_run, corpora, tmp_path, capsys):
    """Before: `Expecting property name enclosed in double quotes: line 1 column 2 (char 1)`, naming no file."""
    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    (run / "log_history.jsonl").write_text("{bad\n")
    config = tmp_path / "run.yaml"
    config.write_text(tiny_config("causal", corpora, run).to_yaml())
    err = one_line_error(["pretrain", "--config", str(config), "--resume", "latest"], capsys)
    assert re.search(r"log_history\.jsonl, line 1: not a JSON object of the run's history", err), err


def test_damaged_metrics_of_a_finished_run_are_named_on_resume(reference_runs, corpora, tmp_path, capsys):
    """A finished run resumes to "nothing to do" and reports its metrics.json: damaged, it named no file."""
    run = tmp_path / "run"
    shutil.copytree(reference_runs("causal").output_dir, run)
    (run / "metrics.json").write_text("{bad")
    config = tmp_path / "run.yaml"
    config.write_text(tiny_config("causal", corpora, run).to_yaml())
    err = one_line_error(["pretrain", "--config", str(config), "--resume", "latest"], capsys)
    assert re.search(r"metrics\.json: not valid JSON", err), err
