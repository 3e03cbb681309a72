"""The docs tables of scoring functions, settings and backends agree with the declarations they are generated
from (regenerate with `python -m ssa_hf.models.tables`)."""

from pathlib import Path

import pytest

from ssa_hf.models import tables

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("file", sorted(tables.DOCS))
def test_docs_tables_match_the_declarations(file):
    text = (DOCS / file).read_text()
    assert tables.render(text, tables.DOCS[file]) == text, (
        f"docs/{file}: a generated table differs from the registries; run `python -m ssa_hf.models.tables`")


def test_a_changed_declaration_is_caught(monkeypatch):
    text = (DOCS / "attention.md").read_text()
    monkeypatch.setitem(tables.TABLES, "scoring-settings", lambda: "| field |\n|---|\n| `renamed` |")
    assert tables.render(text, ["scoring-settings"]) != text
    with pytest.raises(ValueError, match="no '<!-- generated: backends -->'"):
        tables.render("no markers here", ["backends"])


def test_every_parameter_and_backend_is_documented():
    settings = tables.scoring_settings_table()
    for spec in tables.parameter_specs():
        assert f"`{spec.field}`" in settings
    assert all(f"`{name}`" in tables.backends_table() for name in tables.BACKENDS)


def test_the_sdpa_baseline_snippet_builds_a_small_model():
    """docs/models.md's SDPA-baseline snippet, run as written (on the meta device: the snippet once built a default
    7B Llama, which the OOM killer stopped without a message)."""
    import torch

    text = (DOCS / "models.md").read_text()
    start = text.index("PyTorch's own SDPA for a softmax model")
    block = text[text.index("```python\n", start) + len("```python\n"):]
    block = block[: block.index("```")]
    namespace: dict = {}
    with torch.device("meta"):
        exec(compile(block, "docs/models.md", "exec"), namespace)
    assert sum(p.numel() for p in namespace["model"].parameters()) < 2_000_000
    assert namespace["model"].config._attn_implementation == "sdpa"
