"""Bounded everywhere: a FIFO (or a device, a folder) where a file is expected is refused before it is opened,
never waited on; a document with an enormous line is split before the tokenizer sees it; a timeout variable takes
only a positive, finite number.

The FIFO cases run the command line in a child process with a time limit, so that a regression fails the test
instead of hanging it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ssa_hf.regular_files import NotARegularFileError, check_model_folder, check_regular_file, open_regular, read_json

from ..evaluation import fixtures as eval_fixtures
from .conftest import tiny_config


class Hung(BaseException):
    """Raised by the alarm: not an OSError or ValueError, so no handler turns it into an error message."""


@pytest.fixture
def alarm():
    """`alarm(seconds)`: a Python-level read that blocks longer raises Hung (interrupts a blocking open)."""
    def on_alarm(*_):
        raise Hung("a read blocked")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    yield signal.alarm
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_open_regular_refuses_a_fifo_without_waiting_for_a_writer(tmp_path, alarm):
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    alarm(10)
    with pytest.raises(NotARegularFileError, match=r"manifest\.json is a FIFO \(named pipe\), not a regular file"):
        open_regular(fifo)
    with pytest.raises(NotARegularFileError, match="FIFO"):
        read_json(fifo)
    with pytest.raises(NotARegularFileError, match="FIFO"):
        check_regular_file(fifo)
    (tmp_path / "link").symlink_to(fifo)  # a link to a FIFO is the FIFO
    with pytest.raises(NotARegularFileError, match="FIFO"):
        open_regular(tmp_path / "link")
    with pytest.raises(NotARegularFileError, match="character device"):
        open_regular("/dev/zero")  # (a device: reads without end)
    with pytest.raises(NotARegularFileError, match="is a folder, not a file"):
        open_regular(tmp_path)
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert read_json(tmp_path / "ok.json") == {"a": 1}
    with open_regular(tmp_path / "ok.json") as handle:  # blocking again after the check
        assert os.get_blocking(handle.fileno())


def test_a_model_folder_entry_that_is_a_fifo_is_refused(tmp_path, alarm):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "ssa_llama"}')
    os.mkfifo(folder / "model.safetensors")
    alarm(10)
    with pytest.raises(NotARegularFileError, match=r"model\.safetensors is a FIFO"):
        check_model_folder(folder)


# ----------------------------------------------------------------------------------------- the command line

_DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys
    from ssa_hf.cli import main
    for name, argv in json.loads(sys.argv[1]):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(argv)
        print(json.dumps([name, rc, err.getvalue()]), flush=True)
""")


def run_cases(cases: dict[str, list[str]], tmp_path: Path, timeout: float = 240) -> dict[str, tuple[int, str]]:
    """Run each command line in one child process (in order); name -> (exit code, stderr). A case that does not
    end within the time limit fails the test, naming it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets_cache"), "TQDM_DISABLE": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(list(cases.items()))], env=env,
                              capture_output=True, text=True, timeout=timeout)
        out = done.stdout
    except subprocess.TimeoutExpired as error:
        out = error.stdout.decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
        finished = [json.loads(line)[0] for line in out.splitlines() if line.startswith("[")]
        pytest.fail(f"hung on {next(n for n in cases if n not in finished)!r} (over {timeout} s)")
    results = {name: (rc, err) for name, rc, err in (json.loads(line) for line in out.splitlines()
                                                      if line.startswith("["))}
    assert len(results) == len(cases), done.stderr[-3000:]
    return results


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    tokenizer = eval_fixtures.tokenizer(masked=False)
    return eval_fixtures.save(eval_fixtures.causal_lm(tokenizer), tokenizer, tmp_path_factory.mktemp("m") / "model")


@pytest.fixture(scope="module")
def stopped_run(corpora, tmp_path_factory):
    """A causal run stopped after its step-3 checkpoint (6 steps planned), and its config file."""
    from ssa_hf.train import pretrain

    folder = tmp_path_factory.mktemp("stopped")
    pretrain(tiny_config("causal", corpora, folder / "run", stop_after_steps=3))
    return folder / "run"


def _model_with_fifo(saved_model, tmp_path, name):
    folder = tmp_path / f"model_{name.replace('.', '_')}"
    shutil.copytree(saved_model, folder)
    (folder / name).unlink()
    os.mkfifo(folder / name)
    return folder


def _one_line(rc: int, err: str, pattern: str) -> None:
    import re

    lines = err.strip().splitlines()
    assert rc == 2 and "Traceback" not in err and lines and lines[-1].startswith("ssa-hf "), err[-2000:]
    assert re.search(pattern, lines[-1]), lines[-1]


@pytest.mark.slow
def test_fifos_in_a_model_folder_are_refused_never_waited_on(saved_model, tmp_path):
    """Before: perplexity blocked forever on a model.safetensors FIFO (read by Rust code, which no signal
    interrupts: hence the child process, with its time limit)."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat . the dog ran . " * 40 + "\n")
    perplexity = ["--data", str(text), "--windows", "2", "--window-length", "8"]
    cases = {name: ["perplexity", str(_model_with_fifo(saved_model, tmp_path, name)), *perplexity]
             for name in ("model.safetensors", "tokenizer.json")}
    for name, (rc, err) in run_cases(cases, tmp_path).items():
        _one_line(rc, err, rf"{re.escape(name)} is a FIFO \(named pipe\), not a regular file")


