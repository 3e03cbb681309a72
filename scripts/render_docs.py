"""Rewrite every generated block of README.md and docs/ from its source.

A block is the text between `<!-- generated: NAME -->` and `<!-- end: NAME -->`. Its source:

| blocks | source | renderer |
|---|---|---|
| speed, kernel-targets | the newest benchmarks/results/*.json (written by scripts/bench_targets.py) | this script |
| claims, claims-table, claims-sentences, claims-lines | docs/results_summary.json (written by ssa-hf reproduce) | ssa_hf.reproduce.report |
| scoring-functions, scoring-settings, declarations, backends | the registries of ssa_hf.models | ssa_hf.models.tables |
| serving-figures, serving-figures-busy, serving-figures-114m | the JSON its first line names (written by scripts/bench_serving.py) | scripts/bench_serving.py |
| icl-quick-runs, icl-quick-primary, icl-quick-reading, icl-quick-secondary, icl-quick-tables | docs/icl_quick_results.json (the main job's results.json, `ssa-hf icl --preset quick`) | ssa_hf.icl.report |

    python scripts/render_docs.py            # rewrite the blocks in place
    python scripts/render_docs.py --check    # exit 1 (naming the files) where a block differs from its source

tests/test_docs.py runs the check, so a figure in the docs cannot drift from the file it was measured into.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BENCHMARKS = REPO / "benchmarks" / "results"
SUMMARY = REPO / "docs" / "results_summary.json"
ICL_QUICK = REPO / "docs" / "icl_quick_results.json"
# figure blocks of scripts/bench_serving.py results: quiet tiny decoder, the same beside busy processes, 114M sizes
SERVING_BLOCKS = ("serving-figures", "serving-figures-busy", "serving-figures-114m")
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end: \2 -->)", re.S)
MAIN_SHAPE = "B=4, H=8, L=2048, D=64, causal"


def markdown_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def is_targets_run(data) -> bool:
    """A JSON written by scripts/bench_targets.py (its machine record and target rows)."""
    return (isinstance(data, dict) and isinstance(data.get("machine"), dict) and "date_utc" in data["machine"]
            and isinstance(data.get("rows"), list) and all("target" in r and "group" in r for r in data["rows"]))


def latest_benchmark(folder: Path = BENCHMARKS) -> tuple[Path, dict]:
    """The newest benchmark JSON (by the date it records), with its path."""
    found = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        if is_targets_run(data):  # (other benchmarks keep their JSON here too)
            found.append((data["machine"]["date_utc"], path, data))
    if not found:
        raise FileNotFoundError(f"no benchmark JSON in {folder}; run scripts/bench_targets.py --output {folder}/CPU-DATE.json")
    _, path, data = max(found, key=lambda item: item[0])
    return path, data


def _row(data: dict, target: str) -> dict | None:
    return next((r for r in data["rows"] if r["target"] == target and r["load"] == 0), None)


def _ratio(row: dict | None) -> str:
    if row is None or row.get("value") is None:
        return "not measured"
    text = f"{row['value']:.2f}"
    if row.get("low") is not None and row.get("high") is not None:
        text += f" [{row['low']:.2f}, {row['high']:.2f}]"
    return text


def caption(path: Path, data: dict) -> str:
    m = data["machine"]
    features = set(m.get("cpu_features", []))
    isa = ", ".join(name for name, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AVX512-BF16", "avx512_bf16"),
                                            ("AMX", "amx_tile")) if flag in features) or "no AVX2"
    busy = (f"other work on the machine: {m['busy_before']:.2f} of its cores busy at the start, {m['busy_after']:.2f} "
            "at the end")
    return (f"Source: `{path.relative_to(REPO).as_posix()}`, written by "
            f"`{m.get('command', 'python scripts/bench_targets.py')}`: {m['cpu']} ({isa}; {m['cores']} cores, "
            f"{m['threads']} threads, kernel built for `{m['isa']}`), torch {m['torch']}, commit "
            f"{m.get('commit', 'not recorded')}; {busy}.")


def speed_block(path: Path, data: dict) -> str:
    rows = []
    for dtype in ("float32", "bfloat16", "float16"):
        cells = [_ratio(_row(data, f"{dtype} {mode}, main shape: SSA / SDPA time")) for mode in ("fwd", "fwd+bwd")]
        memory = _ratio(_row(data, f"{dtype} fwd+bwd, main shape: SSA / SDPA peak extra memory"))
        rows.append(f"| {dtype} | {cells[0]} | {cells[1]} | {memory} |")
    head = (f"| {MAIN_SHAPE} | forward time | forward + backward time | peak extra memory (fwd+bwd) |\n"
            "|---|---|---|---|")
    return head + "\n" + "\n".join(rows) + "\n\n" + caption(path, data) + "\n"


def targets_block(path: Path, data: dict) -> str:
    lines = ["| group | target | busy processes | measured | bound | verdict |", "|---|---|---:|---|---|---|"]
    for r in data["rows"]:
        bound = ("<= " if r["at_most"] else ">= ") + f"{r['bound']:g}"
        lines.append(f"| {r['group']} | {r['target']} | {r['load']} | {_ratio(r)} | {bound} | {r['verdict']} |")
    return "\n".join(lines) + "\n\n" + caption(path, data) + "\n"


def _benchmark_renderers() -> dict:
    path, data = latest_benchmark()
    return {"speed": lambda: speed_block(path, data), "kernel-targets": lambda: targets_block(path, data)}


class FromCurrent:
    """A renderer that reads its source's name from the block it replaces (the block names its JSON)."""

    def __init__(self, fn):
        self.fn = fn


