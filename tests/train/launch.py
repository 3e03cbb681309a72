"""Pretraining runs in subprocesses, shared by the tests: two DDP processes under torchrun, and a run killed with
SIGKILL part-way (the exact-resume tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ssa_hf.train.checkpoint import list_checkpoints

REPO = Path(__file__).resolve().parents[2]


def kill_9_after_checkpoints(config, tmp_path: Path, checkpoints: int = 2) -> None:
    """Run `config` (its output_dir below `tmp_path`) with `ssa-hf pretrain` in a subprocess and SIGKILL it once
    `checkpoints` checkpoints exist; asserts it was killed, not finished."""
    path = tmp_path / "run.yaml"
    path.write_text(config.to_yaml())
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    process = subprocess.Popen([sys.executable, "-m", "ssa_hf.cli", "pretrain", "--config", str(path)], env=env,
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline and process.poll() is None and len(list_checkpoints(config.output_dir)) < checkpoints:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-way"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_two_processes(config, tmp_path: Path) -> dict:
    """Run `config` with scripts/pretrain.py in two CPU processes (DDP over gloo, torchrun); its metrics.json."""
    import json

    path = tmp_path / "ddp.yaml"
    path.write_text(config.to_yaml())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), str(REPO / "scripts" / "pretrain.py"), "--config", str(path)]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((Path(config.output_dir) / "metrics.json").read_text())