def _run_with_fifo(stopped_run, corpora, tmp_path, fifo: str):
    copy = tmp_path / "run"
    shutil.copytree(stopped_run, copy)
    (copy / fifo).unlink()
    os.mkfifo(copy / fifo)
    config = tmp_path / "run.yaml"
    config.write_text(tiny_config("causal", corpora, copy).to_yaml())
    return copy, config


FIFO_CASES = ["perplexity model.safetensors", "export model.safetensors", "serve model.safetensors",
              "pretrain config file", "resume manifest.json", "resume log_history.jsonl", "eval ssa_hf_tasks.json",
              "perplexity data file", "push config.json"]


@pytest.mark.parametrize("case", FIFO_CASES)
def test_fifos_where_files_are_expected_are_refused_never_waited_on(case, saved_model, stopped_run, corpora, tmp_path,
                                                                    alarm, capsys):
    """Before: --resume blocked forever on a checkpoint's manifest.json and on log_history.jsonl, eval on
    OUT/lm_eval_tasks/ssa_hf_tasks.json; perplexity on model.safetensors. An alarm interrupts a read blocked in
    Python code; one blocked in Rust code (safetensors) ignores it, so the process is ended after 150 s as a last
    resort (the slow test above runs such cases in a child process with a time limit)."""
    import faulthandler

    from ssa_hf.cli import main

    fifo = tmp_path / "fifo"
    if case == "perplexity model.safetensors":
        (tmp_path / "text.txt").write_text("the cat sat on the mat . " * 40 + "\n")
        argv = ["perplexity", str(_model_with_fifo(saved_model, tmp_path, "model.safetensors")), "--data",
                str(tmp_path / "text.txt"), "--windows", "2", "--window-length", "8"]
        pattern = r"model\.safetensors is a FIFO \(named pipe\), not a regular file"
    elif case in ("export model.safetensors", "serve model.safetensors"):
        folder = _model_with_fifo(saved_model, tmp_path, "model.safetensors")
        argv = (["export", str(folder), "--format", "onnx", "--output", str(tmp_path / "exported")]
                if case.startswith("export") else ["serve", str(folder), "--exit-after", "1"])
        pattern = r"model\.safetensors is a FIFO \(named pipe\), not a regular file"
    elif case == "pretrain config file":
        os.mkfifo(fifo)
        argv, pattern = ["pretrain", "--config", str(fifo)], r"config file .*fifo is a FIFO"
    elif case == "resume manifest.json":
        run, config = _run_with_fifo(stopped_run, corpora, tmp_path, "checkpoints/step-00000003/manifest.json")
        argv = ["pretrain", "--config", str(config), "--resume", str(run / "checkpoints" / "step-00000003")]
        pattern = r"not an intact checkpoint: .*manifest\.json is a FIFO"
    elif case == "resume log_history.jsonl":
        run, config = _run_with_fifo(stopped_run, corpora, tmp_path, "log_history.jsonl")
        argv, pattern = ["pretrain", "--config", str(config), "--resume", "latest"], r"log_history\.jsonl is a FIFO"
    elif case == "eval ssa_hf_tasks.json":
        (tmp_path / "out" / "lm_eval_tasks").mkdir(parents=True)
        os.mkfifo(tmp_path / "out" / "lm_eval_tasks" / "ssa_hf_tasks.json")
        argv = ["eval", str(saved_model), "--tasks", "boolq", "--data-dir", str(eval_fixtures.write_data(tmp_path)),
                "--limit", "2", "--output-dir", str(tmp_path / "out")]
        pattern = r"task folder .* holds files ssa-hf did not write there \(ssa_hf_tasks\.json\)"
    elif case == "perplexity data file":
        os.mkfifo(fifo)
        argv, pattern = ["perplexity", str(saved_model), "--data", str(fifo)], r"data file .*fifo is a FIFO"
    else:
        argv, pattern = ["push", str(_model_with_fifo(saved_model, tmp_path, "config.json")), "someone/x",
                         "--dry-run"], r"config\.json is a FIFO"
    alarm(120)
    faulthandler.dump_traceback_later(150, exit=True, file=sys.__stderr__)
    try:
        capsys.readouterr()
        rc = main(argv)
    finally:
        faulthandler.cancel_dump_traceback_later()
    _one_line(rc, capsys.readouterr().err, pattern)


