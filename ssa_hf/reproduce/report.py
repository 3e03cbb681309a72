"""RESULTS.md: the claims table (primary endpoints), then per claim every row beside the paper's figures."""

from __future__ import annotations

import math
from typing import Any

from ..reporting import markdown_table
from .verdict import describe_rule


def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def _interval(comparison: dict, digits: int = 3) -> str:
    low, high = comparison.get("low"), comparison.get("high")
    mean = comparison.get("mean_difference")
    mark = " (bootstrap)" if comparison.get("interval") == "bootstrap" else ""
    if low is None or high is None:
        return f"{_num(mean, digits)} [–]{mark}"
    return f"{_num(mean, digits)} [{_num(low, digits)}, {_num(high, digits)}]{mark}"


def _arm(ci: dict | None, fallback: float | None) -> str:
    if not ci:
        return _num(fallback)
    if ci.get("low") is None:
        return _num(ci["mean"])
    return f"{_num(ci['mean'])} [{_num(ci['low'])}, {_num(ci['high'])}]"


def _paper_cell(row: dict) -> str:
    paper = row["paper"]
    if "softmax" in paper:
        text = f"{_num(paper['softmax'], 4)} → {_num(paper['ssa'], 4)}"
        if "nll_difference" in paper:
            text += f" (ΔNLL {paper['nll_difference']:+.3f})"
        return text
    return paper.get("text", "–") or "–"


def _p(row: dict) -> str:
    comparison = row["comparison"]
    if row.get("p") is not None:
        return f"{row['p']:.3g} ({row['test']})"
    w = comparison.get("wilcoxon_p")
    return "–" if w is None else f"{w:.3g} (wilcoxon, descriptive)"


ROW_HEADERS = ["endpoint", "paper: softmax → SSA", "ours: control (softmax)", "ours: SSA", "SSA − control [interval]",
               "seeds (SSA lower / higher)", "p", "verdict"]


def _row_cells(row: dict) -> list[str]:
    c = row["comparison"]
    label = ("**primary:** " if row["primary"] else "") + row["label"]
    if row["scale"] == "nll":
        label += " (mean NLL; perplexity = exp)"
    counts = f"{c.get('seeds')} ({c.get('lower', '–')} / {c.get('higher', '–')})"
    return [label, _paper_cell(row), _arm(c.get("control_ci"), c.get("mean_b")), _arm(c.get("treatment_ci"), c.get("mean_a")),
            _interval(c), counts, _p(row), f"**{row['verdict']}**" if row["primary"] else row["verdict"]]


def claims_table(claims: list[dict]) -> str:
    rows = []
    for claim in claims:
        primary = next(r for r in claim["rows"] if r["primary"])
        rows.append([claim["title"], claim["claim"], primary["label"], _paper_cell(primary), _interval(primary["comparison"]),
                     _p(primary), f"**{primary['verdict']}**"])
    return markdown_table(["experiment", "the paper's claim", "primary endpoint (declared before the run)", "paper",
                           "ours: SSA − softmax [interval]", "p", "verdict"], rows)


def _baselines_table(baselines: dict[str, Any]) -> str:
    rows = [[task, _num(b["chance"], 4), _num(b["majority"], 4), b.get("majority_answer", ""), b.get("n")]
            for task, b in baselines.items() if b]
    return markdown_table(["task", "chance", "majority", "majority answer", "documents"], rows) if rows else ""


def claim_section(claim: dict) -> list[str]:
    lines = [f"## {claim['title']}", "", f"Claim: {claim['claim']}. Seeds: {claim['seeds']}.", ""]
    if claim.get("settings"):
        lines += ["Settings: " + "; ".join(f"{k} {v}" for k, v in claim["settings"].items()) + ".", ""]
    lines += [markdown_table(ROW_HEADERS, [_row_cells(r) for r in claim["rows"]]), ""]
    if claim.get("baselines"):
        lines += ["Chance and majority (always the most frequent answer) on the documents scored:", "",
                  _baselines_table(claim["baselines"]), ""]
    return lines


def results_markdown(summary: dict) -> str:
    """The whole RESULTS.md from run_reproduce's summary."""
    env = summary["environment"]
    lines = [
        f"# Reproduction of the SSA paper's claims — scale `{summary['scale']}`",
        "",
        f"- Command: `{summary['command']}`",
        f"- Date: {summary['date']} (total {summary['minutes']:.1f} min wall clock this call"
        + (f"; {summary['reused']} of {summary['runs']} runs reused from an earlier call" if summary.get("reused") else "")
        + ")",
        f"- Machine: {env.get('platform')}, {env.get('cpu_count')} CPU cores, {env.get('gpu') or 'no GPU'}; "
        f"load average {env.get('load_average')}; Python {env.get('python')}, torch {env.get('torch')}, "
        f"transformers {env.get('transformers')}, lm-eval {env.get('lm_eval') or '–'}",
        f"- Config: `{summary['config_path']}` — {summary['description']}",
        "",
    ]
    if summary.get("report_only"):
        lines[4:4] = ["- Tabulated with `--report-only`: nothing ran in this call; the table holds the runs that finished "
                      "in earlier calls (their logs and timings are in the output folder)."]
    if summary.get("pending"):
        again = ("Run it without --report-only to train them (finished runs are reused)." if summary.get("report_only")
                 else "The same command resumes and reuses every finished run.")
        lines += [f"**Partial:** not finished yet: {', '.join(summary['pending'])} (fewer than 2 paired seeds, or the "
                  f"experiment is still running). {again}", ""]
    lines += [
        "The paper's figures come from REFERENCE.md (ssa_hf/evaluation/compare.py PAPER_FIGURES); the ICL claims "
        "are qualitative there (plots, no table). Our models are far smaller and trained far shorter than the "
        "paper's, on offline stand-ins for its data: a verdict says what this scale shows, not what the paper's "
        "scale would.",
        "",
        describe_rule(summary["level"], summary["alpha"]),
        "",
        "## Claims (primary endpoints)",
        "",
        claims_table(summary["claims"]),
        "",
    ]
    for claim in summary["claims"]:
        lines += claim_section(claim)
    if summary.get("notes"):
        lines += ["## Notes", ""] + [f"- {note}" for note in summary["notes"]] + [""]
    return "\n".join(lines)
