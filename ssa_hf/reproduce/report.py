"""RESULTS.md and the generated claims blocks of the docs.

RESULTS.md: the claims table (primary endpoints on the confirmatory seeds, with the Holm-adjusted p and whether
each verdict survives it, the paper's value and the scale), one line per claim, then per claim its setting, seeds,
power and every row beside the paper's figures and the trivial baselines. Everything above the per-claim
sections renders from docs/results_summary.json alone (`results_markdown_from_figures`), so the docs can be
regenerated from it without the runs:

    python -m ssa_hf.reproduce --results-file docs/results.md README.md docs/reproduce.md

rewrites docs/results.md from docs/results_summary.json, and in each markdown file given the blocks between
`<!-- generated: NAME -->` and `<!-- end: NAME -->` (NAME: claims = the short table and two sentences;
claims-table; claims-sentences; claims-lines = one line per claim).
"""

from __future__ import annotations

import math
import re
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


def _count(value: float | None) -> str:
    """1247492 -> 1.25M, 1.73e10 -> 17.3B."""
    if value is None:
        return "–"
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:g}"


def scale_text(figures: dict, scale: str) -> str:
    """`cpu` scale, and where declared our parameters / training tokens beside the paper's."""
    size = figures.get("size")
    text = f"`{scale}`"
    if size:
        text += (f": {_count(size['parameters'])} params / {_count(size['tokens'])} tokens (paper: "
                 f"{_count(size['paper_parameters'])} / {_count(size['paper_tokens'])})")
    return text


def _signed(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:+.{digits}g}"


def effect_text(figures: dict) -> str:
    """SSA − control [low, high] of a claim's summary entry."""
    return f"{_signed(figures['mean_difference'])} [{_signed(figures['low'])}, {_signed(figures['high'])}]"


def paper_text(figures: dict) -> str:
    paper = figures.get("paper")
    if not paper:
        return "plots, no figure"
    return f"{_num(paper['control'], 4)} → {_num(paper['treatment'], 4)} ({_signed(paper['difference'])}; {paper['note']})"


def survives_text(figures: dict, primaries: int) -> str:
    """Whether the verdict survives Holm over the primaries: yes / no (and why, where the declared exact test cannot
    reach the corrected level with these seeds) / – (no test decided it)."""
    if figures.get("survives") is None:
        return "–"
    if figures["survives"]:
        return "yes"
    smallest, alpha = figures.get("smallest_p"), figures.get("alpha", 0.05)
    if smallest is not None and smallest * primaries >= alpha:
        return (f"no (with {figures['seeds']} seeds the {TEST_NAMES.get(figures['test'], figures['test'])} test cannot go "
                f"below p = {smallest:.2g})")
    return "no"


def _primaries(claims: dict) -> int:
    return sum(1 for f in claims.values() if f.get("p") is not None)


def _verdict_cell(figures: dict) -> str:
    text = f"**{figures['verdict']}**"
    if figures["verdict"] == EXCLUDED and figures.get("margin_seen"):
        text += " (exploratory: the margin was declared after these seeds were seen)"
    if figures["verdict"] != EXCLUDED and figures.get("inside_margin"):
        text += f" (the interval also lies inside ±{_num(figures['margin'])})"
    return text


def _baseline_text(figures: dict) -> str:
    def arm(beats):
        return {True: "beats it", False: "at it", None: "not recorded"}[beats]

    if figures.get("baseline") is None:
        return "–"
    return (f"{_num(figures['baseline'])}: control {arm(figures.get('control_beats_baseline'))}, SSA "
            f"{arm(figures.get('treatment_beats_baseline'))}")