# ------------------------------------------------------------------------------------------ enormous lines


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_an_enormous_line_is_split_at_whitespace_before_the_tokenizer(fmt, tmp_path, monkeypatch, caplog):
    """Before: a 48 MB line (a 12 MB one under a 6 GB memory limit) made the tokenizer abort the process. The limit
    is small here to keep the test fast; the split is the same at the default (sources.MAX_DOCUMENT_CHARS)."""
    from ssa_hf.data import sources

    monkeypatch.setattr(sources, "MAX_DOCUMENT_CHARS", 10_000)
    words = [f"w{i % 997}" for i in range(600_000)]  # ~3 MB on one line
    line = " ".join(words)
    path = tmp_path / ("big.txt" if fmt == "text" else "big.jsonl")
    rows = [line, "short one"] if fmt == "text" else [json.dumps({"text": t}) for t in (line, "short one")]
    path.write_text("\n".join(rows) + "\n")
    pieces = list(sources.iter_texts(sources.TextSource(path=str(path))))
    assert pieces[-1] == "short one" and len(pieces) > 250
    assert max(len(p) for p in pieces[:-1]) <= 10_000
    assert " ".join(pieces[:-1]).split() == words  # cut only at whitespace: no word lost or broken
    assert "document(s) longer than 10,000 characters split at whitespace" in caplog.text


def test_a_line_without_whitespace_is_cut_at_the_limit():
    from ssa_hf.data.sources import split_long_text

    assert [len(p) for p in split_long_text("x" * 25, limit=10)] == [10, 10, 5]


def test_the_tokenizer_trainer_never_receives_a_document_over_the_limit(monkeypatch):
    """Documents from a Hub data set are not read through the local readers: the trainer splits them too."""
    from tokenizers import Tokenizer

    from ssa_hf.data import tokenizer as tok

    monkeypatch.setattr(tok, "MAX_DOCUMENT_CHARS", 1_000)
    seen = []
    train = Tokenizer.train_from_iterator

    def spy(self, iterator, *args, **kwargs):
        return train(self, (seen.append(len(t)) or t for t in iterator), *args, **kwargs)

    monkeypatch.setattr(Tokenizer, "train_from_iterator", spy)
    tok.train_bpe_tokenizer(["a b c " * 20_000, "short text"], "causal", vocab_size=300)
    assert max(seen) <= 1_000 and len(seen) > 100


# ------------------------------------------------------------------------------------------ timeout settings


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "-inf", "abc", ""])
def test_the_build_lock_timeout_takes_only_a_positive_finite_number(value, tmp_path, monkeypatch, alarm):
    """Before: -1 waited forever on a held lock (filelock's "block"), nan gave a filelock traceback."""
    from ssa_hf.models import native

    monkeypatch.setenv("SSA_HF_BUILD_LOCK_TIMEOUT", value)
    alarm(10)
    with pytest.raises(ValueError, match=r"SSA_HF_BUILD_LOCK_TIMEOUT=.*: give a positive, finite number of seconds"):
        with native._build_lock(str(tmp_path / "x.lock")):
            pass


def test_a_valid_build_lock_timeout_is_used(tmp_path, monkeypatch):
    from ssa_hf.models import native

    monkeypatch.setenv("SSA_HF_BUILD_LOCK_TIMEOUT", "2.5")
    assert native._lock_timeout() == 2.5
    with native._build_lock(str(tmp_path / "x.lock")):
        pass
