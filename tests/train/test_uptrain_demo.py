"""ssa_hf.train.uptrain_demo (`ssa-hf uptrain-demo`): the whole pipeline at a tiny size: every arm starts at the
source's validation loss, the SSA arm's b and n are traced, the report and plot are written."""

from __future__ import annotations

import json

import pytest

from ssa_hf.cli import main as cli

from ..data.fixtures import documents, write_jsonl


def test_uptrain_demo_end_to_end(tmp_path, capsys):
    data = write_jsonl(tmp_path / "web.jsonl.gz", documents(150, per_document=8, seed=0), gz=True)
    out = tmp_path / "demo"
    assert cli(["uptrain-demo", "--output-dir", str(out), "--train-path", str(data), "--max-documents", "150",
                "--validation-documents", "20", "--block-size", "32", "--vocab-size", "300", "--source-steps", "6",
                "--uptrain-steps", "4", "--eval-steps", "2", "--seeds", "0,1", "--scoring-learning-rates", "0.05",
                "--batch-size", "8", "--temperature-learning-rate", "0.05"]) == 0
    assert "val loss at step 0" in capsys.readouterr().out
    result = json.loads((out / "uptrain_demo.json").read_text())
    source = result["source_eval_loss"]
    arms = {row["arm"]: row for row in result["summary"]}
    assert set(arms) == {"softmax", "temperature (t lr 0.05)", "ssa (b, n lr 0.05)"}
    assert arms["softmax"]["step0_loss"] == [source, source]  # the same weights and validation set: exact
    assert arms["temperature (t lr 0.05)"]["step0_loss"] == pytest.approx([source, source], rel=1e-6)  # t = 1
    assert arms["ssa (b, n lr 0.05)"]["step0_loss"] == pytest.approx([source, source], rel=1e-5)
    ssa_runs = result["runs"]["ssa (b, n lr 0.05)"]
    for run in ssa_runs.values():
        assert run["b"][0] == [0, 1e-3] and run["b"][-1][0] == 4 and run["b"][-1][1] != pytest.approx(1e-3, rel=1e-4)
    assert arms["softmax"]["paired_diff_to_softmax"] == [0.0, 0.0]
    assert (out / "uptrain_demo.png").stat().st_size > 0 and (out / "uptrain_demo.md").is_file()
