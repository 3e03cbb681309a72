"""python -m ssa_hf.reproduce: docs/results.md and the generated claims blocks of markdown files, rendered from
docs/results_summary.json alone (ssa_hf.reproduce.report); `--check` fails when a file differs from its rendering.

    python -m ssa_hf.reproduce --results-file docs/results.md README.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .report import render_blocks, results_markdown_from_figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ssa_hf.reproduce", description=(
        "Render RESULTS.md and the generated claims blocks of markdown files from results_summary.json."))
    parser.add_argument("files", nargs="*", type=Path, help="markdown files whose <!-- generated: claims* --> blocks to rewrite")
    parser.add_argument("--summary", type=Path, default=Path("docs/results_summary.json"))
    parser.add_argument("--results-file", type=Path, default=None, help="write RESULTS.md here from the summary alone")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs from its rendering")
    args = parser.parse_args(argv)
    figures = json.loads(args.summary.read_text())
    outputs = {path: render_blocks(path.read_text(), figures) for path in args.files}
    if args.results_file is not None:
        outputs[args.results_file] = results_markdown_from_figures(figures)
    outputs = {path: text if text.endswith("\n") else text + "\n" for path, text in outputs.items()}
    stale = [path for path, text in outputs.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path}: differs from its rendering from {args.summary}")
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