def _serving_figures(current: str) -> str:
    import importlib.util

    match = re.search(r"Source: `([^`]+)`", current)
    if not match:
        raise ValueError("serving-figures: the block names no `Source: <json>`")
    source = REPO / match.group(1)
    if not source.is_file() or REPO not in source.resolve().parents:
        raise ValueError(f"serving-figures: its source {match.group(1)} is not a file of the repository")
    sys.path.insert(0, str(REPO / "scripts"))
    spec = importlib.util.spec_from_file_location("bench_serving", REPO / "scripts" / "bench_serving.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    block = module.docs_block(json.loads(source.read_text()), match.group(1))
    return block[len(module.DOCS_BLOCK[0]):-len(module.DOCS_BLOCK[1])] + "\n"


def keep_icl_results(path: Path) -> None:
    """Write `path` (an ICL run's results.json) as docs/icl_quick_results.json: what the docs render (config,
    summaries, paired comparisons, each run's in-distribution check), without the runs' own evaluations (the
    summaries hold them) or what names the machine (output paths, load averages)."""
    data = json.loads(path.read_text())
    if data.get("config", {}).get("name") != "quick":
        raise ValueError(f"{path} is a run of preset {data.get('config', {}).get('name')!r}; the docs quote 'quick'")
    data["files"] = {}
    data["runs"] = [{k: run.get(k) for k in ("name", "task", "scoring", "seed", "check")} for run in data["runs"]]
    data["environment"] = {k: v for k, v in data.get("environment", {}).items()
                           if k in ("cpu_count", "cuda", "torch", "python", "threads")}
    ICL_QUICK.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")  # compact: kept in git
    print(f"kept {path} as {ICL_QUICK.relative_to(REPO)}")


def renderers() -> dict:
    """Block name -> a function returning its text (each block's text ends with a newline before its end marker)."""
    from ssa_hf.models.tables import TABLES
    from ssa_hf.reproduce.report import BLOCKS

    figures = json.loads(SUMMARY.read_text())
    out = {name: (lambda fn=fn: fn() + "\n") for name, fn in TABLES.items()}
    out.update({name: (lambda fn=fn: fn(figures) + "\n") for name, fn in BLOCKS.items()})
    out.update(_benchmark_renderers())
    if ICL_QUICK.is_file():
        from ssa_hf.icl.pipeline import ICLResults
        from ssa_hf.icl.report import docs_blocks

        icl = docs_blocks(ICLResults(**json.loads(ICL_QUICK.read_text())))
        out.update({name: (lambda text=text: text + "\n") for name, text in icl.items()})
    if (REPO / "scripts" / "bench_serving.py").is_file():
        for name in SERVING_BLOCKS:
            out[name] = FromCurrent(_serving_figures)
    return out


def render(text: str, table: dict, where: str = "") -> str:
    """`text` with each generated block replaced by its rendering; ValueError for a block without a source."""
    def replace(match: re.Match) -> str:
        name = match.group(2)
        if name not in table:
            raise ValueError(f"{where}: block {name!r} has no renderer (known: {', '.join(sorted(table))})")
        renderer = table[name]
        text = renderer.fn(match.group(3)) if isinstance(renderer, FromCurrent) else renderer()
        return match.group(1) + text + match.group(4)

    return BLOCK.sub(replace, text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block is stale")
    parser.add_argument("--icl-results", type=Path, metavar="RESULTS_JSON",
                        help="first keep this run's results.json (ssa-hf icl --preset quick) as docs/icl_quick_results.json")
    args = parser.parse_args(argv)
    if args.icl_results:
        keep_icl_results(args.icl_results)
    table = renderers()
    stale = []
    for path in markdown_files():
        text = path.read_text()
        rendered = render(text, table, str(path.relative_to(REPO)))
        if rendered != text:
            stale.append(path.relative_to(REPO).as_posix())
            if not args.check:
                path.write_text(rendered)
    verb = "stale" if args.check else "rewrote"
    print(f"{verb}: {', '.join(stale)}" if stale else "every generated block is up to date")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
