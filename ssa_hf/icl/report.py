"""report.md and the PNG plots of an ICL experiment, written through `ssa_hf.reporting.OutputDir`."""

from __future__ import annotations

from pathlib import Path

from ..reporting import OutputDir, markdown_table, pyplot
from .stats import smallest_p
from .registry import get_task

_BACKBONES = {"llama": "SSALlama backbone: RoPE, RMSNorm, SwiGLU", "gpt2": "SSAGPT2 backbone: learned positions, LayerNorm, GELU"}
SETS = {"standard": "standard test set (x ~ N(0, sigma))", "balanced": "balanced test set (our addition)"}
METRICS = {"sequence_error": "sequence error", "individual_error": "individual error"}


def _scorings(config: dict) -> list[str]:
    """The scoring functions of a results.json config (written as `scoring` before it was `attention_scoring`)."""
    return config["attention_scoring"] if "attention_scoring" in config else config["scoring"]


def _pct(ci: dict) -> str:
    if ci["low"] is None:
        return f"{100 * ci['mean']:.1f}%"
    return f"{100 * ci['mean']:.1f}% [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]"


def _num(ci: dict) -> str:
    if ci["low"] is None:
        return f"{ci['mean']:.3g}"
    return f"{ci['mean']:.3g} [{ci['low']:.3g}, {ci['high']:.3g}]"


def _reference(scorings: list[str]) -> str:
    return "softmax" if "softmax" in scorings else scorings[0]


def _sweep_table(results, task: str, sweep: str, test_set: str, metric: str) -> str | None:
    summary, baselines = results.summary[task], results.baselines[task]
    scorings = [s for s in _scorings(results.config) if s in summary]
    if test_set not in summary[scorings[0]][sweep]:
        return None
    label = "sigma" if sweep == "sigma_sweep" else "points"
    values = summary[scorings[0]][sweep]["values"]
    headers = [label] + scorings + ["majority baseline"]
    rows = []
    for i, value in enumerate(values):
        cis = {s: summary[s][sweep][test_set][metric][i] for s in scorings}
        base = baselines["majority"][sweep][test_set][metric][i]["mean"]
        rows.append([value] + [_pct(cis[s]) for s in scorings] + [f"{100 * base:.1f}%"])
    return markdown_table(headers, rows)


def headline_table(results, task: str, sweep: str) -> str:
    """Sequence error on both test sets side by side (scoring functions, mean [t interval] over seeds; baseline)."""
    summary, baselines = results.summary[task], results.baselines[task]
    scorings = [s for s in _scorings(results.config) if s in summary]
    sets = [t for t in ("standard", "balanced") if t in summary[scorings[0]][sweep]]
    headers = ["sigma" if sweep == "sigma_sweep" else "points"]
    for test_set in sets:
        headers += [f"{s} ({test_set})" for s in scorings] + [f"baseline ({test_set})"]
    rows = []
    for i, value in enumerate(summary[scorings[0]][sweep]["values"]):
        row = [value]
        for test_set in sets:
            cis = {s: summary[s][sweep][test_set]["sequence_error"][i] for s in scorings}
            row += [_pct(cis[s]) for s in scorings]
            row.append(f"{100 * baselines['majority'][sweep][test_set]['sequence_error'][i]['mean']:.1f}%")
        rows.append(row)
    return markdown_table(headers, rows)


# --------------------------------------------------------------------------------------------------
# Paired comparisons, the primary endpoint and the verdict in words
# --------------------------------------------------------------------------------------------------


def _p(value: float) -> str:
    return f"{value:.2g}" if value >= 0.001 else f"{value:.1e}"


def _diff(cell: dict, metric: str) -> str:
    if metric == "mse":
        return f"{cell['mean_difference']:+.3g} [{cell['low']:+.3g}, {cell['high']:+.3g}]"
    return f"{100 * cell['mean_difference']:+.1f} [{100 * cell['low']:+.1f}, {100 * cell['high']:+.1f}]"


