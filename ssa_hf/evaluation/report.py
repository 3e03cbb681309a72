"""Tables and figures of evaluation results, one model or several side by side (used by eval, probe and compare).

Every function takes plain result dicts (the JSON the pipelines write), so reports can be rebuilt from files.
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Any

from ..reporting import markdown_table, pyplot

MAIN_METRICS = ("acc", "acc_norm")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def fmt_value(value: Any, stderr: Any = None, digits: int = 4) -> str:
    value = _num(value)
    if value is None:
        return "–"
    stderr = _num(stderr)
    return f"{value:.{digits}f}" + (f" ± {stderr:.{digits}f}" if stderr is not None else "")


def first_seen(runs: list[dict[str, Any]], section: str) -> list[str]:
    """The keys of `run[section]` over all runs, in the order they first appear."""
    return list(dict.fromkeys(key for run in runs for key in run[section]))


def short_hash(model_info: dict[str, Any]) -> str:
    sha = (model_info.get("checkpoint_hash") or {}).get("sha256")
    return sha[:12] if sha else "–"


# ------------------------------------------------------------------------------------------------- lm-eval


def lm_eval_rows(runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(task, metric) rows in first-seen order: acc and acc_norm first, then any other metric."""
    rows: list[tuple[str, str]] = []
    for run in runs:
        for task, entry in run["tasks"].items():
            metrics = list(entry.get("metrics", {}))
            ordered = [m for m in MAIN_METRICS if m in metrics] + [m for m in metrics if m not in MAIN_METRICS]
            for metric in ordered:
                if (task, metric) not in rows:
                    rows.append((task, metric))
    return rows


def _task_baselines(runs: list[dict[str, Any]], task: str) -> dict[str, Any] | None:
    for run in runs:
        base = run["tasks"].get(task, {}).get("baselines")
        if base:
            return base
    return None


def lm_eval_table(runs: list[dict[str, Any]]) -> str:
    """task | metric | one column per model (value ± stderr) | chance | majority (answer) | n | shots."""
    names = [run["name"] for run in runs]
    rows = []
    for task, metric in lm_eval_rows(runs):
        base = _task_baselines(runs, task)
        entries = [run["tasks"].get(task, {}) for run in runs]
        cells = [e.get("metrics", {}).get(metric) or {} for e in entries]
        values = [fmt_value(c.get("value"), c.get("stderr")) for c in cells]
        ns = sorted({e.get("n") for e in entries if e.get("n") is not None})
        shots = sorted({e.get("num_fewshot") for e in entries if e.get("num_fewshot") is not None})
        rows.append(
            [task, metric, *values]
            + [fmt_value(base["chance"]) if base else "–"]
            + [f"{fmt_value(base['majority'])} ({base['majority_answer']})" if base else "–"]
            + ["/".join(map(str, ns)) or "–", "/".join(map(str, shots)) or "–"]
        )
    return markdown_table(["task", "metric", *names, "chance", "majority", "n", "shots"], rows)


def lm_eval_caveats(runs: list[dict[str, Any]]) -> list[str]:
    """Differences that make side-by-side numbers not comparable, one line each."""
    notes = []

    def differs(label: str, values: dict[str, Any]) -> None:
        if len({repr(v) for v in values.values()}) > 1:
            notes.append(f"{label} differs: " + ", ".join(f"{k}={v}" for k, v in values.items()))

    if len(runs) > 1:
        differs("lm-eval version", {r["name"]: r.get("versions", {}).get("lm_eval") for r in runs})
        differs("data source", {r["name"]: r.get("settings", {}).get("data") for r in runs})
        differs("limit", {r["name"]: r.get("settings", {}).get("limit") for r in runs})
        tasks = {t for r in runs for t in r["tasks"]}
        for task in sorted(tasks):
            for key in ("num_fewshot", "version", "n"):
                values = {r["name"]: r["tasks"].get(task, {}).get(key) for r in runs if task in r["tasks"]}
                differs(f"{task}: {key}", values)
    for run in runs:
        for task, entry in run["tasks"].items():
            data = entry.get("data") or {}
            if entry.get("num_fewshot") and data.get("fewshot_split") and data.get("fewshot_split") == data.get("split"):
                notes.append(
                    f"{run['name']} {task}: the {entry['num_fewshot']} few-shot examples come from the scored split "
                    f"({data['split']}; the local copy has no training split), never the scored document itself"
                )
            base = entry.get("baselines")
            acc = (entry.get("metrics", {}).get("acc") or {}).get("value")
            if base and _num(acc) is not None and acc < base["majority"]:
                notes.append(
                    f"{run['name']} {task}: acc {acc:.4f} is below the majority baseline {base['majority']:.4f} "
                    f"(always '{base['majority_answer']}')"
                )
    return notes


def models_table(runs: list[dict[str, Any]]) -> str:
    rows = []
    seen = set()
    for run in runs:
        if run["name"] in seen:
            continue
        seen.add(run["name"])
        model = run.get("model", {})
        rows.append(
            [
                run["name"],
                model.get("source", "–"),
                model.get("model_class", "–"),
                str(model.get("attention_scoring", "–")),
                f"{model['num_parameters']:,}" if model.get("num_parameters") else "–",
                short_hash(model),
            ]
        )
    return markdown_table(["model", "source", "class", "scoring", "parameters", "weights sha256"], rows)


