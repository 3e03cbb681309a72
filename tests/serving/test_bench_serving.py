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
