"""Session fixtures of the evaluation tests: the made-up data and the tiny checkpoints, built once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from . import fixtures


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return fixtures.write_data(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def zorro_root(tmp_path_factory):
    return fixtures.write_zorro(tmp_path_factory.mktemp("zorro"))


@pytest.fixture(scope="session")
def causal_tokenizer():
    return fixtures.tokenizer(masked=False)


@pytest.fixture(scope="session")
def masked_tokenizer():
    return fixtures.tokenizer(masked=True)


@pytest.fixture(scope="session")
def ssa_causal_dir(tmp_path_factory, causal_tokenizer):
    folder = tmp_path_factory.mktemp("ckpt") / "tiny-ssa"
    return fixtures.save(fixtures.causal_lm(causal_tokenizer, "ssa"), causal_tokenizer, folder)


@pytest.fixture(scope="session")
def softmax_causal_dir(tmp_path_factory, causal_tokenizer):
    folder = tmp_path_factory.mktemp("ckpt") / "tiny-softmax"
    return fixtures.save(fixtures.causal_lm(causal_tokenizer, "softmax"), causal_tokenizer, folder)


@pytest.fixture(scope="session")
def masked_dir(tmp_path_factory, masked_tokenizer):
    folder = tmp_path_factory.mktemp("ckpt") / "tiny-mlm"
    return fixtures.save(fixtures.masked_lm(masked_tokenizer, "ssa"), masked_tokenizer, folder)


# ------------------------------------------------------------------------------------------ lm-eval's CLI

STOCK_TASKS = ["arc_easy", "arc_challenge", "boolq", "hellaswag", "piqa"]
STOCK_TEST = "test_same_numbers_as_the_stock_lm_eval_command"


class LmEvalCommand:
    """An lm-eval command line (`python -m MODULE run ...`) running in a fresh process; output goes to files (a
    pipe would fill up and stall it). `wait()` -> (lm-eval's results JSON, samples by task)."""

    def __init__(self, module: str, model: str, model_args: str, include: Path, out: Path, tasks: list[str], batch: int):
        out.mkdir(parents=True, exist_ok=True)
        self.out, self.tasks = out, tasks
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        command = [sys.executable, "-m", module, "run", "--model", model, "--model_args", model_args,
                   "--tasks", ",".join(tasks), "--include_path", str(include), "--device", "cpu",
                   "--batch_size", str(batch), "--log_samples", "--output_path", str(out / "results")]
        self.log = open(out / "log.txt", "w")
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=out)

    def wait(self, timeout: float = 600) -> tuple[dict, dict]:
        code = self.process.wait(timeout=timeout)
        self.log.close()
        assert code == 0, (self.out / "log.txt").read_text()[-3000:]
        samples = {}
        for name in self.tasks:
            sample_file = sorted(self.out.rglob(f"samples_{name}_*.jsonl"))[-1]
            samples[name] = [json.loads(line) for line in sample_file.read_text().splitlines()]
        return json.loads(self.results_file().read_text()), samples

    def results_file(self) -> Path:
        files = sorted(self.out.rglob("results_*.json"))
        assert files, f"no results file under {self.out}"
        return files[-1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture(scope="session")
def stock_lm_eval(request, data_dir, ssa_causal_dir, tmp_path_factory):
    """The stock `lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True` on the local tasks,
    started early in the background (its start-up, ~20 s, overlaps the other tests); see `_start_stock_lm_eval`."""
    run = request.config.stash.get(_STOCK_KEY, None)
    if run is None:
        run = _launch(data_dir, ssa_causal_dir, tmp_path_factory)
        request.config.stash[_STOCK_KEY] = run
    return run


_STOCK_KEY = pytest.StashKey()


def _launch(data_dir, ssa_causal_dir, tmp_path_factory) -> LmEvalCommand:
    from ssa_hf.evaluation.lm_tasks import write_local_tasks

    folder = tmp_path_factory.mktemp("stock_lm_eval")
    include = write_local_tasks(data_dir, folder / "tasks", STOCK_TASKS)
    return LmEvalCommand("lm_eval", "hf", f"pretrained={ssa_causal_dir},trust_remote_code=True", include,
                         folder / "run", STOCK_TASKS, 4)


@pytest.fixture(scope="session", autouse=True)
def _start_stock_lm_eval(request, tmp_path_factory):
    """Start the stock lm-eval process at the beginning of the session when its test is selected; stop it at the
    end whatever happened. Under pytest-xdist every worker collects every test, so there it starts only when the
    test asks for it (`stock_lm_eval`)."""
    selected = any(item.name == STOCK_TEST for item in request.session.items)
    if selected and "PYTEST_XDIST_WORKER" not in os.environ:
        data = request.getfixturevalue("data_dir")
        model = request.getfixturevalue("ssa_causal_dir")
        request.config.stash[_STOCK_KEY] = _launch(data, model, tmp_path_factory)
    yield
    run = request.config.stash.get(_STOCK_KEY, None)
    if run is not None:
        run.stop()