def _value(x: float, metric: str) -> str:
    return f"{x:.3g}" if metric == "mse" else f"{100 * x:.1f}%"


def _better(cell: dict) -> bool:
    """The side the signed-rank test sees: a's errors below b's (negative differences carry more rank)."""
    return cell["w_minus"] > cell["w_plus"]


def _where(cell: dict) -> str:
    if cell["sweep"] == "grid":
        return f"sigma_x {cell['sigma_x']:g}, sigma_ab {cell['sigma_ab']:g}"
    return f"sigma {cell['value']:g}" if cell["sweep"] == "sigma_sweep" else f"{cell['value']:g} points"


def paired_table(entry: dict, alpha: float = 0.05) -> str:
    """One comparison a - b, cell by cell (descriptive: nominal p, no correction, no verdict): means, paired
    difference with its bootstrap interval, tests."""
    a, b = entry["a"], entry["b"]
    headers = ["test set", "cell", a, b, f"{a} - {b} [95% paired bootstrap]", f"seeds {a} lower / higher / tied",
               "Wilcoxon p (nominal)", "sign p (nominal)"]
    rows = []
    for cell in entry["cells"]:
        metric = cell["metric"]
        rows.append([cell.get("test_set", "-"), _where(cell), _value(cell["mean_a"], metric), _value(cell["mean_b"], metric),
                     _diff(cell, metric), f"{cell['lower']} / {cell['higher']} / {cell['ties']}",
                     _p(cell["wilcoxon_p"]), _p(cell["sign_p"])])
    return markdown_table(headers, rows)


def _t_interval(result: dict, metric: str) -> str:
    scale = 1 if metric == "mse" else 100
    if result.get("t_low") is None:
        return "[-]"
    return f"[{scale * result['t_low']:+.3g}, {scale * result['t_high']:+.3g}]" if metric == "mse" else \
        f"[{scale * result['t_low']:+.1f}, {scale * result['t_high']:+.1f}]"


def _endpoint_line(result: dict, treatment: str, control: str, metric: str, test: str = "wilcoxon") -> str:
    mean = result["mean_difference"] * (1 if metric == "mse" else 100)
    unit = "" if metric == "mse" else " percentage points"
    return (f"{treatment} {_value(result['mean_a'], metric)}, {control} {_value(result['mean_b'], metric)}; difference "
            f"{mean:+.3g}{unit}, 95% paired t interval {_t_interval(result, metric)} (paired bootstrap "
            f"{_diff(result, metric).split(' ', 1)[1]}), Wilcoxon signed-rank p = {_p(result['wilcoxon_p'])}, sign test "
            f"p = {_p(result['sign_p'])}; {treatment} lower in {result['lower']} of {result['seeds']} seeds, higher in "
            f"{result['higher']}, tied in {result['ties']}")


def _reading_of(result: dict, treatment: str, control: str, metric: str) -> str:
    """The verdict rule's words: a direction only when the declared test rejects AND the t interval agrees."""
    alpha, what = result["alpha"], metric.replace("_", " ")
    if result["direction"] == "lower":
        text = f"{treatment} has the lower (better) {what} (p < {alpha:g} and the t interval below 0)"
    elif result["direction"] == "higher":
        text = f"{treatment} is worse than {control}: its {what} is higher (p < {alpha:g} and the t interval above 0)"
    else:
        text = f"no difference shown at alpha = {alpha:g} (the test and the t interval do not both exclude 0)"
        if result["smallest_possible_p"] >= alpha:
            text += f"; with {result['seeds']} seeds no exact test can reach p < {alpha:g} at all"
    return text