def claims_table(figures: dict, scale: str) -> str:
    """RESULTS.md's claims table, from results_summary.json's `claims`."""
    claims = figures["claims"] if "claims" in figures else figures
    m = _primaries(claims)
    rows = []
    for claim_id, f in claims.items():
        t_p = "–" if f.get("t_p") is None else "< 1e-15" if f["t_p"] < 1e-15 else f"{f['t_p']:.2g}"
        rows.append([f"`{claim_id}`: {f.get('title', '')}", f.get("label", ""), scale_text(f, scale), f["seeds"],
                     f"{_num(f['control'])} → {_num(f['treatment'])}", paper_text(f), effect_text(f),
                     f"{f['lower']} / {f['higher']}", _p({"p": f["p"], "test": f["test"]}), t_p,
                     _num(f.get("holm_p")), survives_text(f, m),
                     "–" if f.get("margin") is None else f"±{_num(f['margin'])}", _baseline_text(f), _verdict_cell(f)])
    return markdown_table(["claim", "primary endpoint", "scale", "confirmatory seeds", "ours: control → SSA",
                           "paper: softmax → SSA", "SSA − control [95% t interval]", "seeds SSA lower / higher",
                           "p (declared test)", "paired t p", f"Holm p ({m} primaries)", "survives Holm",
                           "equivalence margin", "trivial baseline (both arms)", "verdict"], rows)


def short_claims_table(figures: dict) -> str:
    """The README's claims table: claim, verdict, effect, interval, seeds, scale, Holm p, survives."""
    claims, scale = figures["claims"], figures.get("scale", "cpu")
    m = _primaries(claims)
    rows = [[f"`{claim_id}`", f"**{f['verdict']}**", _signed(f["mean_difference"]),
             f"[{_signed(f['low'])}, {_signed(f['high'])}]", f["seeds"], scale_text(f, scale), _num(f.get("holm_p")),
             survives_text(f, m)] for claim_id, f in claims.items()]
    return markdown_table(["claim", "verdict", "SSA − control", "95% t interval", "seeds", "scale", "Holm p",
                           "survives Holm"], rows)


def _ids(items: list[str]) -> str:
    return ", ".join(f"`{i}`" for i in items)


def plain_sentences(figures: dict) -> str:
    """Two plain sentences from results_summary.json: what the verdicts are, and which survive Holm."""
    claims, scale = figures["claims"], figures.get("scale", "cpu")
    groups = [(REPRODUCED, "reproduced", "reproduced"),
              (NOT_REPRODUCED, "went the other way, SSA significantly worse", "went the other way, SSA significantly worse"),
              (EXCLUDED, "excluded an effect half the paper's size or larger", "excluded an effect half the paper's size or larger"),
              (INCONCLUSIVE, "was inconclusive", "were inconclusive"),
              (NOT_MEASURABLE, "was not measurable, both arms at the trivial baseline",
               "were not measurable, both arms at the trivial baseline")]
    parts = []
    for word, one, many in groups:
        ids = [i for i, f in claims.items() if f["verdict"] == word]
        if ids:
            seen = " on a margin declared after the results" if any(claims[i].get("margin_seen") for i in ids) and word == EXCLUDED else ""
            parts.append(f"{len(ids)} {one if len(ids) == 1 else many}{seen} ({_ids(ids)})")
    first = (f"At the `{scale}` scale (models far smaller and trained far shorter than the paper's), of the "
             f"{len(claims)} claims " + "; ".join(parts) + ".")
    m = _primaries(claims)
    tested = [i for i, f in claims.items() if f.get("survives") is not None]
    kept = [i for i in tested if claims[i]["survives"]]
    lost = [f"`{i}` (Holm p {_num(claims[i]['holm_p'])})" for i in tested if not claims[i]["survives"]]
    second = (f"Corrected for testing {m} primary endpoints (Holm), {len(kept)} of the {len(tested)} verdicts that a test "
              f"decided survive ({_ids(kept) or 'none'})" + (f" and {len(lost)} do not: {', '.join(lost)}." if lost else "."))
    return first + " " + second


def summary_lines(figures: dict) -> str:
    return "\n".join(f"- {summary_line(claim_id, f)}" for claim_id, f in figures["claims"].items())


