"""Two processes on the CPU (DDP over gloo), launched with torchrun: both take part, on different data, and end
with identical weights equal to a one-process run of the same global batch (REFERENCE.md section 5 lists the ways
this fails silently: one process only, or two unsynchronised copies)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssa_hf.train import pretrain

from .conftest import tiny_config

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_two_processes_train_one_model(corpora, tmp_path):
    overrides = dict(max_steps=3, eval_steps=0, save_steps=0, per_device_train_batch_size=4, logging_steps=1,
                     gradient_accumulation_steps=2)
    config = tiny_config("causal", corpora, tmp_path / "ddp", **overrides)
    path = tmp_path / "ddp.yaml"
    path.write_text(config.to_yaml())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
               "--master_port", str(_free_port()), str(REPO / "scripts" / "pretrain.py"), "--config", str(path)]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    distributed = metrics["distributed"]
    assert distributed["num_processes"] == 2
    assert [p["rank"] for p in distributed["processes"]] == [0, 1]
    assert all(p["num_processes_seen"] == 2 for p in distributed["processes"])
    assert all(p["examples_seen"] == 3 * 2 * 4 for p in distributed["processes"])
    assert distributed["parameter_fingerprint_max_abs_diff"] == 0.0
    first = [p["first_batch_indices"] for p in distributed["processes"]]
    assert not set(first[0]) & set(first[1])  # different data on each process
    assert metrics["global_batch_size"] == 16

    # one process reading the same global batches (8 per micro-batch) reaches the same loss and weights
    single = pretrain(tiny_config("causal", corpora, tmp_path / "single",
                                  **{**overrides, "per_device_train_batch_size": 8}))
    assert single.metrics["distributed"]["processes"][0]["first_batch_indices"] == first[0] + first[1]
    assert single.metrics["final_step_loss"] == pytest.approx(metrics["final_step_loss"], abs=1e-5)
    from safetensors.torch import load_file

    a = load_file(tmp_path / "ddp" / "final" / "model.safetensors")
    b = load_file(tmp_path / "single" / "final" / "model.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_fsdp_on_two_cpu_processes_matches_one_process(corpora, tmp_path):
    """configs/accelerate/fsdp.yaml with use_cpu: the sharded run trains, exports and equals one process."""
    import yaml

    settings = yaml.safe_load((REPO / "configs" / "accelerate" / "fsdp.yaml").read_text())
    settings.update(use_cpu=True, num_processes=2, mixed_precision="no", main_process_port=_free_port())
    (tmp_path / "fsdp_cpu.yaml").write_text(yaml.safe_dump(settings))
    overrides = dict(max_steps=3, eval_steps=0, save_steps=0, per_device_train_batch_size=4, logging_steps=1)
    config = tiny_config("causal", corpora, tmp_path / "fsdp", **overrides)
    (tmp_path / "run.yaml").write_text(config.to_yaml())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(tmp_path / "fsdp_cpu.yaml"),
               str(REPO / "scripts" / "pretrain.py"), "--config", str(tmp_path / "run.yaml")]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = json.loads((tmp_path / "fsdp" / "metrics.json").read_text())
    assert metrics["distributed"]["num_processes"] == 2
    single = pretrain(tiny_config("causal", corpora, tmp_path / "single", **{**overrides, "per_device_train_batch_size": 8}))
    assert single.metrics["final_step_loss"] == pytest.approx(metrics["final_step_loss"], abs=1e-5)
    from safetensors.torch import load_file

    a = load_file(tmp_path / "fsdp" / "final" / "model.safetensors")
    b = load_file(tmp_path / "single" / "final" / "model.safetensors")
    assert a.keys() == b.keys() and max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5