def primary_section(paired: dict) -> list[str]:
    """The declared primary endpoint and what it shows, in words: a verdict only on seeds not seen before the
    endpoint was chosen."""
    primary = paired.get("primary")
    if not primary or "skipped" in primary:
        reason = primary["skipped"] if primary else "no primary endpoint was declared"
        return [f"Not evaluated: {reason}. Every comparison below is exploratory."]
    declared = primary["declared"]
    t, c, metric, alpha = declared["treatment"], declared["control"], declared["metric"], primary["alpha"]
    reading = _reading_of(primary, t, c, metric)
    lines = [f"Declared in the preset (`stats.primary`): {primary['description']}, paired by seed ({primary['seeds']} seeds), "
             f"tested with the {'Wilcoxon signed-rank' if primary['test'] == 'wilcoxon' else 'sign'} test at alpha = "
             f"{alpha:g}; a direction is read only when the test rejects and the 95% paired t interval lies on the same "
             "side of 0.", "", f"Result: {_endpoint_line(primary, t, c, metric)}.", ""]
    if primary.get("exploratory"):
        lines += [f"**Exploratory, not confirmatory:** this endpoint was chosen after some of these seeds had been seen "
                  f"(`stats.seen_seeds`), so its test here is exploratory whatever its p (nominal reading: {reading}). "
                  "Fresh seeds decide: `ssa-hf reproduce --scale cpu` tests it on seeds 10-29 (docs/results.md)."]
    else:
        lines += [f"Verdict on the primary endpoint: **{reading}**."]
    return lines


def secondary_section(paired: dict) -> list[str]:
    """The declared secondary endpoints: exploratory, nominal p, no verdict."""
    lines = []
    for result in paired.get("secondary") or []:
        if "skipped" in result:
            lines.append(f"- {result['description']}: not evaluated ({result['skipped']}).")
            continue
        declared = result["declared"]
        lines.append(f"- {result['description']}: {_endpoint_line(result, declared['treatment'], declared['control'], declared['metric'])}.")
    return lines


def _group_cells(cells: list[dict]) -> str:
    groups: dict = {}
    for cell in cells:
        groups.setdefault((cell["sweep"], cell.get("test_set")), []).append(cell)
    parts = []
    for (sweep, test_set), members in groups.items():
        where = ", ".join(_where(c) for c in members)
        ps = ", ".join(_p(c["wilcoxon_p"]) for c in members)
        parts.append(f"{'the ' + test_set + ' set at ' if test_set else ''}{where} (p = {ps})")
    return "; ".join(parts)


def verdict_lines(paired: dict, alpha: float = 0.05) -> list[str]:
    """Every comparison in plain words, per cell (descriptive): where a is lower, where it is higher, at nominal
    p < alpha."""
    lines = []
    for task, comparisons in paired.get("tasks", {}).items():
        for entry in comparisons:
            a, b = entry["a"], entry["b"]
            nominal = [c for c in entry["cells"] if c["wilcoxon_p"] < alpha]
            better = [c for c in nominal if _better(c)]
            worse = [c for c in nominal if not _better(c)]
            text = f"- `{task}`, {a} vs {b} ({len(entry['seeds'])} seeds): "
            if not nominal:
                text += f"no cell differs at nominal p < {alpha:g}."
            else:
                if better:
                    text += f"{a} lower than {b} on {_group_cells(better)}. "
                if worse:
                    text += f"**{a} higher (worse) than {b}** on {_group_cells(worse)}. "
            lines.append(text.strip())
    return lines


def _runs_table(results, task: str) -> str:
    rows = []
    for r in results.runs:
        if r["task"] != task:
            continue
        train = r["train"]
        row = [r["name"], train["steps"], f"{train['final_loss']:.4f}" if train["final_loss"] is not None else "-",
               f"{1000 * (train['seconds_per_step'] or 0):.0f}", f"{train['train_seconds']:.0f}"]
        if r.get("check"):
            c = r["check"]
            row += [f"{100 * c['individual_error']:.2f}%",
                    "-" if c["balanced_sequence_error"] is None else f"{100 * c['balanced_sequence_error']:.1f}%",
                    "yes" if c["passed"] else "**no**"]
        rows.append(row)
    headers = ["run", "steps", "final loss", "ms/step", "train s"]
    if get_task(task).is_quantifier:
        headers += ["individual error (sigma 1)", "balanced sequence error (sigma 1)", "learned the rule"]
    return markdown_table(headers, rows)


