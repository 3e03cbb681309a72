"""scripts/gpu_check.py end to end in its tiny CPU mode (the real run needs CUDA: see the script's docstring)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.py"


def test_cpu_smoke_run_writes_passing_checks_and_timing_rows(tmp_path):
    output = tmp_path / "x.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SSA_HF_FLEX_COMPILE": "0"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke", "--lengths", "64", "--output", str(output)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(output.read_text())
    checks = result["correctness"]
    assert {c["check"] for c in checks} == {"flex ssa vs eager", "flex softmax vs sdpa", "SSALlamaForCausalLM ssa_auto vs ssa_eager"}
    assert len(checks) == 7 and all(c["passed"] for c in checks), result["correctness_table"]
    assert {c["dtype"] for c in checks} == {"float32", "bfloat16"}
    model = checks[-1]
    assert model["default_attn_implementation"] == "ssa_auto" and model["logged_backends"] == ["blockwise"]
    assert result["passed"] is True
    rows = {(r["L"], r["mode"], r["variant"]): r for r in result["timing"]}
    for mode in ("fwd", "fwd+bwd"):
        for variant in ("sdpa softmax", "flex softmax", "flex ssa"):
            assert (64, mode, variant) in rows
    assert rows[(64, "fwd", "flex ssa")]["ms"] > 0 and "x_sdpa" in rows[(64, "fwd", "flex ssa")]
    assert "forward-only" in rows[(64, "fwd+bwd", "flex ssa")]["skipped"]
    assert "| 64 | fwd | flex ssa |" in proc.stdout and "correctness: all passed" in proc.stdout


def test_failed_check_gives_nonzero_exit(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "TOL", {key: -1.0 for key in module.TOL})  # every attention check fails
    assert module.main(["--cpu-smoke", "--skip-timing", "--output", str(tmp_path / "y.json")]) == 1
    result = json.loads((tmp_path / "y.json").read_text())
    assert result["passed"] is False and not any(c["passed"] for c in result["correctness"][:-1])


@pytest.mark.gpu
def test_flex_on_cuda_matches_eager(tmp_path):
    """`pytest -m gpu` on a CUDA machine: the correctness half of the GPU check (flex SSA forward and backward,
    b and n gradients, bf16, GQA, masks, the model's default backend) must pass."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (this test is selected only with -m gpu)")
    output = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--skip-timing", "--output", str(output)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert json.loads(output.read_text())["passed"] is True
