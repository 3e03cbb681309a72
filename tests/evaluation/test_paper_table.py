"""`ssa-hf compare` puts the paper's figures (one declared table) beside ours, with chance and majority."""

from __future__ import annotations

import json

import pytest

from ssa_hf.evaluation.compare import PAPER_FIGURES, CompareConfig, paper_rows, run_compare


def _eval(name, boolq, arc):
    baselines = {"chance": 0.5, "majority": 0.622, "majority_answer": "yes", "num_choices": [2], "n": 3270}
    return {
        "kind": "lm_eval", "name": name, "settings": {"num_fewshot": 0}, "versions": {"lm_eval": "0.4.13"},
        "tasks": {
            "boolq": {"metrics": {"acc": {"value": boolq, "stderr": 0.01}}, "num_fewshot": 0, "baselines": baselines},
            "arc_easy": {"metrics": {"acc": {"value": 0.3}, "acc_norm": {"value": arc}}, "num_fewshot": 0},
        },
    }


def _zorro(name, accuracy):
    paradigms = {"binding-principle_a": {"holistic": {"accuracy": accuracy}, "pll": {"accuracy": 0.1}}}
    return {"kind": "zorro", "name": name, "mean": {"holistic": accuracy, "pll": 0.1}, "paradigms": paradigms,
            "settings": {"methods": ["holistic", "pll"], "pairs_per_paradigm": {"binding-principle_a": 2000},
                         "paradigms": list(paradigms), "zorro_version": "v1", "zorro_dir": "/z"}}


@pytest.fixture()
def results(tmp_path):
    files = []
    for name, boolq, arc, ppl, zorro in (("ssa", 0.6, 0.41, 20.5, 0.9), ("softmax", 0.55, 0.39, 23.25, 0.8)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "eval.json").write_text(json.dumps(_eval(name, boolq, arc)))
        (folder / "probe.json").write_text(json.dumps(_zorro(name, zorro)))
        records = [{"model": f"/runs/{name}", "data": "wikitext", "perplexity": ppl},
                   {"model": f"/runs/{name}", "data": "fineweb_edu", "perplexity": ppl - 2}]
        (folder / "perplexity.json").write_text(json.dumps(records))
        files.append(str(folder))
    return files


def test_the_paper_table_is_declared_once_with_the_reference_figures():
    figures = {(f.section, f.key, f.metric): (f.softmax, f.ssa) for f in PAPER_FIGURES}
    assert figures[("lm_eval", "boolq", "acc")] == (0.3783, 0.5618)
    # the eight tasks of the paper's table: cb with acc and f1, ReCoRD with f1 and em
    assert figures[("lm_eval", "cb", "acc")] == (0.1429, 0.4643) and figures[("lm_eval", "cb", "f1")] == (0.1310, 0.2663)
    assert figures[("lm_eval", "record", "f1")] == (0.1983, 0.2482) and figures[("lm_eval", "record", "em")] == (0.1932, 0.2427)
    assert len({f.key for f in PAPER_FIGURES if f.section == "lm_eval"}) == 8
    figures = {(f.section, f.key): (f.metric, f.softmax, f.ssa) for f in PAPER_FIGURES}
    assert figures[("lm_eval", "copa")] == ("acc", 0.59, 0.64)
    assert figures[("perplexity", "wikipedia")] == ("perplexity", 24.58, 22.07)
    assert figures[("zorro", "quantifiers-superlative")] == ("accuracy %", 71.20, 83.95)
    assert len(PAPER_FIGURES) == 16 and sum(f.section == "lm_eval" for f in PAPER_FIGURES) == 10


def test_compare_prints_the_paper_beside_ours_with_baselines(results, tmp_path):
    text = run_compare(CompareConfig(results=results, output_dir=str(tmp_path / "out"))).markdown
    assert "## Beside the paper" in text
    assert "| section | task / set / paradigm | metric | paper softmax | paper SSA | ssa | softmax | chance | majority |" in text
    assert "| lm_eval | boolq | acc | 0.3783 | 0.5618 | 0.6000 | 0.5500 | 0.5000 | 0.6220 (yes) |" in text
    assert "| lm_eval | arc_easy | acc_norm | 0.2934 | 0.5387 | 0.4100 | 0.3900 | 0.2500 | – |" in text
    # tasks we did not run keep the paper's figures and an empty cell for ours
    assert "| lm_eval | winogrande | acc | 0.4972 | 0.5178 | – | – | 0.5000 | – |" in text
    assert "| perplexity | wikipedia | perplexity | 24.58 | 22.07 | 20.50 | 23.25 | – | – |" in text
    assert "| perplexity | fineweb | perplexity | 21.86 | 19.73 | 18.50 | 21.25 | – | – |" in text
    assert "| zorro | binding-principle_a | accuracy % | 78.25 | 87.90 | 90.00 | 80.00 | 50.00 | – |" in text
    assert "REFERENCE.md section 4" in text


def test_an_ambiguous_perplexity_label_is_left_blank():
    run = {"name": "m", "perplexity": {"wikitext/valid": 20.0, "wikitext/test": 21.0}}
    _, rows = paper_rows({"lm_eval": [], "zorro": [], "perplexity": [run]})
    wikipedia = next(r for r in rows if r["figure"]["key"] == "wikipedia")
    assert wikipedia["ours"] == {"m": None}