def _probe_table(results, task: str) -> str | None:
    summary = results.summary[task]
    scorings = [s for s in _scorings(results.config) if "probe" in summary.get(s, {})]
    if not scorings:
        return None
    first = summary[scorings[0]]["probe"]
    layers = len(first["large_token_weight"])
    points = len(first["correct_per_position"])
    headers = ["scoring"] + [f"correct at {i + 1}" for i in range(points)] + [
        f"layer {layer} weight of x{points} on itself" for layer in range(layers)
    ]
    rows = []
    for s in scorings:
        p = summary[s]["probe"]
        rows.append([s] + [f"{100 * c:.0f}%" for c in p["correct_per_position"]] + [_num(ci) for ci in p["large_token_weight"]])
    return markdown_table(headers, rows)


def _linear_tables(results, task: str) -> list[str]:
    summary, baselines = results.summary[task], results.baselines[task]
    scorings = [s for s in _scorings(results.config) if s in summary]
    parts = []
    grid = summary[scorings[0]]["grid"]
    headers = ["sigma_x \\ sigma_ab"] + [f"{v:g}" for v in grid["sigmas_ab"]]
    for name in scorings:
        mse = summary[name]["grid"]["mse"]
        rows = [[f"{sx:g}"] + [_num(c) for c in row] for sx, row in zip(grid["sigmas_x"], mse)]
        parts.append(f"MSE, {name} (mean [95% interval] over seeds):\n\n" + markdown_table(headers, rows))
    for name, base in baselines.items():
        rows = [[f"{sx:g}"] + [f"{c['mean']:.3g}" for c in row] for sx, row in zip(grid["sigmas_x"], base["grid"]["mse"])]
        parts.append(f"MSE, baseline `{name}`:\n\n" + markdown_table(headers, rows))
    return parts


def _timing(results) -> str:
    env = results.environment
    text = f"Total time {results.seconds / 60:.1f} min"
    if env.get("cpu_seconds") is not None:
        text += f" ({env['cpu_seconds'] / 60:.1f} CPU-minutes)"
    text += f" on {env['cpu_count']} CPUs{', ' + env['cuda'] if env['cuda'] else ''}"
    loads = [v for v in env.get("load_average") or [] if v is not None]
    if loads:
        text += f", 1-minute load average {' -> '.join(f'{v:.1f}' for v in loads)} (before -> after)"
    return text + "; runs reused from an earlier call are not timed again."


