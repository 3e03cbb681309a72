"""The docs are reference, not a log: every generated block equals its rendering from its source (the benchmark
JSON, docs/results_summary.json, the registries); outside those blocks no local paths, machine load, dates or
notes about how the work was done; every relative link resolves (anchors too); every page of docs/ is reachable
from docs/README.md; performance.md stays short."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from .conftest import REPO


def _render_docs():
    spec = importlib.util.spec_from_file_location("render_docs", REPO / "scripts" / "render_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_docs = _render_docs()
ALL_DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
# pages whose prose is checked for development traces (results.md's prose is rendered by ssa_hf.reproduce.report)
LINTED = [REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs" / name for name in (
    "README.md", "attention.md", "baselines.md", "data.md", "deploy.md", "evaluation.md", "hub.md", "icl.md",
    "models.md", "performance.md", "pretraining.md", "reproduce.md", "results.md", "serving.md", "uptraining.md",
    "dev/architecture.md", "dev/reliability.md", "dev/transformers_compat.md"))]

TRACES = {
    "an absolute local path": re.compile(r"(?<![\w.:/~-])/(?:work|home|tmp|Users|root|mnt|scratch)/"),
    "a load average": re.compile(r"load average", re.I),
    "a date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "an issue number": re.compile(r"\b[Ii]ssues? #?\d+"),
    "a note about the work": re.compile(r"this round|previous round|this session|REFERENCE(?:\.md| §)|DESIGN\.md|"
                                        r"other agents|agents' jobs|this machine|measured here", re.I),
}
GENERATED = re.compile(r"<!-- generated: ([\w-]+) -->\n.*?<!-- end: \1 -->", re.S)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    return GENERATED.sub("", text)


@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_generated_blocks_equal_their_sources(path):
    text = path.read_text()
    rendered = render_docs.render(text, render_docs.renderers(), str(path.relative_to(REPO)))
    assert rendered == text, f"{path.relative_to(REPO)}: a generated block is stale; run python scripts/render_docs.py"


def test_a_changed_figure_is_caught(tmp_path):
    text = (REPO / "README.md").read_text()
    tampered = re.sub(r"(<!-- generated: speed -->\n(?:.*\n)*?\| float32 \| )[0-9.]+", r"\g<1>0.01", text, count=1)
    assert tampered != text
    assert render_docs.render(tampered, render_docs.renderers()) != tampered


def test_the_readme_shows_the_speed_and_claims_blocks():
    text = (REPO / "README.md").read_text()
    blocks = {m.group(1): m.group(0) for m in GENERATED.finditer(text)}
    assert {"speed", "claims"} <= set(blocks)
    assert "| float32 |" in blocks["speed"] and "Source: `benchmarks/results/" in blocks["speed"]


def test_benchmark_json_records_its_machine():
    runs = [(p, json.loads(p.read_text())) for p in sorted((REPO / "benchmarks" / "results").glob("*.json"))]
    runs = [(p, d) for p, d in runs if render_docs.is_targets_run(d)]
    assert runs, "no committed JSON of scripts/bench_targets.py"
    for path, data in runs:
        machine = data["machine"]
        for key in ("cpu", "cpu_features", "cores", "threads", "torch", "isa", "busy_before", "busy_after", "date_utc",
                    "commit"):
            assert key in machine, f"{path.name}: machine.{key} missing"
        assert re.fullmatch(r"[a-z0-9-]+-\d{4}-\d{2}-\d{2}", path.stem), f"{path.name}: name it <cpu>-<date>.json"
        assert path.stem.endswith(machine["date_utc"][:10])
        assert data["rows"] and all(r["command"].startswith("python scripts/") for r in data["rows"])


@pytest.mark.parametrize("path", LINTED, ids=lambda p: str(p.relative_to(REPO)))
def test_no_development_traces_outside_generated_blocks(path):
    prose = _prose(path.read_text())
    found = []
    for what, pattern in TRACES.items():
        for match in pattern.finditer(prose):
            line = prose[:match.start()].count("\n") + 1
            found.append(f"{what}: {match.group(0)!r} (prose line {line})")
    assert not found, f"{path.relative_to(REPO)}:\n" + "\n".join(found)


def test_the_trace_patterns_catch_what_they_should():
    samples = {"an absolute local path": "see /work/main/x", "a load average": "at load average 3",
               "a date": "measured 2026-12-07", "an issue number": "issue 23's targets",
               "a note about the work": "this round's code"}
    for what, sample in samples.items():
        assert TRACES[what].search(sample), what
    assert not any(p.search("python scripts/x.py --output benchmarks/results/a.json") for p in TRACES.values())


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.*)$", text, re.M)}


def _links(path: Path):
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    for match in LINK.finditer(text):
        yield match.group(1) or match.group(2)


@pytest.mark.parametrize("path", ALL_DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    broken = []
    for target in _links(path):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        destination = (path.parent / file).resolve() if file else path
        if not destination.exists():
            broken.append(target)
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{path.relative_to(REPO)}: broken links {broken}"


def test_every_docs_page_is_reachable_from_the_index():
    index = REPO / "docs" / "README.md"
    seen, queue = {index}, [index]
    while queue:
        page = queue.pop()
        for target in _links(page):
            file = target.partition("#")[0]
            if not file or re.match(r"[a-z]+:", file):
                continue
            destination = (page.parent / file).resolve()
            if destination.suffix == ".md" and destination.is_file() and destination not in seen:
                seen.add(destination)
                queue.append(destination)
    pages = {p.resolve() for p in (REPO / "docs").rglob("*.md")}
    assert not pages - seen, f"not reachable from docs/README.md: {sorted(str(p.relative_to(REPO)) for p in pages - seen)}"
    assert index.resolve() in {(REPO / t).resolve() for t in _links(REPO / "README.md") if t.endswith(".md")}


def test_docs_file_names_are_lower_case():
    assert all(p.name == p.name.lower() or p.name == "README.md" for p in (REPO / "docs").rglob("*.md"))


def test_performance_page_is_reference_sized():
    text = (REPO / "docs" / "performance.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "<!-- generated: kernel-targets -->" in text
