"""Fan-out of `ssa-hf reproduce`: every run an independent unit in its own folder; workers on devices
(`--devices`), one command per run with a SLURM array script (`--emit-commands`, `--unit`, `--report-only`),
and runs that resume after kill -9 to the same report."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ssa_hf.cli import main
from ssa_hf.reproduce import config_from_dict, run_reproduce
from ssa_hf.reproduce.config import config_to_dict, load_config
from ssa_hf.reproduce.pipeline import all_units

from .test_pipeline import tiny_config

ROOT = Path(__file__).resolve().parents[2]


def _icl_only(root, steps=2, **icl_train):
    values = tiny_config(root)
    values.pop("masked"), values.pop("causal")
    every = values["icl"]["every"]
    every["seeds"] = {"confirmatory": [0, 1], "exploratory": []}
    every["config"]["train"].update(steps=steps, **icl_train)
    return values


def _figures(summary):
    return {c["id"]: [(r["verdict"], r["reading"], r["comparison"]["mean_difference"], r["p"]) for r in c["rows"]]
            for c in summary["claims"]}


def _write_config(values, path):
    import yaml

    path.write_text(yaml.safe_dump(values))
    return path


def test_each_worker_takes_the_next_device_and_sees_only_it(monkeypatch):
    import multiprocessing

    from ssa_hf.reproduce import runs

    monkeypatch.setattr(runs, "_WORKER_DEVICE", None)  # (restored to None afterwards: this process is no worker)
    counter = multiprocessing.get_context("spawn").Value("i", 0)
    seen = []
    for _ in range(3):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
        runs._take_device(["cuda:2", "cpu"], counter)
        seen.append((runs._WORKER_DEVICE, os.environ["CUDA_VISIBLE_DEVICES"]))
    assert seen == [("cuda", "2"), ("cpu", ""), ("cuda", "2")]


@pytest.mark.slow
def test_workers_on_devices_give_the_serial_figures(tmp_path):
    values = _icl_only(tmp_path)
    serial = run_reproduce(config_from_dict(values), tmp_path / "serial", command="test")
    fanned = config_from_dict({**values, "devices": ["cpu", "cpu"], "workers": 2})
    summary = run_reproduce(fanned, tmp_path / "fanned", command="test")
    assert _figures(summary) == _figures(serial) and summary["runs"] == 4 and not summary["pending"]
    runs = sorted(p.name for p in (tmp_path / "fanned" / "icl" / "every" / "runs").iterdir())
    assert runs == ["every-softmax-seed0", "every-softmax-seed1", "every-ssa-seed0", "every-ssa-seed1"]
    assert (tmp_path / "fanned" / "icl" / "every" / "report.md").is_file()  # the ICL pipeline's own report


def test_emitted_commands_run_one_unit_each_and_report_only_gathers_them(tmp_path, capsys):
    values = _icl_only(tmp_path)
    config_path = _write_config(values, tmp_path / "tiny.yaml")
    out, commands = tmp_path / "out", tmp_path / "commands"
    assert main(["reproduce", "--config", str(config_path), "--output-dir", str(out),
                 "--emit-commands", str(commands)]) == 0
    lines = (commands / "commands.txt").read_text().splitlines()
    ids = [u["id"] for u in all_units(config_from_dict(values), out)]
    assert len(lines) == len(ids) == 4 and [shlex.split(line)[-1] for line in lines] == ids
    assert all(line.startswith("ssa-hf reproduce --config ") and "--unit" in line for line in lines)
    script = (commands / "slurm_array.sh").read_text()
    assert "#SBATCH --array=1-4" in script and "SLURM_ARRAY_TASK_ID" in script and "--requeue" in script
    assert "--report-only" in (commands / "report.sh").read_text()
    # the written config is the one that runs
    assert config_to_dict(load_config(commands / "reproduce.yaml")) == config_to_dict(config_from_dict(values))
    # one "array task": the first command alone
    assert main(shlex.split(lines[0])[1:]) == 0
    assert (out / "icl" / "every" / "runs" / ids[0].rsplit("/", 1)[1] / "result.json").is_file()
    assert not (out / "RESULTS.md").exists()  # a unit writes no report
    # report-only: the claims whose runs have not finished are pending
    assert main(["reproduce", "--config", str(commands / "reproduce.yaml"), "--output-dir", str(out), "--report-only"]) == 0
    assert "not finished" in capsys.readouterr().out
    for line in lines[1:]:
        assert main(shlex.split(line)[1:]) == 0
    assert main(["reproduce", "--config", str(commands / "reproduce.yaml"), "--output-dir", str(out), "--report-only"]) == 0
    summary = json.loads((out / "results.json").read_text())
    assert not summary["pending"] and {c["id"] for c in summary["claims"]} == {"icl_every_magnitude", "icl_every_length"}
    # the same figures as one call that runs everything
    whole = run_reproduce(config_from_dict(values), tmp_path / "whole", command="test")
    assert _figures(summary) == _figures(whole)


def test_an_unknown_unit_is_refused_naming_the_runs(tmp_path):
    values = _icl_only(tmp_path)
    with pytest.raises(ValueError, match="unknown run.*icl/every/every-softmax-seed0"):
        run_reproduce(config_from_dict(values), tmp_path / "out", units=["icl/every/nope"])


def _run_killed(command: list[str], cwd: Path, ready, timeout: float = 300) -> int:
    """Start `command`, kill -9 it as soon as ready() is true; the return code (negative: killed)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if ready():
                os.killpg(process.pid, signal.SIGKILL)  # the call and any worker it started
                break
            time.sleep(0.05)
        return process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)