def report_markdown(results) -> str:
    config = results.config
    model, train, ev = config["model"], config["train"], config["eval"]
    cur = train["curriculum"]
    lines = [
        f"# In-context learning under distribution shift: {', '.join(_scorings(config))} (preset `{config['name']}`)",
        "",
        f"Model: {model['layers']} layers, {model['heads']} heads, width {model['width']}"
        f"{', attention only' if model['attention_only'] else ''} ({_BACKBONES.get(model.get('backbone', 'llama'), model.get('backbone'))}). Training: {train['steps']} steps, "
        f"batch {train['batch_size']}, Adam lr {train['lr']:g}, warm-up {train['warmup_steps']}, x ~ N(0, {train['sigma']:g}), "
        f"curriculum {cur['start']} -> {cur['end']} points (+{cur['increment']} every {cur['interval']} steps). "
        f"Seeds {config['seeds']}. Evaluation: {ev['batches']} x {ev['batch_size']} prompts per cell, the same prompts for "
        f"every model; sequence error counts predictions from position {ev['from_position']} on. Per-arm intervals: 95% "
        f"Student-t over seeds, clipped to [0, 100%] (descriptive only). Comparisons are paired by seed (the same seed "
        f"gives both arms the same initial weights, training prompts and test prompts): per-seed differences, a 95% paired "
        f"Student-t interval of their mean (and the paired bootstrap, which covers too little at 10 seeds), exact "
        f"Wilcoxon signed-rank and sign tests. "
        + _timing(results),
        "",
        "The majority baseline always answers the most frequent label of each position (a constant answer per "
        "position, read off the test prompts' own labels). The balanced test set is our addition to the paper's protocol: "
        "the first counterexample sits at a uniformly random position or nowhere, so it separates a model that learned "
        "the rule from one that learned to answer the common label.",
    ]
    lines += _temperature_note(results)
    paired = getattr(results, "paired", None) or {}
    alpha = (paired.get("primary") or {}).get("alpha", 0.05)  # a skipped primary: the default level
    lines += ["", "## Primary endpoint", ""] + primary_section(paired)
    secondary = secondary_section(paired)
    if secondary:
        lines += ["", "## Secondary endpoints (declared, exploratory: nominal p, no verdict)", ""] + secondary
    verdicts = verdict_lines(paired, alpha)
    if verdicts:
        lines += ["", "## Per-cell comparisons (descriptive)", "",
                  f"Every cell of every sweep, paired by seed; a cell is named where the Wilcoxon signed-rank p < {alpha:g} "
                  "(nominal: with tens of cells some are expected by chance; no cell decides anything). Lower error is "
                  "better.", ""] + verdicts
    for task in config["tasks"]:
        lines += ["", f"## Task `{task}`", "", "### Runs", "", _runs_table(results, task)]
        if get_task(task).is_quantifier:
            failed = [r["name"] for r in results.runs if r["task"] == task and r.get("check") and not r["check"]["passed"]]
            ev_ = results.config["eval"]
            lines += ["", (f"In-distribution check (individual error <= {100 * ev_['max_individual_error']:g}% on the standard "
                           f"set, balanced sequence error <= {100 * ev_['max_balanced_sequence_error']:g}%, at sigma 1): "
                           + ("every run passed." if not failed else f"**failed: {', '.join(failed)}**"))]
            first = results.summary[task][_scorings(config)[0]]
            lines += ["", f"### Summary: sequence error (any wrong prediction from position {ev['from_position']} on), "
                      f"mean [95% interval] over seeds", "",
                      f"By sigma of x at {first['sigma_sweep']['length']} points:", "",
                      headline_table(results, task, "sigma_sweep"), "",
                      f"By prompt length at sigma {first['length_sweep']['sigma']:g}:", "",
                      headline_table(results, task, "length_sweep")]
            lines += _paired_section(results, task, alpha)
            for sweep, title in (("sigma_sweep", "Error by sigma"), ("length_sweep", "Error by prompt length")):
                first = results.summary[task][_scorings(config)[0]][sweep]
                where = f"at {first['length']} points" if sweep == "sigma_sweep" else f"at sigma {first['sigma']:g}"
                for test_set in ("standard", "balanced"):
                    for metric in ("sequence_error", "individual_error"):
                        table = _sweep_table(results, task, sweep, test_set, metric)
                        if table:
                            lines += ["", f"### {title}: {METRICS[metric]}, {SETS[test_set]}, {where}", "", table]
            table = _probe_table(results, task)
            if table:
                lines += ["", "### Single-large-value probe [1, -1, -2, 1000]", "",
                          "Share of seeds whose prediction is correct at each position, and the attention weight the last "
                          "query (x4 = 1000) puts on itself, mean over heads, mean [95% interval] over seeds.", "", table]
        else:
            grid = results.summary[task][_scorings(config)[0]]["grid"]
            protocol = ("the authors' protocol: " + f"{ev['linear_functions']} functions applied to the same "
                        f"{ev['batch_size']} x-sequences per cell" if ev.get("linear_protocol") == "paper"
                        else "one function per prompt")
            lines += ["", f"Test prompts: {grid['length']} points, {protocol}; MSE over positions >= {ev['from_position']}."]
            lines += [""] + [p + "\n" for p in _linear_tables(results, task)]
            lines += _paired_section(results, task, alpha)
    plots = results.files.get("plots", [])
    if plots:
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# The docs' figures of a run (docs/icl.md, README.md), rendered from its results.json by scripts/render_docs.py
# --------------------------------------------------------------------------------------------------


