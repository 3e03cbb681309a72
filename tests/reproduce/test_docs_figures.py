"""README.md, docs/results.md, docs/reproduce.md and docs/icl.md agree with each other and with the run's figures
(docs/results_summary.json, written by `ssa-hf reproduce --results-file docs/results.md`) on every figure they
share: a doc that quotes a claim's confirmatory result quotes the line regenerated from the JSON, verbatim."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ssa_hf.reproduce.report import summary_line

REPO = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/results.md", "docs/reproduce.md", "docs/icl.md"]
QUOTE = re.compile(r"`((?:icl|masked|causal)_\w+)`: SSA − control [^\n]*?confirmatory seeds(?: \(of \d+ declared\))?: \*\*[^*]+\*\*")
NOT_RUN = re.compile(r"`((?:icl|masked|causal)_\w+)`: not run in this session")


@pytest.fixture(scope="module")
def figures() -> dict:
    return json.loads((REPO / "docs" / "results_summary.json").read_text())


def test_results_md_holds_every_claim_of_the_summary(figures):
    text = (REPO / "docs" / "results.md").read_text()
    assert figures["claims"], "docs/results_summary.json holds no claim"
    for claim_id, entry in figures["claims"].items():
        assert summary_line(claim_id, entry) in text, claim_id
    for claim_id in figures["pending"]:
        assert f"`{claim_id}`: not run in this session" in text
    assert f"commit {figures['commit']}" in text and figures["date"] in text


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
    for doc in ("README.md", "docs/reproduce.md"):
        quoted = {m.group(1) for m in QUOTE.finditer((REPO / doc).read_text())}
        assert quoted == set(figures["claims"]), doc


def test_readme_and_icl_doc_quote_the_same_main_job_figures():
    marker = "<!-- quick-preset-primary -->"
    lines = []
    for doc in ("README.md", "docs/icl.md"):
        text = (REPO / doc).read_text()
        assert marker in text, doc
        lines.append(text.split(marker, 1)[1].strip().split("\n\n", 1)[0])
    assert lines[0] == lines[1]
