"""The benchmark scripts run end to end (tiny sizes: the figures themselves are not checked here, only that
every cell produces a measurement and a ratio against the baseline of the same run)."""

import json
import subprocess
import sys

from tests.conftest import REPO


def _run(script, *args, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / script), *args, "--output", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["table"] in done.stdout
    return result["rows"]


def test_bench_attention_cells_and_ratios(tmp_path):
    rows = _run("bench_attention.py", "--lengths", "48", "--modes", "fwd+bwd", "decode", "--variants", "sdpa softmax",
                "blockwise ssa", "--repeats", "1", "--decode-repeats", "2", tmp_path=tmp_path)
    cells = {(r["mode"], r["variant"]): r for r in rows}
    assert set(cells) == {(m, v) for m in ("fwd+bwd", "decode") for v in ("sdpa softmax", "blockwise ssa")}
    for (mode, variant), row in cells.items():
        assert "error" not in row, row
        assert row["time_s"] > 0 and row["time_ratio"] > 0
        if variant == "sdpa softmax":
            assert row["time_ratio"] == 1.0
        if mode == "fwd+bwd":
            assert row["extra_mb"] > 0


def test_bench_model_rows(tmp_path):
    rows = _run("bench_model.py", "--presets", "tiny_llama", "--lengths", "32", "--steps", "1", "--warmup", "1",
                "--new-tokens", "3", "--decode-repeats", "1", tmp_path=tmp_path)
    assert [r["variant"] for r in rows] == ["ssa", "softmax", "softmax sdpa"]
    for row in rows:
        assert row["train_tokens_per_s"] > 0 and row["decode_tokens_per_s"] > 0
    assert rows[1]["train_tokens_per_s_vs_softmax"] == 1.0 and rows[2]["train_tokens_per_s_vs_sdpa"] == 1.0


def test_bench_attention_paired_quiet_and_beside_a_busy_process(tmp_path):
    rows = _run("bench_attention.py", "--lengths", "32", "--modes", "fwd+bwd", "--variants", "blockwise ssa",
                "--repeats", "1", "--warmup", "1", "--load", "1", tmp_path=tmp_path)
    assert {(r["load"], r["variant"]) for r in rows} == {(load, v) for load in (0, 1)
                                                          for v in ("sdpa softmax", "blockwise ssa")}
    for row in rows:
        assert "error" not in row, row
        assert row["time_s"] > 0 and row["time_ratio"] > 0