def docs_blocks(results) -> dict[str, str]:
    """Block name -> text for the docs quoting one run (the README's main job): how the runs learned, the primary
    endpoint's line and its reading, the secondary endpoints, and the per-cell, sweep and probe tables of the first
    task."""
    task = results.config["tasks"][0]
    checked = [r["check"] for r in results.runs if r["task"] == task and r.get("check")]
    paired = getattr(results, "paired", None) or {}
    primary = paired.get("primary") or {}
    first = results.summary[task][_scorings(results.config)[0]]
    blocks = {}
    if checked:
        failed = [r["name"] for r in results.runs if r.get("check") and not r["check"]["passed"]]
        balanced = [c["balanced_sequence_error"] for c in checked if c["balanced_sequence_error"] is not None]
        blocks["icl-quick-runs"] = (
            (f"All {len(checked)} runs learned the rule in distribution" if not failed else
             f"{len(checked) - len(failed)} of {len(checked)} runs learned the rule in distribution (not: "
             f"{', '.join(failed)})")
            + f": individual error {100 * min(c['individual_error'] for c in checked):.2f}-"
            f"{100 * max(c['individual_error'] for c in checked):.2f}% (standard set)"
            + (f", balanced sequence error {100 * min(balanced):.1f}-{100 * max(balanced):.1f}%" if balanced else "")
            + f" at sigma 1, {first['sigma_sweep']['length']} points.")
    if primary and "skipped" not in primary:
        declared = primary["declared"]
        blocks["icl-quick-primary"] = _endpoint_line(primary, declared["treatment"], declared["control"],
                                                     declared["metric"]) + "."
        blocks["icl-quick-reading"] = primary_section(paired)[-1]  # exploratory (seen seeds) or the verdict
    blocks["icl-quick-secondary"] = "\n".join(secondary_section(paired))
    entries = paired.get("tasks", {}).get(task, [])
    chosen = next((e for e in entries if (e["a"], e["b"]) == ("ssa", "softmax")), entries[0] if entries else None)
    tables = [paired_table(chosen)] if chosen else []
    tables += [f"Sequence error, mean [95% Student-t interval] over {len(results.config['seeds'])} seeds "
               f"(descriptive), {results.config['eval']['batches'] * results.config['eval']['batch_size']} prompts "
               f"per cell, by sigma of x at {first['sigma_sweep']['length']} points:",
               headline_table(results, task, "sigma_sweep"),
               f"By prompt length at sigma {first['length_sweep']['sigma']:g}:",
               headline_table(results, task, "length_sweep")]
    probe = _probe_table(results, task)
    if probe:
        tables += ["The probe [1, -1, -2, 1000]: share of seeds correct at each position, and the weight the last "
                   "query (x4 = 1000) puts on itself, mean over heads, mean [95% interval] over seeds:", probe]
    blocks["icl-quick-tables"] = "\n\n".join(tables)
    return blocks


def _paired_section(results, task: str, alpha: float) -> list[str]:
    comparisons = (getattr(results, "paired", None) or {}).get("tasks", {}).get(task, [])
    lines = []
    for entry in comparisons:
        lines += ["", f"### Paired by seed, per cell (descriptive): {entry['a']} - {entry['b']} (seeds {entry['seeds']})", "",
                  ("Sequence-error difference in percentage points" if get_task(task).is_quantifier else "MSE difference")
                  + "; negative: " + entry["a"] + " lower (better).", "", paired_table(entry, alpha)]
    return lines


