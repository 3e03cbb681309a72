"""README.md, docs/results.md, docs/reproduce.md and docs/icl.md agree with each other and with the run's figures
(docs/results_summary.json, written by `ssa-hf reproduce --results-file docs/results.md`) on every figure they
share: docs/results.md is its rendering from the JSON, every generated claims block is too (`python -m
ssa_hf.reproduce --results-file docs/results.md README.md ...` rewrites them), and a doc that quotes a claim's
confirmatory result quotes the line regenerated from the JSON, verbatim."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ssa_hf.icl.stats import VERDICTS, holm
from ssa_hf.reproduce.report import BLOCKS, render_blocks, results_markdown_from_figures, summary_line

REPO = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/results.md", "docs/reproduce.md", "docs/icl.md"]
QUOTE = re.compile(r"`((?:icl|masked|causal)_\w+)`: SSA − control [^\n]*?confirmatory seeds(?: \(of \d+ declared\))?: \*\*[^*]+\*\*")
NOT_RUN = re.compile(r"`((?:icl|masked|causal)_\w+)`: not run yet")
BLOCK = re.compile(r"<!-- generated: (claims[\w-]*) -->\n(.*?)\n<!-- end: \1 -->", re.S)


@pytest.fixture(scope="module")
def figures() -> dict:
    return json.loads((REPO / "docs" / "results_summary.json").read_text())


def test_results_md_holds_every_claim_of_the_summary(figures):
    text = (REPO / "docs" / "results.md").read_text()
    assert figures["claims"], "docs/results_summary.json holds no claim"
    for claim_id, entry in figures["claims"].items():
        assert summary_line(claim_id, entry) in text, claim_id
    for claim_id in figures["pending"]:
        assert f"`{claim_id}`: not run yet" in text
    assert f"commit {figures['commit']}" in text


def test_results_md_is_its_rendering_from_the_summary(figures):
    # every figure of docs/results.md (claims table, Holm p, survivors, sentences, paradigms) comes from the JSON
    text = (REPO / "docs" / "results.md").read_text()
    expected = results_markdown_from_figures(figures)
    expected += "" if expected.endswith("\n") else "\n"
    assert text == expected, "run: python -m ssa_hf.reproduce --results-file docs/results.md"
    assert not re.search(r"(?<![\w.])/(work|home|tmp|Users|root)/", text), "a local absolute path in docs/results.md"


def test_the_summary_is_consistent_with_the_rule(figures):
    claims = figures["claims"]
    assert all(f["verdict"] in VERDICTS for f in claims.values())
    adjusted = holm([f["p"] for f in claims.values()])
    for (claim_id, f), holm_p in zip(claims.items(), adjusted):
        assert f["holm_p"] == pytest.approx(holm_p), claim_id
        assert (f["survives"] is None) == (f["verdict"] not in VERDICTS[:2]), claim_id


@pytest.mark.parametrize("doc", DOCS)
def test_every_generated_block_is_its_rendering(doc, figures):
    text = (REPO / doc).read_text()
    for match in BLOCK.finditer(text):
        assert match.group(1) in BLOCKS, f"{doc}: unknown block {match.group(1)}"
        assert match.group(2) == BLOCKS[match.group(1)](figures), f"{doc}: block {match.group(1)} is stale"
    assert render_blocks(text, figures) == text


@pytest.mark.parametrize("doc", DOCS)
def test_every_quoted_figure_is_the_runs(doc, figures):
    text = (REPO / doc).read_text()
    for match in QUOTE.finditer(text):
        claim_id = match.group(1)
        assert claim_id in figures["claims"], f"{doc} quotes {claim_id}, which the run did not measure"
        assert match.group(0) == summary_line(claim_id, figures["claims"][claim_id]), f"{doc}: {claim_id}"
    for match in NOT_RUN.finditer(text):
        assert match.group(1) in figures["pending"], f"{doc} says {match.group(1)} did not run, but it did"


def test_the_docs_quote_the_headline_claims(figures):
    # the README and the reproduce docs name the confirmatory verdicts, not only RESULTS.md
    # (a quoted line or a generated claims block)
    for doc in ("README.md", "docs/reproduce.md"):
        text = (REPO / doc).read_text()
        quoted = {m.group(1) for m in QUOTE.finditer(text)}
        quoted |= {i for m in BLOCK.finditer(text) if m.group(1) in ("claims", "claims-table", "claims-lines")
                   for i in re.findall(r"`((?:icl|masked|causal)_\w+)`", m.group(2))}
        assert quoted == set(figures["claims"]), doc


def test_readme_and_icl_doc_quote_the_same_main_job_figures():
    # the main job's primary endpoint, rendered in both from docs/icl_quick_results.json (test_docs checks that
    # every generated block equals its rendering)
    block = re.compile(r"<!-- generated: icl-quick-primary -->\n(.*?)\n<!-- end: icl-quick-primary -->", re.S)
    lines = [block.search((REPO / doc).read_text()) for doc in ("README.md", "docs/icl.md")]
    assert all(lines) and lines[0].group(1) == lines[1].group(1)