BLOCKS = {"claims": lambda f: short_claims_table(f) + "\n\n" + plain_sentences(f),
          "claims-table": short_claims_table, "claims-sentences": plain_sentences, "claims-lines": summary_lines}


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {re.escape(name)} -->\n).*?(\n<!-- end: {re.escape(name)} -->)", re.S)


def render_blocks(text: str, figures: dict, names=None) -> str:
    """`text` with every generated claims block it holds (or each of `names`, ValueError when missing) replaced by
    its version rendered from `figures` (results_summary.json)."""
    for name in names or BLOCKS:
        if not _block(name).search(text):
            if names:
                raise ValueError(f"no '<!-- generated: {name} -->' ... '<!-- end: {name} -->' block")
            continue
        rendered = BLOCKS[name](figures)
        text = _block(name).sub(lambda m: m.group(1) + rendered + m.group(2), text)
    return text


def _lm_eval_baselines(baselines: dict[str, Any], full: dict[str, Any] | None = None) -> str:
    """Chance and majority per task: of the whole evaluation split (what the measurability rule reads) beside the
    documents scored."""
    full = full or {}
    rows = [[task, _num((full.get(task) or b)["chance"], 4), _num((full.get(task) or b)["majority"], 4),
             (full.get(task) or b).get("majority_answer", ""), (full.get(task) or {}).get("n", "–"), _num(b["majority"], 4),
             b.get("n")] for task, b in baselines.items() if b]
    return markdown_table(["task", "chance (split)", "majority (split)", "majority answer", "split documents",
                           "majority (documents scored)", "documents scored"], rows) if rows else ""


def _paradigms(paradigms: list[dict]) -> str:
    from ..evaluation.compare import PAPER_FIGURES

    paper = {f.key: f"{_num(f.softmax, 4)} → {_num(f.ssa, 4)}" for f in PAPER_FIGURES if f.section == "zorro"}
    flags = {"chance": "**not measurable at this scale: both arms at chance**",
             "floor": "**not measurable at this scale: both arms at the floor**",
             "ceiling": "**not measurable at this scale: both arms at the ceiling**"}
    rows = [[p["paradigm"], paper.get(p["paradigm"], "–"), _num(p["control"]), _num(p["treatment"]),
             _num(p["treatment"] - p["control"]),
             "yes" if p["measurable"] else flags.get(p.get("bound"), "**not measurable at this scale**")] for p in paradigms]
    return markdown_table(["paradigm", "paper: softmax → SSA (%)", "control (%)", "SSA (%)", "SSA − control", "measurable"],
                          rows)


def paradigm_lines(paradigms: list[dict], floor: float | None, ceiling: float | None) -> list[str]:
    """The Zorro paradigm table with a sentence that counts the flags."""
    flagged = [p for p in paradigms if not p["measurable"]]
    bounds = ("" if floor is None and ceiling is None else
              f", or both at or below the declared floor ({_num(floor)}%) or at or above the ceiling ({_num(ceiling)}%)")
    return [f"Every paradigm, descriptive (confirmatory seeds, no tests): {len(flagged)} of {len(paradigms)} are not "
            f"measurable at this scale (both arms at chance: neither beats 50% by more than one standard error{bounds}), "
            "where no difference of the paper's kind can show.", "", _paradigms(paradigms), ""]


def _partial(seeds: dict) -> str:
    """A note when fewer confirmatory seeds finished than were declared (the call was stopped by time)."""
    declared = seeds.get("declared") or []
    if len(seeds["confirmatory"]) >= len(declared):
        return ""
    return (f" (**partial: {len(seeds['confirmatory'])} of the {len(declared)} declared confirmatory seeds finished "
            "so far**; the rest are not run)")


def _power_line(power: dict | None) -> str:
    if not power:
        return "Power: no earlier SD to size the seeds from (a new setting)."
    return (f"Power: from {power['source']}, SD of the paired differences {_num(power['sd'])} and effect "
            f"{_num(power['effect'])}: {power['seeds_for_80']} seeds give 80% power (paired t, alpha as below); the "
            f"{power['seeds']} confirmatory seeds give {100 * power['power']:.0f}%.")


