"""One report from the evaluation, probe and perplexity results of several models (e.g. an SSA model and its
softmax twin): tables side by side and plots.

Each RESULT is a JSON file or a folder of them. Recognised files:
- `eval.json` of `ssa-hf eval` (kind "lm_eval"), and its multi-model `eval_comparison.json`;
- lm-eval's own results file (`lm_eval ... --output_path`, with "results" and "lm_eval_version"): metrics,
  versions and shots, without baselines (lm-eval does not record the labels);
- `probe.json` of `ssa-hf probe` (kind "zorro");
- `perplexity.json` of `ssa-hf perplexity` (a list of {"model", "data", "perplexity", ...}: one row per data
  set), or any JSON with numeric fields named `perplexity`/`ppl` (e.g. {"name": ..., "wikitext": {"perplexity":
  22.1}}): each such field becomes one row, labelled by its path.
Results are grouped into columns by model name (the file's `name`, else the folder name; `names` overrides one
name per RESULT argument, an empty entry keeps the file's).
"""

from __future__ import annotations

import json
import math
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..regular_files import read_json
from ..reporting import OutputDir
from .config import CompareConfig
from .checkpoint import default_name
from .harness import parse_metrics

log = logging.getLogger(__name__)

_PPL_KEY = re.compile(r"(^|_)(perplexity|ppl)($|_)", re.IGNORECASE)
_SKIP_SUBTREES = {"config", "settings", "model", "versions", "files", "args", "training", "hyperparameters"}


