"""scripts/bench_serving.py: it runs end to end at a tiny size (every variant measured, the baseline's paired ratio
1), and docs/serving.md's figures are the rendering of the result JSON it cites."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _bench_module():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import bench_serving
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return bench_serving


def test_docs_figures_are_the_rendering_of_the_cited_json():
    doc = (REPO / "docs" / "serving.md").read_text()
    source = re.search(r"Source: `([^`]+\.json)`", doc)
    assert source, "docs/serving.md cites no result JSON"
    result = json.loads((REPO / source.group(1)).read_text())
    assert _bench_module().docs_block(result, source.group(1)) in doc
    variants = {(r["dtype"], r["concurrency"], r["variant"]) for r in result["rows"]}
    assert variants == {(d, n, v) for d in ("float32", "bfloat16") for n in (1, 8, 32)
                        for v in ("ssa", "stock sdpa", "stock paged|eager")}
    for key in ("date", "model", "features", "loadavg_before", "command", "torch", "transformers"):
        assert key in result["machine"], key


def test_target_sentence_counts_the_cells_that_reach_the_target():
    ratio = lambda median, low: {"median": median, "low": low, "high": 1.2, "rounds": 9}
    rows = [{"variant": "ssa", "dtype": "float32", "concurrency": "1", "vs_stock_sdpa": ratio(1.01, 0.97)},
            {"variant": "ssa", "dtype": "float32", "concurrency": "8", "vs_stock_sdpa": ratio(0.96, 0.90)},
            {"variant": "ssa", "dtype": "bfloat16", "concurrency": "32", "vs_stock_sdpa": ratio(0.91, None)},
            {"variant": "stock sdpa", "dtype": "float32", "concurrency": "1", "vs_stock_sdpa": ratio(1.0, 1.0)}]
    sentence = _bench_module().target_sentence({"rows": rows, "machine": {"busy_processes": 0, "busy_before": 0.02,
                                                                          "busy_after": 0.1}})
    assert "Measured with no busy processes added:" in sentence
    assert "reaches it in 2 of 3 cells (lowest 0.91, bfloat16 with 32 requests)" in sentence
    assert "wholly above it in 1 of 3" in sentence
    few = [{**row, "vs_stock_sdpa": {**row["vs_stock_sdpa"], "low": None, "rounds": 5}} for row in rows]
    assert "5 rounds are too few for a 95% interval." in _bench_module().target_sentence({"rows": few, "machine": {}})
    busy = _bench_module().target_sentence({"rows": rows, "machine": {"busy_processes": 2}})
    assert "2 busy processes beside it" in busy and "Through serve" not in busy
    serving = [{"variant": "ssa", "ttft_s": 0.015, "itl_s": 0.006}, {"variant": "stock sdpa", "ttft_s": 0.012, "itl_s": 0.006}]
    served = _bench_module().target_sentence({"rows": rows, "machine": {}, "serving": serving})
    assert "time to first token 1.25x, inter-token latency 1.00x." in served


@pytest.mark.slow
def test_bench_serving_runs_every_variant(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_serving.py"), "--quick", "--concurrency", "3",
                           "--dtypes", "float32", "--new-tokens", "4", "--output", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["table"] in done.stdout
    rows = {r["variant"]: r for r in result["rows"]}
    assert set(rows) == {"ssa", "stock sdpa", "stock paged|eager"}
    assert rows["ssa"]["attention"] == "ssa_paged" and rows["stock sdpa"]["attention"] == "sdpa"
    assert len({r["tokens"] for r in rows.values()}) == 1 and rows["ssa"]["tokens"] > 0
    assert rows["stock sdpa"]["vs_stock_sdpa"]["median"] == 1.0
    assert all(r["tokens_per_s"] > 0 for r in rows.values())