def report_head(title: str, runs: list[dict[str, Any]]) -> list[str]:
    """The first lines of a report: the title (with the model's name when there is one model), the models' table."""
    return [title + (f": {runs[0]['name']}" if len(runs) == 1 else ""), "", models_table(runs), ""]


def lm_eval_markdown(runs: list[dict[str, Any]]) -> str:
    first = runs[0]
    settings = first.get("settings", {})
    lines = report_head("# lm-evaluation-harness results", runs) + [
        f"lm-eval {first.get('versions', {}).get('lm_eval', '?')}, num_fewshot = {settings.get('num_fewshot')}, "
        f"limit = {settings.get('limit')}, data = {settings.get('data')}"
        + (f" ({settings['data_dir']})" if settings.get("data_dir") else "")
        + ". Value ± standard error; chance = mean of 1/(number of choices); majority = always the most frequent "
        "gold answer, both on the scored documents.",
        "",
        lm_eval_table(runs),
    ]
    notes = lm_eval_caveats(runs)
    data_notes = sorted({f"{t}: {e['data']['note']}" for r in runs for t, e in r["tasks"].items() if e.get("data", {}).get("note")})
    if notes or data_notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes + data_notes]
    return "\n".join(lines)


def lm_eval_figure(runs: list[dict[str, Any]]):
    """Grouped bars: one group per task (acc_norm where the task has it, else acc), one bar per model, with
    standard errors; chance (dashed) and majority (dotted) marked per task."""
    plt = pyplot()
    tasks = first_seen(runs, "tasks")
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(tasks) * max(1, len(runs)) / 2 + 2), 3.8))
    width = 0.8 / max(1, len(runs))
    labels = []
    for t, task in enumerate(tasks):
        metrics = set()
        for run in runs:
            metrics |= set(run["tasks"].get(task, {}).get("metrics", {}))
        metric = "acc_norm" if "acc_norm" in metrics else "acc"
        labels.append(f"{task}\n({metric})")
        for i, run in enumerate(runs):
            entry = run["tasks"].get(task, {}).get("metrics", {}).get(metric, {})
            value, stderr = _num(entry.get("value")), _num(entry.get("stderr"))
            if value is None:
                continue
            ax.bar(t - 0.4 + width * (i + 0.5), value, width, yerr=stderr, capsize=3, color=f"C{i}", label=run["name"])
        base = _task_baselines(runs, task)
        if base:
            ax.hlines(base["chance"], t - 0.45, t + 0.45, colors="k", linestyles="--", linewidth=1, label="chance" if t == 0 else None)
            ax.hlines(base["majority"], t - 0.45, t + 0.45, colors="gray", linestyles=":", linewidth=1.5, label="majority" if t == 0 else None)
    ax.set_xticks(range(len(tasks)), labels)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8)
    ax.set_title("lm-eval (" + ", ".join(f"{r['name']}: {r.get('settings', {}).get('num_fewshot')}-shot" for r in runs) + ")")
    return fig


# --------------------------------------------------------------------------------------------------- Zorro


def zorro_columns(runs: list[dict[str, Any]]) -> list[tuple[int, str, str]]:
    return [(i, run["name"], method) for i, run in enumerate(runs) for method in run["settings"]["methods"]]


def zorro_table(runs: list[dict[str, Any]]) -> str:
    """paradigm | accuracy (%) per model and method; the last row is the mean over paradigms."""
    columns = zorro_columns(runs)
    paradigms = first_seen(runs, "paradigms")
    rows = []
    for paradigm in paradigms:
        row = [paradigm]
        for i, _, method in columns:
            entry = runs[i]["paradigms"].get(paradigm, {}).get(method)
            row.append(f"{100 * entry['accuracy']:.2f}" if entry else "–")
        rows.append(row)
    rows.append(["**mean**"] + [f"**{100 * runs[i]['mean'][method]:.2f}**" for i, _, method in columns])
    headers = ["paradigm"] + [f"{name} {method}" if len(runs) > 1 else method for _, name, method in columns]
    return markdown_table(headers, rows)


def zorro_pair_differences(runs: list[dict[str, Any]]) -> str | None:
    """A warning when the runs scored different numbers of pairs in a paradigm (accuracies on different item
    sets, e.g. one run with --limit), naming each run's counts; None when they agree."""
    counts = {run["name"]: run["settings"].get("pairs_per_paradigm", {}) for run in runs}
    paradigms = sorted({p for per_run in counts.values() for p in per_run})
    differing = [p for p in paradigms if len({per_run.get(p) for per_run in counts.values()}) > 1]
    if not differing:
        return None
    shown = "; ".join(
        f"{p}: " + ", ".join(f"{name} {'-' if per_run.get(p) is None else per_run[p]}" for name, per_run in counts.items())
        for p in differing[:5]
    )
    more = f" and {len(differing) - 5} more" if len(differing) > 5 else ""
    return (f"**Not comparable as they stand:** the models were scored on different numbers of pairs in "
            f"{len(differing)} paradigm(s) ({shown}{more}). Run the probes again with the same --limit.")