def _margin_line(claim: dict) -> str:
    if claim.get("margin") is None:
        return "none declared (the paper gives no figure for this claim)"
    seen = "; declared after these seeds were seen, so its verdict is exploratory on them" if claim.get("margin_seen") else ""
    return f"±{_num(claim['margin'])} ({claim.get('margin_source') or 'declared in the config'}{seen})"


def claim_section(claim: dict) -> list[str]:
    seeds = claim["seeds"]
    ran = claim.get("exploratory_run") or []
    exploratory = _seeds(seeds["exploratory"])
    if seeds["exploratory"] and not ran:
        exploratory += " (not run by this call: their earlier figures are in the git history of docs/results.md)"
    lines = [f"## {claim['title']}", "", f"Claim: {claim['claim']}.", ""]
    if claim.get("description"):
        lines += [f"Setting: {claim['description']}.", ""]
    if claim.get("protocol"):
        lines += [f"Protocol: {claim['protocol']}.", ""]
    partial = _partial(seeds)
    lines += [f"Seeds: confirmatory {_seeds(seeds['confirmatory'])} (decide the verdict){partial}; exploratory {exploratory}.",
              "", _power_line(claim.get("power")), "",
              f"Measurable at this scale (declared rule): {claim['measure_rule']}, by more than one standard error; "
              "not measurable only when neither arm beats it.", "",
              f"Equivalence margin: {_margin_line(claim)}.", "",
              markdown_table(ROW_HEADERS, [_row_cells(r) for r in claim["rows"]]), ""]
    if claim.get("baselines"):
        lines += ["Chance and majority (always the most frequent answer) of each task's evaluation split, and the "
                  "majority on the documents scored:", "",
                  _lm_eval_baselines(claim["baselines"], claim.get("full_split_baselines")), ""]
    if claim.get("paradigms"):
        lines += paradigm_lines(claim["paradigms"], claim.get("floor"), claim.get("ceiling"))
    return lines


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


def public_command(command: str) -> str:
    """The command as the docs show it: an absolute output folder is this machine's, not the reader's."""
    return re.sub(r"(--output-dir[ =])(/\S+)", r"\1OUTPUT", command or "")


def figures_from_summary(summary: dict) -> dict:
    """results_summary.json: run_reproduce's summary less the per-row detail (the header facts, the notes and
    every claim's primary figures), enough to render everything but the per-claim sections."""
    from .claims import results_summary

    keep = ("scale", "description", "config_path", "environment", "report_only", "note", "level", "alpha",
            "multiplicity", "notes", "pending", "date", "minutes", "runs", "reused", "commit")
    figures = {key: summary.get(key) for key in keep}
    figures["command"] = public_command(summary.get("command", ""))
    figures["claims"] = results_summary(summary["claims"], summary.get("alpha", 0.05))
    return figures


def _header(figures: dict) -> list[str]:
    env = figures.get("environment") or {}
    lines = [f"# Reproduction of the SSA paper's claims — scale `{figures['scale']}`", "",
             f"- Command: `{public_command(figures.get('command', ''))}`",
             f"- Source: commit {figures.get('commit') or 'unknown'}"
             + (f" (this call {figures['minutes']:.1f} min wall clock" if figures.get("minutes") is not None else "")
             + (f"; {figures['reused']} of {figures['runs']} runs reused from an earlier call" if figures.get("reused") else "")
             + (")" if figures.get("minutes") is not None else ""),
             f"- Machine: {env.get('platform')}, {env.get('cpu_count')} CPU cores, {env.get('gpu') or 'no GPU'}; "
             f"Python {env.get('python')}, torch {env.get('torch')}, "
             f"transformers {env.get('transformers')}, lm-eval {env.get('lm_eval') or '–'}"]
    if figures.get("report_only"):
        lines.append("- Tabulated with `--report-only`: nothing ran in this call; the table holds the runs that finished "
                     "in earlier calls (their logs and timings are in the output folder).")
    if figures.get("note"):
        lines.append(f"- Note: {figures['note']}")
    lines += [f"- Config: `{figures.get('config_path')}` — {figures.get('description')}", ""]
    if figures.get("pending"):
        again = ("Run it without --report-only to train them (finished runs are reused)." if figures.get("report_only")
                 else "The same command runs them and reuses every finished run.")
        lines += [f"**Not run (or not finished) yet:** {', '.join(figures['pending'])}: no figure is given for "
                  f"them (fewer than 2 paired confirmatory seeds finished). {again}", ""]
    return lines