def _checkpoint_without_result(runs: Path) -> bool:
    return any((run / "checkpoint").is_dir() and not (run / "result.json").exists()
               for run in runs.glob("*") if run.is_dir())


def test_a_run_killed_mid_training_resumes_to_the_same_report(tmp_path):
    """kill -9 while an ICL run has a checkpoint and no result yet; the same command finishes it, and the
    report equals that of a call never interrupted (the resumed training continues bit for bit)."""
    values = _icl_only(tmp_path, steps=40, checkpoint_every=5)
    config_path = _write_config(values, tmp_path / "tiny.yaml")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ssa_hf.cli", "reproduce", "--config", str(config_path), "--output-dir", str(out)]
    code = _run_killed(command, tmp_path, lambda: _checkpoint_without_result(out / "icl" / "every" / "runs"))
    assert code == -signal.SIGKILL, "the call finished before a checkpoint appeared: nothing was interrupted"
    assert not (out / "results.json").exists() or json.loads((out / "results.json").read_text())["pending"]
    resumed = run_reproduce(config_from_dict(values), out, command="test")
    whole = run_reproduce(config_from_dict(values), tmp_path / "whole", command="test")
    assert not resumed["pending"] and _figures(resumed) == _figures(whole)


@pytest.mark.slow
def test_the_rehearsal_killed_in_a_language_model_training_resumes_to_the_same_report(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ssa_hf.cli", "reproduce", "--scale", "paper", "--rehearse", "tiny",
               "--output-dir", str(out)]

    def in_training():  # a decoder's training holds a checkpoint and has not finished
        return any(any((train / "checkpoints").glob("step-*")) and not (train / "final").exists()
                   for train in (out / "causal").glob("*/train"))

    assert _run_killed(command, tmp_path, in_training, timeout=600) == -signal.SIGKILL
    assert main(command[3:]) == 0
    whole = tmp_path / "whole"
    assert main(command[3:-1] + [str(whole)]) == 0
    first = json.loads((out / "results.json").read_text())
    second = json.loads((whole / "results.json").read_text())
    assert not first["pending"] and _figures(first) == _figures(second)