def _temperature_note(results) -> list[str]:
    """State the temperature of a `temperature` arm, and whether it matches SSA's initial slope 1 / (n0 b0)."""
    runs = [r for r in results.runs if r["scoring"] == "temperature"]
    if not runs:
        return []
    values = runs[0]["train"].get("scoring_parameters") or {}
    t = next((v["t"][0] for v in values.values() if isinstance(v, dict) and v.get("t")), None)
    options = results.config["model"].get("scoring_options") or {}
    b0, n0 = options.get("ssa_b_init", 1.0), options.get("ssa_n_init", 1.5)
    note = (f"The `temperature` arm is softmax(s / t) with t fixed at {t:.4g}" if t is not None else "The `temperature` arm is softmax(s / t)")
    matched = 1 / (n0 * b0)
    note += (f"; SSA starts from b0 = {b0:g}, n0 = {n0:g}, where it behaves like softmax at temperature 1 / (n0 b0) = "
             f"{matched:.4g} for small scores")
    if t is not None and abs(t - matched) <= 1e-4 * matched:
        note += ", so this arm is the temperature-matched softmax control."
    else:
        note += ": this arm is **not** temperature-matched to SSA."
    return ["", note]


def write_report(results, out: OutputDir) -> Path:
    return out.write_markdown("report.md", report_markdown(results))


# --------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------


def _band(ax, xs, cis, label, color, seeds=None):
    means = [c["mean"] for c in cis]
    ax.plot(xs, means, marker="o", ms=3, label=label, color=color)
    if cis and cis[0]["low"] is not None:
        ax.fill_between(xs, [c["low"] for c in cis], [c["high"] for c in cis], color=color, alpha=0.2)
    if seeds:
        for s in range(len(cis[0]["values"])):
            ax.plot(xs, [c["values"][s] for c in cis], color=color, lw=0.6, alpha=0.35)