def zorro_markdown(runs: list[dict[str, Any]]) -> str:
    first = runs[0]
    settings = first["settings"]
    pairs = sorted(set(settings["pairs_per_paradigm"].values()))
    # the tie rule each run used (zorro.run_probe: "broken at random (...)" or "count as wrong")
    rules = list(dict.fromkeys(run["settings"].get("ties", "count as wrong") for run in runs))
    ties = f"ties {rules[0]}" if len(rules) == 1 else "ties by run: " + "; ".join(
        f"{run['name']} {run['settings'].get('ties', 'count as wrong')}" for run in runs)
    lines = report_head("# Zorro grammar probes", runs) + [
        f"Zorro `{settings['zorro_version']}` ({settings['zorro_dir']}), {len(settings['paradigms'])} paradigms, "
        f"{'/'.join(map(str, pairs))} pairs each. Accuracy in % (the grammatical sentence scored higher; {ties}; "
        "chance 50). holistic: minus mean token cross-entropy of the unmasked sentence (BabyBERTa); pll: "
        "pseudo-log-likelihood; loglik: sentence log-likelihood.",
        "",
        zorro_table(runs),
    ]
    return "\n".join(lines)


def zorro_figure(runs: list[dict[str, Any]]):
    """Horizontal grouped bars: per paradigm (and the mean), one bar per model and method; chance at 50%."""
    plt = pyplot()
    columns = zorro_columns(runs)
    paradigms = first_seen(runs, "paradigms")
    labels = paradigms + ["mean"]
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(labels) * max(1, len(columns)) ** 0.5 + 1.5))
    height = 0.8 / max(1, len(columns))
    for c, (i, name, method) in enumerate(columns):
        run = runs[i]
        values = [100 * run["paradigms"][p][method]["accuracy"] if p in run["paradigms"] else float("nan") for p in paradigms]
        values.append(100 * run["mean"][method])
        positions = [y - 0.4 + height * (c + 0.5) for y in range(len(labels))]
        ax.barh(positions, values, height, color=f"C{c}", label=f"{name} {method}" if len(runs) > 1 else method)
    ax.axvline(50, color="k", linestyle="--", linewidth=1, label="chance")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("accuracy (%)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("Zorro")
    return fig


# ---------------------------------------------------------------------------------------------- perplexity


def perplexity_table(runs: list[dict[str, Any]]) -> str:
    labels = first_seen(runs, "perplexity")
    rows = [[label] + [fmt_value(run["perplexity"].get(label), digits=2) for run in runs] for label in labels]
    return markdown_table(["evaluation set", *[run["name"] for run in runs]], rows)


_PATH = re.compile(r"(?<![^\s(\[])(?:~|\.{1,2})?/[^\s()\[\]]*")  # a path that starts a word


def short_label(label: str, width: int = 22) -> str:
    """A plot label: every file path shortened to its last part (the table keeps the full text), wrapped."""
    text = _PATH.sub(lambda m: Path(m.group(0).rstrip("/")).name or m.group(0), label)
    return "\n".join(textwrap.wrap(text, width, break_long_words=True)) or label


def perplexity_figure(runs: list[dict[str, Any]]):
    plt = pyplot()
    labels = first_seen(runs, "perplexity")
    fig, ax = plt.subplots(figsize=(max(4.0, 1.5 * len(labels) + 2), 3.5))
    width = 0.8 / max(1, len(runs))
    for i, run in enumerate(runs):
        values = [_num(run["perplexity"].get(label)) or float("nan") for label in labels]
        ax.bar([x - 0.4 + width * (i + 0.5) for x in range(len(labels))], values, width, color=f"C{i}", label=run["name"])
    ax.set_xticks(range(len(labels)), [short_label(label) for label in labels], fontsize=8)
    ax.set_ylabel("perplexity (lower is better)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("perplexity")
    return fig


# ------------------------------------------------------------------------------------------- the paper column


def paper_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """section | task / set / paradigm | metric | paper softmax | paper SSA | ours per model | chance | majority,
    from `compare.paper_rows`."""
    table = []
    for row in rows:
        figure = row["figure"]
        digits = 4 if figure["section"] == "lm_eval" else 2
        majority = row.get("majority")
        table.append(
            [figure["section"], figure["key"], figure["metric"], fmt_value(figure["softmax"], digits=digits),
             fmt_value(figure["ssa"], digits=digits)]
            + [fmt_value(row["ours"].get(name), digits=digits) for name in columns]
            + [fmt_value(row.get("chance"), digits=digits) if row.get("chance") is not None else "–",
               f"{fmt_value(majority[0])} ({majority[1]})" if majority else "–"]
        )
    headers = ["section", "task / set / paradigm", "metric", "paper softmax", "paper SSA", *columns, "chance", "majority"]
    return markdown_table(headers, table)
