"""RESULTS.md and the generated claims blocks of the docs.

RESULTS.md: the claims table (primary endpoints on the confirmatory seeds, with the Holm-adjusted p and whether
each verdict survives it, the paper's value and the scale), one line per claim, then per claim its setting, seeds,
power and every row beside the paper's figures and the trivial baselines. Everything above the per-claim
sections renders from docs/results_summary.json alone (`results_markdown_from_figures`), so the docs can be
regenerated from it without the runs:

    python -m ssa_hf.reproduce.report --results-file docs/results.md README.md docs/reproduce.md

rewrites docs/results.md from docs/results_summary.json, and in each markdown file given the blocks between
`<!-- generated: NAME -->` and `<!-- end: NAME -->` (NAME: claims = the short table and two sentences;
claims-table; claims-sentences; claims-lines = one line per claim).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from ..reporting import markdown_table
from .verdict import EXCLUDED, INCONCLUSIVE, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, TEST_NAMES, describe_rule

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
    return "–" if row.get("p") is None else f"{row['p']:.3g} ({TEST_NAMES[row['test']]})"


def _seeds(seeds: list[int]) -> str:
    if not seeds:
        return "none"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _baselines(row: dict) -> str:
    return "; ".join(f"{name} {_num(value)}" for name, value in (row.get("baselines") or {}).items() if value is not None) or "–"


def _outcome(row: dict) -> str:
    return f"**{row['verdict']}**" if row["decides"] else row["reading"]


ROW_HEADERS = ["endpoint (treatment minus control)", "seeds", "paper: softmax → SSA", "ours: control", "ours: treatment",
               "trivial baselines", "treatment − control [95% t interval]", "SD of differences",
               "seeds treatment lower / higher", "p", "verdict or reading"]


def _row_cells(row: dict) -> list[str]:
    c = row["comparison"]
    label = ("**primary:** " if row["primary"] else "") + row["label"]
    if row["scale"] == "nll":
        label += " (mean NLL; perplexity = exp)"
    seeds = f"{row['seeds_kind']} {_seeds(row['seed_list'])}"
    return [label, seeds, _paper_cell(row), _arm(c.get("control_ci"), c.get("mean_b")),
            _arm(c.get("treatment_ci"), c.get("mean_a")), _baselines(row), _interval(c), _num(c.get("sd")),
            f"{c.get('lower', '–')} / {c.get('higher', '–')}", _p(row), _outcome(row)]


def claims_table(claims: list[dict]) -> str:
    rows = []
    for claim in claims:
        primary = claim["rows"][0]
        c = primary["comparison"]
        rows.append([claim["title"], claim["claim"], claim.get("description", ""), primary["label"],
                     _seeds(claim["seeds"]["confirmatory"]) + _partial(claim["seeds"]), _interval(c), _num(c.get("sd")),
                     f"{c.get('lower', '–')} / {c.get('higher', '–')}", _p(primary), _num(primary.get("holm_p")),
                     f"**{primary['verdict']}**"])
    return markdown_table(["experiment", "the paper's claim", "backbone and SSA setting", "primary endpoint",
                           "confirmatory seeds", "SSA − control [95% t interval]", "SD of differences",
                           "seeds SSA lower / higher", "p (declared test)", "Holm p (all primaries)", "verdict"], rows)


def _lm_eval_baselines(baselines: dict[str, Any]) -> str:
    rows = [[task, _num(b["chance"], 4), _num(b["majority"], 4), b.get("majority_answer", ""), b.get("n")]
            for task, b in baselines.items() if b]
    return markdown_table(["task", "chance", "majority", "majority answer", "documents"], rows) if rows else ""


def _paradigms(paradigms: list[dict]) -> str:
    rows = [[p["paradigm"], _num(p["control"]), _num(p["treatment"]), _num(p["treatment"] - p["control"]),
             "yes" if p["measurable"] else "**no: control at chance**"] for p in paradigms]
    return markdown_table(["paradigm", "control (%)", "SSA (%)", "SSA − control", "measurable (control > 50% + 1 SE)"], rows)


def _partial(seeds: dict) -> str:
    """A note when fewer confirmatory seeds finished than were declared (the call was stopped by time)."""
    declared = seeds.get("declared") or []
    if len(seeds["confirmatory"]) >= len(declared):
        return ""
    return (f" (**partial: {len(seeds['confirmatory'])} of the {len(declared)} declared confirmatory seeds finished in "
            "this session**; the rest are not run)")


def _power_line(power: dict | None) -> str:
    if not power:
        return "Power: no earlier SD to size the seeds from (a new setting)."
    return (f"Power: from {power['source']}, SD of the paired differences {_num(power['sd'])} and effect "
            f"{_num(power['effect'])}: {power['seeds_for_80']} seeds give 80% power (paired t, alpha as below); the "
            f"{power['seeds']} confirmatory seeds give {100 * power['power']:.0f}%.")


def claim_section(claim: dict) -> list[str]:
    seeds = claim["seeds"]
    ran = claim.get("exploratory_run") or []
    exploratory = _seeds(seeds["exploratory"])
    if seeds["exploratory"] and not ran:
        exploratory += " (not run in this session: their earlier figures are in the git history of docs/results.md)"
    lines = [f"## {claim['title']}", "", f"Claim: {claim['claim']}.", ""]
    if claim.get("description"):
        lines += [f"Setting: {claim['description']}.", ""]
    if claim.get("protocol"):
        lines += [f"Protocol: {claim['protocol']}.", ""]
    partial = _partial(seeds)
    lines += [f"Seeds: confirmatory {_seeds(seeds['confirmatory'])} (decide the verdict){partial}; exploratory {exploratory}.",
              "", _power_line(claim.get("power")), "",
              f"Measurable at this scale (declared rule): {claim['measure_rule']}, by more than one standard error.", "",
              markdown_table(ROW_HEADERS, [_row_cells(r) for r in claim["rows"]]), ""]
    if claim.get("baselines"):
        lines += ["Chance and majority (always the most frequent answer) on the documents scored:", "",
                  _lm_eval_baselines(claim["baselines"]), ""]
    if claim.get("paradigms"):
        floor = sum(not p["measurable"] for p in claim["paradigms"])
        lines += [f"Every paradigm, descriptive (confirmatory seeds, no tests): {floor} of {len(claim['paradigms'])} "
                  "have the control arm at chance, where no difference of the paper's kind can show.", "",
                  _paradigms(claim["paradigms"]), ""]
    return lines


def _worse(claims: list[dict]) -> list[str]:
    """Every deciding row where SSA is significantly worse, and exploratory rows where the nominal test says so."""
    out = []
    for claim in claims:
        for row in claim["rows"]:
            c = row["comparison"]
            if c.get("low") is None or row.get("p") is None or row["p"] >= 0.05:
                continue
            worse = (c["low"] > 0) if row["direction"] == "lower" else (c["high"] < 0)
            if worse:
                out.append(f"- {claim['title']}: {row['label']} ({row['seeds_kind']} seeds): {_interval(c)}, "
                           f"p = {row['p']:.3g}" + ("" if row["decides"] else " (exploratory)"))
    return out


def summary_line(claim_id: str, figures: dict) -> str:
    """One claim's confirmatory result in one line, from its results_summary.json entry: the exact text the docs
    quote (tests/reproduce/test_docs_figures.py checks that README and docs/*.md agree with it)."""
    def g(value):
        return "–" if value is None else f"{value:+.3g}"

    p = "–" if figures["p"] is None else f"{figures['p']:.2g}"
    return (f"`{claim_id}`: SSA − control {g(figures['mean_difference'])} [{g(figures['low'])}, {g(figures['high'])}], "
            f"{TEST_NAMES.get(figures['test'], figures['test'])} p = {p}, SSA lower / higher in {figures['lower']} / "
            f"{figures['higher']} of {figures['seeds']} confirmatory seeds"
            + (f" (of {figures['declared_seeds']} declared)" if figures.get("declared_seeds", 0) > figures["seeds"] else "")
            + f": **{figures['verdict']}**")


def results_markdown(summary: dict) -> str:
    """The whole RESULTS.md from run_reproduce's summary."""
    env = summary["environment"]
    primaries = sum(1 for c in summary["claims"] for r in c["rows"] if r["decides"])
    lines = [
        f"# Reproduction of the SSA paper's claims — scale `{summary['scale']}`",
        "",
        f"- Command: `{summary['command']}`",
        f"- Source: commit {summary.get('commit') or 'unknown'}; written {summary['date']} (this call "
        f"{summary['minutes']:.1f} min wall clock"
        + (f"; {summary['reused']} of {summary['runs']} runs reused from an earlier call" if summary.get("reused") else "")
        + ")",
        f"- Machine: {env.get('platform')}, {env.get('cpu_count')} CPU cores, {env.get('gpu') or 'no GPU'}; "
        f"load average {env.get('load_average')}; Python {env.get('python')}, torch {env.get('torch')}, "
        f"transformers {env.get('transformers')}, lm-eval {env.get('lm_eval') or '–'}",
        f"- Config: `{summary['config_path']}` — {summary['description']}",
        "",
    ]
    if summary.get("note"):
        lines[5:5] = [f"- Note: {summary['note']}"]
    if summary.get("report_only"):
        lines[5:5] = ["- Tabulated with `--report-only`: nothing ran in this call; the table holds the runs that finished "
                      "in earlier calls (their logs and timings are in the output folder)."]
    if summary.get("pending"):
        again = ("Run it without --report-only to train them (finished runs are reused)." if summary.get("report_only")
                 else "The same command runs them and reuses every finished run.")
        lines += [f"**Not run (or not finished) in this session:** {', '.join(summary['pending'])}: no figure is given for "
                  f"them (fewer than 2 paired confirmatory seeds finished). {again}", ""]
    lines += [
        "The paper's figures come from REFERENCE.md (ssa_hf/evaluation/compare.py PAPER_FIGURES); the ICL claims "
        "are qualitative there (plots, no table). Our models are far smaller and trained far shorter than the "
        "paper's, on offline stand-ins for its data: a verdict says what this scale shows, not what the paper's "
        "scale would.",
        "",
        describe_rule(summary["level"], summary["alpha"], summary.get("multiplicity", "none"), primaries),
        "",
        "## Claims (primary endpoints, confirmatory seeds)",
        "",
        claims_table(summary["claims"]),
        "",
    ]
    from .claims import results_summary

    lines += ["## Confirmatory results, one line per claim (quoted verbatim by README.md and docs/*.md)", ""]
    lines += [f"- {summary_line(claim_id, figures)}" for claim_id, figures in results_summary(summary["claims"]).items()]
    lines += [f"- `{claim_id}`: not run in this session" for claim_id in summary.get("pending", [])] + [""]
    worse = _worse(summary["claims"])
    lines += ["## Where SSA is worse", ""] + (worse or ["- No row shows SSA significantly worse (p < 0.05 with the "
                                                        "interval on the other side)."]) + [""]
    for claim in summary["claims"]:
        lines += claim_section(claim)
    if summary.get("notes"):
        lines += ["## Notes", ""] + [f"- {note}" for note in summary["notes"]] + [""]
    return "\n".join(lines)