def _worse_primaries(claims: dict) -> list[str]:
    return [f"- `{i}`: {f.get('title', '')}: {f.get('label', '')}: {effect_text(f)}, "
            f"{TEST_NAMES.get(f['test'], f['test'])} p = {f['p']:.3g}" for i, f in claims.items()
            if f["verdict"] == NOT_REPRODUCED]


def results_markdown_from_figures(figures: dict, sections: list[str] | None = None) -> str:
    """RESULTS.md from results_summary.json (`figures`): header, rule, claims table, Holm survivors, one line per
    claim, where SSA is worse; then `sections` (the per-claim detail a run writes) or, without them, where the
    detail is."""
    claims = figures["claims"]
    primaries = _primaries(claims)
    lines = _header(figures) + [
        "The paper's figures are its own tables (ssa_hf/evaluation/compare.py PAPER_FIGURES); its ICL claims "
        "are qualitative (plots, no table). Our models are far smaller and trained far shorter than the "
        "paper's, on offline stand-ins for its data: every verdict says what this scale shows, not what the paper's "
        "scale would.", "",
        describe_rule(figures.get("level", 0.95), figures.get("alpha", 0.05), figures.get("multiplicity") or "none",
                      primaries), "",
        "## Claims (primary endpoints, confirmatory seeds)", "",
        claims_table(figures, figures["scale"]), "",
        "## In short (the block README.md shows)", "",
        "<!-- generated: claims -->", BLOCKS["claims"](figures), "<!-- end: claims -->", "",
        "## Confirmatory results, one line per claim (quoted verbatim by README.md and docs/*.md)", "",
        summary_lines(figures)] + [f"- `{claim_id}`: not run yet" for claim_id in figures.get("pending") or []] + [""]
    lines += ["## Where SSA is worse (primary endpoints)", ""] + (_worse_primaries(claims) or [
        "- No primary endpoint shows SSA significantly worse (p < 0.05 with the interval on the other side)."]) + [""]
    if sections is not None:
        lines += sections
    else:
        lines += ["## Per-claim detail", "",
                  "This file was rendered from docs/results_summary.json alone (`python -m ssa_hf.reproduce "
                  "--results-file docs/results.md`), which holds each claim's primary endpoint; the secondary "
                  "endpoints, each arm's interval and the exploratory seeds are written by a run of `ssa-hf "
                  "reproduce` into its RESULTS.md" + (f" ({figures['detail_source']})" if figures.get("detail_source") else "")
                  + ".", ""]
        zorro = next((f for f in claims.values() if f.get("paradigms")), None)
        if zorro:
            lines += [f"### {zorro.get('title', 'Zorro')}: every paradigm", ""]
            if zorro.get("paradigms_source"):
                lines += [zorro["paradigms_source"], ""]
            lines += paradigm_lines(zorro["paradigms"], zorro.get("floor"), zorro.get("ceiling"))
    if figures.get("notes"):
        lines += ["## Notes", ""] + [f"- {note}" for note in figures["notes"]] + [""]
    return "\n".join(lines)


def results_markdown(summary: dict) -> str:
    """The whole RESULTS.md from run_reproduce's summary (with the per-claim sections of its rows)."""
    sections = [line for claim in summary["claims"] for line in claim_section(claim)]
    return results_markdown_from_figures(figures_from_summary(summary), sections)