@dataclass
class CompareResults:
    title: str
    lm_eval: list[dict[str, Any]]
    zorro: list[dict[str, Any]]
    perplexity: list[dict[str, Any]]
    sources: list[str]
    markdown: str = ""
    files: dict[str, str] = field(default_factory=dict)
    kind: str = "comparison"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- loading


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def extract_perplexities(obj: Any, path: tuple[str, ...] = ()) -> dict[str, float]:
    """Every numeric field named perplexity/ppl (or ending/starting so, e.g. `wikitext_ppl`) -> its value, keyed
    by its path (config-like subtrees are skipped)."""
    found: dict[str, float] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            key = str(key)
            if key.lower() in _SKIP_SUBTREES:
                continue
            if _PPL_KEY.search(key) and isinstance(value, str) and _is_number_text(value):
                raise ValueError(f"field {'/'.join(path + (key,))!r} holds the number {value!r} as text; a perplexity "
                                 "is a JSON number: regenerate the file or fix it")
            if _PPL_KEY.search(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
                if "stderr" in key.lower() or "std" == key.lower().rsplit("_", 1)[-1]:
                    continue
                label_parts = list(path)
                if key.lower() not in ("perplexity", "ppl"):
                    label_parts.append(key)
                found["/".join(label_parts) or "perplexity"] = float(value)
            elif isinstance(value, (dict, list)):
                found.update(extract_perplexities(value, path + (key,)))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            label = None
            if isinstance(value, dict):
                label = next((value[k] for k in ("data", "dataset", "name") if isinstance(value.get(k), str)), None)
            found.update(extract_perplexities(value, path + (str(label or i),)))
    return found


def _from_lm_eval_output(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """lm-eval's own results file -> the shape of an `ssa-hf eval` result (no baselines)."""
    config = data.get("config", {})
    model_args = config.get("model_args") or {}
    if isinstance(model_args, str):
        model_args = dict(part.split("=", 1) for part in model_args.split(",") if "=" in part)
    source = model_args.get("pretrained") or config.get("model") or path.parent.name
    tasks = {}
    for task, results in data.get("results", {}).items():
        n = data.get("n-samples", {}).get(task, {})
        tasks[task] = {
            "metrics": parse_metrics(results),
            "version": data.get("versions", {}).get(task),
            "num_fewshot": data.get("n-shot", {}).get(task),
            "n": n.get("effective"),
            "n_total": n.get("original"),
            "baselines": None,
            "data": {"dataset_path": data.get("configs", {}).get(task, {}).get("dataset_path")},
        }
    shots = sorted({t["num_fewshot"] for t in tasks.values() if t["num_fewshot"] is not None})
    return {
        "kind": "lm_eval",
        "name": default_name(str(source)),
        "model": {"source": str(source), "checkpoint_hash": {"sha256": None, "reason": "lm-eval output"}},
        "settings": {"num_fewshot": shots[0] if len(shots) == 1 else shots, "limit": config.get("limit"), "data": "lm-eval output"},
        "versions": {"lm_eval": data.get("lm_eval_version")},
        "tasks": tasks,
    }


# the fields the report reads from each kind of result, as dotted paths -> type
_REQUIRED_FIELDS = {
    "lm_eval": {"tasks": dict},
    "zorro": {
        "settings": dict, "settings.methods": list, "settings.pairs_per_paradigm": dict, "settings.paradigms": list,
        "settings.zorro_version": str, "settings.zorro_dir": str, "paradigms": dict, "mean": dict,
    },
}


def _field(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            raise KeyError(dotted)
        data = data[part]
    return data


def check_result(kind: str, data: dict[str, Any], path: Path) -> None:
    """A ValueError naming the file and the field when a result lacks what the report reads."""

    def fail(what: str) -> None:
        raise ValueError(f"result {path}: {kind} result {what}; regenerate the file (ssa-hf eval / probe) or fix it")

    for dotted, kind_type in _REQUIRED_FIELDS[kind].items():
        try:
            value = _field(data, dotted)
        except KeyError:
            fail(f"has no field {dotted!r}")
        if not isinstance(value, kind_type):
            fail(f"field {dotted!r} is {type(value).__name__}, expected {kind_type.__name__}")
    if kind == "lm_eval":
        for task, entry in data["tasks"].items():
            if not isinstance(entry, dict) or not isinstance(entry.get("metrics"), dict):
                fail(f"task {task!r} has no 'metrics' mapping")
            for metric, value in entry["metrics"].items():
                if not isinstance(value, dict) or "value" not in value:
                    fail(f"metric {task}/{metric} has no 'value'")
        return
    for method in data["settings"]["methods"]:
        if not isinstance(data["mean"].get(method), (int, float)):
            fail(f"has no numeric mean for method {method!r}")
        for paradigm, entry in data["paradigms"].items():
            if not isinstance(entry, dict) or not isinstance((entry.get(method) or {}).get("accuracy"), (int, float)):
                fail(f"paradigm {paradigm!r} has no accuracy for method {method!r}")


def classify(data: Any, path: Path) -> list[tuple[str, dict[str, Any]]]:
    """[(kind, result)] found in one JSON document (kind: lm_eval, zorro or perplexity); a result of a known kind
    that lacks a field the report reads, or holds a figure no evaluation can produce, raises a ValueError naming
    the file and the field."""
    found = _classify(data, path)
    for kind, result in found:
        if kind in _REQUIRED_FIELDS:
            check_result(kind, result, path)
        check_figures(kind, result, path)
    return found


# metrics bounded to [0, 1] (lm-eval's accuracies; Zorro's accuracy per paradigm and method)
_PROPORTIONS = ("acc", "acc_norm", "exact_match", "f1", "mcc")


def check_figures(kind: str, result: dict[str, Any], path: Path) -> None:
    """A ValueError for a figure that cannot be: a perplexity below 1 or NaN (exp of a mean NLL >= 0; +inf is
    possible, an overflow), an accuracy outside [0, 1]. A hand-edited or corrupt file is refused, not tabulated."""

    def fail(what: str, value: Any) -> None:
        raise ValueError(f"result {path}: {what} is {value!r}, which no evaluation produces; regenerate the file or fix it")

    def number(what: str, value: Any, optional: bool = False) -> float | None:
        # evaluations write figures as JSON numbers: a string ("1.5"), a bool or a list is refused, not read
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(f"{what} (not a number)", value)
        return float(value)

    if kind == "perplexity":
        for label, value in result["perplexity"].items():
            if math.isnan(value) or value < 1:
                fail(f"perplexity {label!r} (perplexity = exp(mean NLL) >= 1)", value)
    elif kind == "lm_eval":
        for task, entry in result["tasks"].items():
            for metric, figure in entry["metrics"].items():
                value = number(f"{task}/{metric}", figure.get("value"), optional=True)
                number(f"{task}/{metric} stderr", figure.get("stderr"), optional=True)
                if metric.split(",")[0] in _PROPORTIONS and value is not None and not 0 <= value <= 1:
                    fail(f"{task}/{metric}", value)
    elif kind == "zorro":
        for paradigm, entry in result["paradigms"].items():
            for method, figure in entry.items():
                if not isinstance(figure, dict):
                    fail(f"zorro result {paradigm}/{method} (not a mapping)", figure)
                value = number(f"zorro accuracy {paradigm}/{method}", figure.get("accuracy"))
                if not 0 <= value <= 1:
                    fail(f"zorro accuracy {paradigm}/{method}", value)
        for method, value in result["mean"].items():
            if not 0 <= number(f"zorro mean accuracy {method}", value) <= 1:
                fail(f"zorro mean accuracy {method}", value)


def check_weight_problems(found: dict[str, list[dict[str, Any]]], allow_mismatch: bool = False,
                          allow_nonfinite: bool = False) -> list[str]:
    """Results of a model evaluated although its weights were not what its folder said (the evaluation's
    --allow-weight-mismatch / --allow-nonfinite-weights, recorded as `model.weight_problems`) are refused unless
    the same option is given here; then each is noted in the report. Returns the notes."""
    notes = []
    for kind, runs in found.items():
        for run in runs:
            problems = (run.get("model") if isinstance(run.get("model"), dict) else {}).get("weight_problems") or {}
            if not problems:
                continue
            nonfinite = {k: v for k, v in problems.items() if k == "nonfinite"}
            mismatch = {k: v for k, v in problems.items() if k != "nonfinite"}
            detail = "; ".join(f"{what} {', '.join(map(str, keys[:3]))}" + (f" (+{len(keys) - 3})" if len(keys) > 3 else "")
                               for what, keys in problems.items())
            for problem, allowed, flag in ((mismatch, allow_mismatch, "--allow-weight-mismatch"),
                                           (nonfinite, allow_nonfinite, "--allow-nonfinite-weights")):
                if problem and not allowed:
                    raise ValueError(
                        f"result {run.get('source_file', run['name'])}: {kind} of {run['name']!r} was run on weights "
                        f"that are not what its folder says ({detail}), so its figures may come from random or "
                        f"non-finite weights; evaluate a sound checkpoint, or pass {flag} to compare it anyway")
            notes.append(f"`{run['name']}` ({kind}) was evaluated on weights that are not what its folder says: {detail}")
    return notes


def weight_problem_lines(found: dict[str, list[dict[str, Any]]], config: CompareConfig) -> list[str]:
    """The report's warning about results let by with --allow-weight-mismatch / --allow-nonfinite-weights (others
    are refused by `check_weight_problems`)."""
    notes = check_weight_problems(found, config.allow_weight_mismatch, config.allow_nonfinite_weights)
    if not notes:
        return []
    return (["Warning: results below come from weights that are not what their folders say:", ""]
            + [f"- {note}" for note in notes] + [""])


def merge_same_weights(found: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Results of one checkpoint under several names (a copied folder, a renamed run) shown as one model: every
    result whose weight hash was seen under an earlier name takes that name, unless two results of one kind would
    then share it (then both stay, with a note). Returns the notes for the report."""
    first_name: dict[str, str] = {}
    notes = []
    for kind in ("lm_eval", "zorro"):
        for run in found[kind]:
            digest = ((run.get("model") or {}).get("checkpoint_hash") or {}).get("sha256")
            if not digest:
                continue
            canonical = first_name.setdefault(digest, run["name"])
            if run["name"] == canonical:
                continue
            if any(other["name"] == canonical for other in found[kind]):
                notes.append(f"`{run['name']}` has the same weights as `{canonical}` (sha256 {digest[:12]}); both are "
                             f"shown, as their {kind} results are separate runs")
                continue
            notes.append(f"`{run['name']}` has the same weights as `{canonical}` (sha256 {digest[:12]}): shown as "
                         f"`{canonical}`")
            run["also_named"] = run["name"]
            run["name"] = canonical
    return list(dict.fromkeys(notes))


def _classify(data: Any, path: Path) -> list[tuple[str, dict[str, Any]]]:
    """[(kind, result)] found in one JSON document (kind: lm_eval, zorro or perplexity)."""
    if isinstance(data, list):
        # `ssa-hf perplexity` writes a list of records {"model": ..., "data": ..., "perplexity": ...}
        values = extract_perplexities(data)
        if not values:
            return []
        models = {r.get("model") for r in data if isinstance(r, dict) and isinstance(r.get("model"), str)}
        name = default_name(models.pop()) if len(models) == 1 else path.parent.name
        problems: dict[str, list[str]] = {}
        for record in data:
            for what, keys in ((record.get("weight_problems") or {}) if isinstance(record, dict) else {}).items():
                problems.setdefault(what, list(keys))
        result = {"kind": "perplexity", "name": name, "perplexity": values, "source": str(path)}
        return [("perplexity", {**result, "model": {"weight_problems": problems}} if problems else result)]
    if not isinstance(data, dict):
        return []
    kind = data.get("kind")
    if kind == "lm_eval":
        return [("lm_eval", data)]
    if kind == "lm_eval_comparison":
        return [("lm_eval", run) for run in data.get("runs", [])]
    if kind == "zorro":
        return [("zorro", data)]
    if kind in ("comparison",):
        return []
    if "results" in data and "lm_eval_version" in data:
        return [("lm_eval", _from_lm_eval_output(data, path))]
    values = extract_perplexities(data)
    if values:
        name = data.get("name") or data.get("model_name") or path.parent.name
        if isinstance(data.get("model"), str):
            name = data.get("name") or default_name(data["model"])
        return [("perplexity", {"kind": "perplexity", "name": str(name), "perplexity": values, "source": str(path)})]
    return []


def load_results(paths: list[str], names: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """{"lm_eval": [...], "zorro": [...], "perplexity": [...]} from files and folders; FileNotFoundError for a
    missing path, ValueError for a path with no recognisable result."""
    if not paths:
        raise ValueError("give at least one RESULT (a results JSON file or a folder of them)")
    if names is not None and len(names) != len(paths):
        raise ValueError(f"--names: {len(names)} names for {len(paths)} RESULT arguments")
    found: dict[str, list[dict[str, Any]]] = {"lm_eval": [], "zorro": [], "perplexity": []}
    for index, raw in enumerate(paths):
        path = Path(raw).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"result {path} does not exist")
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*.json") if not p.name.startswith("."))
        # a multi-model eval folder holds eval_comparison.json and one eval.json per model: read the runs once
        if any(f.name == "eval_comparison.json" for f in files):
            files = [f for f in files if f.name != "eval.json"]
        hits = 0
        for file in files:
            if file.name in ("eval_samples.json", "probe_scores.json", "compare.json"):
                continue
            try:
                data = read_json(file)  # (a FIFO is refused, never waited on)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                if path.is_file():
                    raise ValueError(f"result {file} is not valid JSON: {error}") from error
                continue
            for kind, result in classify(data, file):
                result = dict(result)
                if names is not None and names[index]:
                    result["name"] = names[index]
                elif not result.get("name"):
                    result["name"] = file.parent.name
                result.setdefault("source_file", str(file))
                found[kind].append(result)
                hits += 1
        if hits == 0:
            raise ValueError(
                f"no evaluation, probe or perplexity results in {path} (expected eval.json, probe.json, an lm-eval "
                "results file or a JSON with perplexity fields)"
            )
    for kind, runs in found.items():
        seen: dict[str, int] = {}
        for run in runs:
            seen[run["name"]] = seen.get(run["name"], 0) + 1
        clashes = [n for n, c in seen.items() if c > 1]
        if clashes:
            raise ValueError(
                f"two {kind} results are both named {clashes}; give each RESULT a name with --names"
            )
    return found


# ------------------------------------------------------------------------------------------ the paper's figures

#: Where PAPER_FIGURES come from.
PAPER_SOURCE = (
    "the SSA paper's reported results, softmax vs SSA (best SSA for Zorro), as collected in REFERENCE.md section 4: "
    "lm-eval and perplexity of the ~114M decoder, Zorro of BabyBERTa"
)


@dataclass(frozen=True)
class PaperFigure:
    """One figure the paper reports. section: lm_eval, perplexity or zorro; key: the task, data set or paradigm;
    chance: the chance level of the metric (None where there is none); zorro figures are in %."""

    section: str
    key: str
    metric: str
    softmax: float
    ssa: float
    chance: float | None = None
    higher_is_better: bool = True


# The one declared table of the paper's numbers (source: PAPER_SOURCE). Chance: 1 / number of choices (ARC has a
# few 3- and 5-choice questions; our runs report the exact mean on the scored documents).
PAPER_FIGURES: tuple[PaperFigure, ...] = (
    PaperFigure("lm_eval", "arc_easy", "acc_norm", 0.2934, 0.5387, 0.25),
    PaperFigure("lm_eval", "arc_challenge", "acc_norm", 0.2398, 0.2713, 0.25),
    PaperFigure("lm_eval", "boolq", "acc", 0.3783, 0.5618, 0.5),
    PaperFigure("lm_eval", "hellaswag", "acc_norm", 0.2550, 0.3283, 0.25),
    PaperFigure("lm_eval", "winogrande", "acc", 0.4972, 0.5178, 0.5),
    PaperFigure("lm_eval", "copa", "acc", 0.59, 0.64, 0.5),
    PaperFigure("lm_eval", "cb", "acc", 0.1429, 0.4643, 1 / 3),
    PaperFigure("lm_eval", "cb", "f1", 0.1310, 0.2663, None),
    PaperFigure("lm_eval", "record", "f1", 0.1983, 0.2482, None),
    PaperFigure("lm_eval", "record", "em", 0.1932, 0.2427, None),
    PaperFigure("perplexity", "fineweb", "perplexity", 21.86, 19.73, None, higher_is_better=False),
    PaperFigure("perplexity", "wikipedia", "perplexity", 24.58, 22.07, None, higher_is_better=False),
    PaperFigure("zorro", "agreement_subject_verb-across_prepositional_phrase", "accuracy %", 56.00, 65.95, 50.0),
    PaperFigure("zorro", "argument_structure-swapped_arguments", "accuracy %", 83.30, 92.00, 50.0),
    PaperFigure("zorro", "binding-principle_a", "accuracy %", 78.25, 87.90, 50.0),
    PaperFigure("zorro", "quantifiers-superlative", "accuracy %", 71.20, 83.95, 50.0),
)

# our perplexity labels that stand for the paper's evaluation sets (wikitext is Wikipedia text, a different cut)
_PERPLEXITY_ALIASES = {"fineweb": ("fineweb",), "wikipedia": ("wikipedia", "wikitext", "wiki")}


def _ours_lm_eval(figure: PaperFigure, run: dict[str, Any]) -> tuple[float | None, dict[str, Any] | None]:
    entry = run["tasks"].get(figure.key) or {}
    value = ((entry.get("metrics") or {}).get(figure.metric) or {}).get("value")
    return value, entry.get("baselines")


def _ours_perplexity(figure: PaperFigure, run: dict[str, Any]) -> float | None:
    aliases = _PERPLEXITY_ALIASES.get(figure.key, (figure.key,))
    matches = [v for label, v in run["perplexity"].items() if any(a in label.lower() for a in aliases)]
    return matches[0] if len(matches) == 1 else None  # several candidates: ambiguous, left blank


def _ours_zorro(figure: PaperFigure, run: dict[str, Any]) -> float | None:
    methods = run["settings"]["methods"]
    method = "holistic" if "holistic" in methods else methods[0]  # holistic: the paper's (BabyBERTa's) scoring
    accuracy = (run["paradigms"].get(figure.key, {}).get(method) or {}).get("accuracy")
    return None if accuracy is None else 100 * accuracy


def paper_rows(found: dict[str, list[dict[str, Any]]]) -> tuple[list[str], list[dict[str, Any]]]:
    """(model column names, one row per PAPER_FIGURES entry): the paper's two figures, ours per model (None where
    we have no such result), chance and, for lm-eval, the majority baseline of the documents we scored."""
    columns: list[str] = []
    for kind in ("lm_eval", "perplexity", "zorro"):
        columns += [r["name"] for r in found[kind] if r["name"] not in columns]
    rows = []
    for figure in PAPER_FIGURES:
        ours: dict[str, float | None] = {}
        majority = None
        chance = figure.chance
        for run in found[figure.section]:
            if figure.section == "lm_eval":
                ours[run["name"]], base = _ours_lm_eval(figure, run)
                if base and majority is None:
                    chance, majority = base["chance"], (base["majority"], base["majority_answer"])
            elif figure.section == "perplexity":
                ours[run["name"]] = _ours_perplexity(figure, run)
            else:
                ours[run["name"]] = _ours_zorro(figure, run)
        rows.append({"figure": asdict(figure), "ours": ours, "chance": chance, "majority": majority})
    return columns, rows


def paper_section(found: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Markdown lines of the "beside the paper" table."""
    from .report import paper_table

    columns, rows = paper_rows(found)
    return [
        "## Beside the paper",
        "",
        f"Paper: {PAPER_SOURCE}. Ours: the results given here ('–': no such result). lm-eval: accuracy (0-1); "
        "Zorro: % with holistic scoring where it was run; perplexity: lower is better (ours labelled wikitext "
        "stand in for the paper's Wikipedia windows). Chance and majority: on our scored documents where we have "
        "them, else chance from the number of choices.",
        "",
        paper_table(columns, rows),
        "",
    ]


# ---------------------------------------------------------------------------------------------------- run


def run_compare(config: CompareConfig) -> CompareResults:
    from .report import (
        lm_eval_caveats,
        lm_eval_figure,
        lm_eval_table,
        models_table,
        perplexity_figure,
        perplexity_table,
        zorro_figure,
        zorro_pair_differences,
        zorro_table,
    )

    found = load_results(list(config.results), config.names)
    same_weights = merge_same_weights(found)
    lines = [f"# {config.title}", ""] + weight_problem_lines(found, config)
    all_runs = found["lm_eval"] + found["zorro"]
    if all_runs:
        lines += ["## Models", "", models_table(all_runs), ""]
        lines += [f"- {note}" for note in same_weights] + ([""] if same_weights else [])
    figures = {}
    if found["perplexity"]:
        lines += ["## Perplexity (lower is better)", "", perplexity_table(found["perplexity"]), ""]
        lines += [f"Sources: " + ", ".join(f"{r['name']}: `{r['source']}`" for r in found["perplexity"]), ""]
        figures["compare_perplexity.png"] = perplexity_figure(found["perplexity"])
    if found["lm_eval"]:
        runs = found["lm_eval"]
        settings = runs[0].get("settings", {})
        lines += [
            "## lm-evaluation-harness",
            "",
            f"lm-eval {runs[0].get('versions', {}).get('lm_eval', '?')}, num_fewshot = {settings.get('num_fewshot')}, "
            f"limit = {settings.get('limit')}. Value ± standard error; chance and majority baselines on the scored "
            "documents.",
            "",
            lm_eval_table(runs),
            "",
        ]
        notes = lm_eval_caveats(runs)
        if notes:
            lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
        figures["compare_lm_eval.png"] = lm_eval_figure(runs)
    if found["zorro"]:
        runs = found["zorro"]
        versions = sorted({r["settings"]["zorro_version"] for r in runs})
        lines += [
            "## Zorro grammar probes (accuracy %, chance 50)",
            "",
            f"Zorro version(s): {', '.join(versions)}" + ("  (differ between models)" if len(versions) > 1 else ""),
            "",
        ]
        pair_warning = zorro_pair_differences(runs)
        lines += ([pair_warning, ""] if pair_warning else []) + [zorro_table(runs), ""]
        figures["compare_zorro.png"] = zorro_figure(runs)
    lines += paper_section(found)
    if figures:
        lines += ["## Figures", ""] + [f"![{name}]({name})" for name in figures]
    result = CompareResults(
        title=config.title,
        lm_eval=found["lm_eval"],
        zorro=found["zorro"],
        perplexity=found["perplexity"],
        sources=list(config.results),
        markdown="\n".join(lines),
    )
    if config.output_dir:
        out = OutputDir(config.output_dir, writes=["compare.md", "compare.json", *figures])
        for name, figure in figures.items():
            result.files[name] = str(out.save_figure(name, figure))
        result.files["markdown"] = str(out.write_markdown("compare.md", result.markdown))
        result.files["json"] = str(out.file("compare.json"))
        out.write_json("compare.json", result.to_dict())
    else:
        import matplotlib.pyplot as plt

        for figure in figures.values():
            plt.close(figure)
    return result
