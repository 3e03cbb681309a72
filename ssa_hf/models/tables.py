"""The docs tables of scoring functions, their settings and the backends, generated from the registries.

docs/attention.md and docs/dev/architecture.md hold each table between `<!-- generated: NAME -->` and
`<!-- end: NAME -->`; `python -m ssa_hf.models.tables` rewrites them, and a test fails when they differ from
the declarations (tests/models/test_docs_tables.py). Not part of the remote-code unit (no model file imports it).
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

from .backends import BACKENDS, supported_backends
from .scoring import ALL_SCORING_FUNCTIONS
from .settings import CHOICES, parameter_specs

DOCS = {"attention.md": ("scoring-functions", "scoring-settings"), "dev/architecture.md": ("declarations", "backends")}


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def scoring_functions_table() -> str:
    rows = []
    for name, entry in ALL_SCORING_FUNCTIONS.items():
        params = ", ".join(f"{p.name} (`{p.field}`)" for p in entry.parameters) or "-"
        rows.append([f"`{name}`", entry.description, params, "yes" if entry.normalised else "no",
                     ", ".join(supported_backends(name, "cpu", needs_grad=True)),
                     ", ".join(supported_backends(name, "cpu", needs_grad=False))])
    return _table(["name", "weights over a row x", "parameters (config field)", "sums to 1",
                   "backends (training, CPU)", "backends (inference, CPU)"], rows)


def _default(value) -> str:
    return "unset" if value is None else f"`{value!r}`".replace("'", '"')


def scoring_settings_table() -> str:
    users = {p.field: [n for n, e in ALL_SCORING_FUNCTIONS.items() if p in e.parameters] for p in parameter_specs()}
    rows = [[f"`{c.field}`" + (f" (formerly `{c.old_name}`)" if c.old_name else ""), _default(c.default),
             " or ".join(f"`{v}`" for v in c.choices), "all", c.doc] for c in CHOICES]
    for spec in parameter_specs():
        used = ", ".join(f"`{n}`" for n in users[spec.field])
        rows.append([f"`{spec.field}`", _default(spec.default), spec.describe(), used, spec.doc])
        if spec.learn_field:
            rows.append([f"`{spec.learn_field}`", _default(spec.learn_default), "true or false", used, spec.learn_doc])
    return _table(["field", "default", "allowed", "used by", "meaning"], rows)


def declarations_table() -> str:
    rows = []
    for name, entry in ALL_SCORING_FUNCTIONS.items():
        for p in entry.parameters:
            learned = f"`{p.learn_field}`" if p.learn_field else ("always" if p.learnable else "never (fixed)")
            floor = f"{'>=' if p.floor_included else '>'} {p.floor:g}" + (f", <= {p.cap:g}" if p.cap else "")
            stored = "`scoring_parametrization`" if p.follows_parametrization else "softplus"
            unset = ", required" if p.default is None and not p.derive else (", derived" if p.derive else "")
            rows.append([f"`{name}`", entry.kind, p.name, f"`{p.field}` = {_default(p.default)}{unset}",
                         learned, f"{p.describe()}; value {floor}", stored])
        if not entry.parameters:
            rows.append([f"`{name}`", entry.kind, "-", "", "", "", ""])
    return _table(["scoring function", "kind", "parameter", "config field (default)", "learned", "range; kept",
                   "stored as"], rows)


def backends_table() -> str:
    rows = []
    for name, backend in BACKENDS.items():
        runs = [n for n, e in ALL_SCORING_FUNCTIONS.items() if backend.scoring(e) is None]
        rows.append([f"`{name}`", backend.summary, ", ".join(runs), "yes" if backend.returns_weights else "no"])
    return _table(["backend", "what", "scoring functions", "returns weights"], rows)


TABLES = {"scoring-functions": scoring_functions_table, "scoring-settings": scoring_settings_table,
          "declarations": declarations_table, "backends": backends_table}


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {name} -->\n).*?(\n<!-- end: {name} -->)", re.S)


def render(text: str, names) -> str:
    """`text` with each named table replaced by its generated version (ValueError when a marker is missing)."""
    for name in names:
        if not _pattern(name).search(text):
            raise ValueError(f"no '<!-- generated: {name} -->' ... '<!-- end: {name} -->' block")
        text = _pattern(name).sub(lambda m: m.group(1) + TABLES[name]() + m.group(2), text)
    return text


def main(docs: Path = Path("docs")) -> int:
    for file, names in DOCS.items():
        path = docs / file
        path.write_text(render(path.read_text(), names))
        print(f"wrote {len(names)} tables into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs")))