def _sweep_plot(results, task, sweep, plt):
    summary, baselines = results.summary[task], results.baselines[task]
    scorings = [s for s in _scorings(results.config) if s in summary]
    sets = [t for t in ("standard", "balanced") if t in summary[scorings[0]][sweep]]
    fig, axes = plt.subplots(1, len(sets), figsize=(5.2 * len(sets), 3.8), squeeze=False)
    xs = summary[scorings[0]][sweep]["values"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, test_set in zip(axes[0], sets):
        for k, s in enumerate(scorings):
            _band(ax, xs, summary[s][sweep][test_set]["sequence_error"], s, colors[k % len(colors)], seeds=True)
        base = baselines["majority"][sweep][test_set]["sequence_error"]
        ax.plot(xs, [c["mean"] for c in base], "k--", lw=1, label="majority baseline")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("sigma of x" if sweep == "sigma_sweep" else "points in the prompt")
        ax.set_ylabel("sequence error")
        where = (f"{summary[scorings[0]][sweep]['length']} points" if sweep == "sigma_sweep"
                 else f"sigma {summary[scorings[0]][sweep]['sigma']:g}")
        ax.set_title(f"{task}: {test_set} set, {where}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("mean over seeds, 95% interval band, thin lines: single seeds", fontsize=9)
    return fig


def _position_plot(results, task, plt):
    summary, baselines = results.summary[task], results.baselines[task]
    scorings = [s for s in _scorings(results.config) if s in summary]
    sweep = summary[scorings[0]]["sigma_sweep"]
    sigmas = sweep["values"]
    panels = [("standard", 0)]
    if len(sigmas) > 1:
        panels.append(("standard", len(sigmas) - 1))
    if "balanced" in sweep:
        panels.append(("balanced", 0))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False, layout="constrained")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (test_set, i) in zip(axes[0], panels):
        for k, s in enumerate(scorings):
            cis = summary[s]["sigma_sweep"][test_set]["per_position"][i]
            _band(ax, list(range(1, len(cis) + 1)), cis, s, colors[k % len(colors)])
        base = baselines["majority"]["sigma_sweep"][test_set]["per_position"][i]
        ax.plot(range(1, len(base) + 1), [c["mean"] for c in base], "k--", lw=1, label="majority baseline")
        ax.set_xlabel("position (i-th prediction in the prompt)")
        ax.set_ylabel("individual error at the position\n(share of prompts wrong)")
        ax.set_title(f"{task}: {test_set} set, sigma {sigmas[i]:g}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def _probe_plot(results, task, plt):
    runs = {}
    for r in results.runs:
        if r["task"] == task and r.get("probe") and r["scoring"] not in runs:
            runs[r["scoring"]] = r
    if not runs:
        return None
    names = list(runs)
    layers = len(runs[names[0]]["probe"]["attention"])
    fig, axes = plt.subplots(len(names), layers, figsize=(3.4 * layers, 3.7 * len(names)), squeeze=False,
                             layout="constrained")
    for row, name in enumerate(names):
        p = runs[name]["probe"]
        for layer in range(layers):
            ax = axes[row][layer]
            heads = p["attention"][layer]
            mean = [[sum(h[q][k] for h in heads) / len(heads) for k in range(len(heads[0][q]))] for q in range(len(heads[0]))]
            image = ax.imshow(mean, vmin=0, vmax=1, cmap="viridis")
            ticks = range(len(p["tokens"]))
            ax.set_xticks(ticks, p["tokens"], rotation=90, fontsize=6)
            ax.set_yticks(ticks, p["tokens"], fontsize=6)
            ax.set_xlabel("key (attended to)", fontsize=7)
            ax.set_ylabel("query", fontsize=7)
            verdict = "".join("+" if c else "x" for c in p["correct"])
            ax.set_title(f"{name} seed {runs[name]['seed']}, layer {layer}\ncorrect by position: {verdict}", fontsize=8)
    fig.colorbar(image, ax=axes.ravel().tolist(), label="attention weight (mean over heads)", shrink=0.6)
    fig.suptitle(f"{task}: attention (mean over heads) on the probe [1, -1, -2, 1000]", fontsize=9)
    return fig


def _heatmap_plot(results, task, plt):
    import math

    summary, baselines = results.summary[task], results.baselines[task]
    scorings = [s for s in _scorings(results.config) if s in summary]
    panels = [(s, summary[s]["grid"]["mse"]) for s in scorings] + [(f"baseline: {b}", v["grid"]["mse"]) for b, v in baselines.items()]
    grid = summary[scorings[0]]["grid"]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    logs = [[[math.log10(max(c["mean"], 1e-12)) for c in row] for row in m] for _, m in panels]
    vmin = min(v for m in logs for row in m for v in row)
    vmax = max(v for m in logs for row in m for v in row)
    for ax, (name, _), log in zip(axes[0], panels, logs):
        image = ax.imshow(log, origin="lower", vmin=vmin, vmax=vmax, cmap="magma")
        ax.set_xticks(range(len(grid["sigmas_ab"])), [f"{v:g}" for v in grid["sigmas_ab"]], fontsize=7)
        ax.set_yticks(range(len(grid["sigmas_x"])), [f"{v:g}" for v in grid["sigmas_x"]], fontsize=7)
        ax.set_xlabel("sigma of a, b")
        ax.set_ylabel("sigma of x")
        ax.set_title(name, fontsize=9)
    fig.colorbar(image, ax=list(axes[0]), label="log10 MSE (mean over seeds)")
    fig.suptitle(f"{task}: MSE from position {results.config['eval']['from_position']} on, {grid['length']} points", fontsize=9)
    return fig


def write_plots(results, out: OutputDir) -> list[Path]:
    plt = pyplot()
    written = []
    for task in results.config["tasks"]:
        if get_task(task).is_quantifier:
            figures = [
                (f"{task}_error_vs_sigma.png", _sweep_plot(results, task, "sigma_sweep", plt)),
                (f"{task}_error_vs_length.png", _sweep_plot(results, task, "length_sweep", plt)),
                (f"{task}_error_per_position.png", _position_plot(results, task, plt)),
                (f"{task}_attention_probe.png", _probe_plot(results, task, plt)),
            ]
        else:
            figures = [(f"{task}_mse_heatmap.png", _heatmap_plot(results, task, plt))]
        for name, figure in figures:
            if figure is not None:
                written.append(out.save_figure(name, figure))
    return written
