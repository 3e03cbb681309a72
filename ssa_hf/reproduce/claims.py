"""From the runs' results to the claims of RESULTS.md: per claim, its declared primary endpoint and the secondary
rows, each with the paper's figure, ours with its interval, and a verdict (ssa_hf.reproduce.verdict)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from ..evaluation.compare import PAPER_FIGURES, PaperFigure
from ..icl.stats import endpoint_value, mean_ci
from .config import Endpoint, ICLExperiment, LMExperiment, ReproduceConfig
from .verdict import paired_comparison, verdict

ICL_PAPER = {
    "every": "softmax degrades sharply with large inputs and long prompts; SSA significantly reduces the errors",
    "some": "softmax degrades sharply with large inputs and long prompts; SSA significantly reduces the errors",
    "linear_regression": "SSA reduces the error under shift, without fully solving shifts of both inputs and functions",
}
ICL_QUALITATIVE = "SSA lower (qualitative: plots, no table)"
_FIGURES = {(f.section, f.key): f for f in PAPER_FIGURES}
# the range of each kind of figure (an arm's interval is clipped to it)
BOUNDS = {"percent": (0.0, 100.0), "accuracy": (0.0, 1.0), "nll": (0.0, float("inf"))}
# our perplexity endpoints and the paper's evaluation sets they stand for
PERPLEXITY_SETS = {"nll_in": "fineweb", "nll_out": "wikipedia"}


def _row(label: str, endpoint_direction: str, comparison: dict, alpha: float, *, p: float | None = None,
         test: str | None = None, margin: float | None = None, paper: dict | None = None, primary: bool = False,
         scale: str = "difference") -> dict:
    return {"label": label, "direction": endpoint_direction, "comparison": comparison, "p": p, "test": test,
            "verdict": verdict(comparison["low"], comparison["high"], endpoint_direction, p, alpha, margin),
            "paper": paper or {}, "primary": primary, "scale": scale}


def _paper_figure(figure: PaperFigure | None) -> dict:
    if figure is None:
        return {}
    return {"softmax": figure.softmax, "ssa": figure.ssa, "metric": figure.metric, "chance": figure.chance}


# ------------------------------------------------------------------------------------------------- ICL


def icl_claim(name: str, experiment: ICLExperiment, results, config: ReproduceConfig) -> dict:
    """The claim of one ICL experiment: its declared primary (the ICL pipeline's paired analysis) and the
    declared secondary endpoints, computed from the runs' evaluations."""
    primary = results.paired["primary"]
    task = results.config["tasks"][0]
    if "skipped" in primary:
        raise ValueError(f"icl.{name}: the primary endpoint was not evaluated: {primary['skipped']}")
    comparison = {**primary, "interval": "bootstrap"}
    rows = [_row(primary["description"], experiment.direction, comparison, primary["alpha"], p=primary["p"],
                 test=primary["test"], primary=True, paper={"text": ICL_QUALITATIVE})]
    level = results.config["stats"]["level"]
    for endpoint in experiment.secondary:
        rows.append(_icl_secondary(endpoint, results.runs, task, level, config.alpha))
    return {"id": f"icl_{name}", "section": "icl", "title": f"ICL `{task}`: SSA vs softmax under distribution shift",
            "claim": experiment.claim or ICL_PAPER.get(task, ""), "rows": [r for r in rows if r is not None],
            "seeds": primary["seed_list"], "settings": _icl_settings(results.config)}


def _icl_secondary(endpoint: Endpoint, runs: list[dict], task: str, level: float, alpha: float) -> dict | None:
    metric = endpoint.metric
    selector = SimpleNamespace(sweep=endpoint.sweep or ("grid" if metric == "mse" else "sigma_sweep"),
                               test_set=endpoint.test_set, metric=metric, min_value=endpoint.min_value,
                               max_value=endpoint.max_value, describe=lambda: endpoint.label or metric)
    by_arm = {arm: {r["seed"]: endpoint_value(r["eval"], selector) for r in runs if r["scoring"] == arm}
              for arm in (endpoint.treatment, endpoint.control)}
    seeds = sorted(set(by_arm[endpoint.treatment]) & set(by_arm[endpoint.control]))
    if not seeds:
        return None
    comparison = paired_comparison([by_arm[endpoint.treatment][s] for s in seeds],
                                   [by_arm[endpoint.control][s] for s in seeds], endpoint.interval, level)
    span = f">= {endpoint.min_value:g}" + (f" and <= {endpoint.max_value:g}" if endpoint.max_value is not None else "")
    axis = {"sigma_sweep": "sigma", "length_sweep": "points", "grid": "sigma_x"}[selector.sweep]
    label = endpoint.label or f"mean {metric.replace('_', ' ')} over {axis} {span}"
    where = f" ({selector.test_set} set)" if selector.sweep != "grid" else ""
    label = f"{label}{where}, {endpoint.treatment} minus {endpoint.control}"
    return _row(label, endpoint.direction, comparison, alpha, margin=endpoint.margin, paper={"text": ICL_QUALITATIVE})


def _icl_settings(config: dict) -> dict:
    model, train = config["model"], config["train"]
    return {"model": f"{model['layers']} layers, {model['heads']} heads, width {model['width']}",
            "training": f"{train['steps']} steps, batch {train['batch_size']}, lr {train['lr']}",
            "scoring": ", ".join(config["attention_scoring"]), "seeds": len(config["seeds"])}


# ------------------------------------------------------------------------------------------- language models


def _values(results: list[dict], arm: str, seeds: list[int], getter) -> list[float]:
    by_seed = {r["seed"]: r for r in results if r["arm"] == arm}
    return [float(getter(by_seed[s])) for s in seeds]


def _lm_row(label: str, endpoint: Endpoint, results: list[dict], experiment: LMExperiment, getter, config, *,
            primary: bool, paper: dict | None, scale: str = "difference") -> dict | None:
    seeds = paired_seeds(results, experiment)
    if len(seeds) < 2:
        return None  # no interval from fewer than 2 paired seeds (a run still pending)
    try:
        treatment = _values(results, experiment.treatment, seeds, getter)
        control = _values(results, experiment.control, seeds, getter)
    except (KeyError, TypeError):
        return None  # this figure is missing from some run (e.g. a task that did not run)
    comparison = paired_comparison(treatment, control, endpoint.interval, config.level)
    bounds = BOUNDS[scale]
    comparison["treatment_ci"] = mean_ci(treatment, config.level, bounds)
    comparison["control_ci"] = mean_ci(control, config.level, bounds)
    return _row(label, endpoint.direction, comparison, config.alpha, margin=endpoint.margin, paper=paper,
                primary=primary, scale=scale)


def _zorro_getter(metric: str):
    if metric == "zorro_mean":
        return lambda r: 100 * r["evaluations"]["zorro"]["mean"]
    paradigm = metric.split(":", 1)[1]
    return lambda r: 100 * r["evaluations"]["zorro"]["paradigms"][paradigm]


def _lm_eval_metric(task: str) -> str:
    figure = _FIGURES.get(("lm_eval", task))
    return figure.metric if figure else "acc"


def _lm_eval_getter(metric: str, tasks: list[str]):
    if metric == "lm_eval_mean":
        return lambda r: sum(r["evaluations"]["lm_eval"]["tasks"][t]["metrics"][_lm_eval_metric(t)] for t in tasks) / len(tasks)
    task = metric.split(":", 1)[1]
    return lambda r: r["evaluations"]["lm_eval"]["tasks"][task]["metrics"][_lm_eval_metric(task)]


def _getter(claim: str, metric: str, results: list[dict]):
    if claim == "zorro":
        return _zorro_getter(metric)
    if claim == "perplexity":
        return lambda r: r["evaluations"]["perplexity"][metric]
    tasks = sorted(set.intersection(*(set(r["evaluations"]["lm_eval"]["tasks"]) for r in results)))
    return _lm_eval_getter(metric, tasks)


def _paper_for(claim: str, metric: str) -> dict:
    if claim == "zorro" and metric.startswith("zorro:"):
        return _paper_figure(_FIGURES.get(("zorro", metric.split(":", 1)[1])))
    if claim == "perplexity" and metric in PERPLEXITY_SETS:
        figure = _FIGURES[("perplexity", PERPLEXITY_SETS[metric])]
        return {**_paper_figure(figure), "nll_difference": math.log(figure.ssa / figure.softmax)}
    if claim == "lm_eval" and metric.startswith("lm_eval:"):
        return _paper_figure(_FIGURES.get(("lm_eval", metric.split(":", 1)[1])))
    return {}


def _default_secondary(claim: str, results: list[dict]) -> list[str]:
    """Metrics of the secondary rows when the config lists none: every paradigm / every lm-eval task run."""
    if claim == "zorro":
        return [f"zorro:{p}" for p in results[0]["evaluations"]["zorro"]["paradigms"]]
    if claim == "lm_eval":
        return [f"lm_eval:{t}" for t in results[0]["evaluations"]["lm_eval"]["tasks"]]
    return []


TITLES = {"zorro": "BabyBERTa-style masked LM: Zorro grammar probes, SSA vs softmax",
          "perplexity": "Small decoder: perplexity in and out of distribution, SSA vs softmax",
          "lm_eval": "Small decoder: lm-eval (zero-shot multiple choice), SSA vs softmax"}
CLAIMS = {"zorro": "SSA improves grammatical generalisation of a BabyBERTa model on Zorro (paper: best SSA vs softmax)",
          "perplexity": "SSA lowers the decoder's perplexity in distribution (FineWeb) and out of it (Wikipedia)",
          "lm_eval": "SSA raises the decoder's lm-eval accuracies"}


def paired_seeds(results: list[dict], experiment: LMExperiment) -> list[int]:
    """Seeds with a finished run of both the treatment and the control arm."""
    return sorted({r["seed"] for r in results if r["arm"] == experiment.treatment}
                  & {r["seed"] for r in results if r["arm"] == experiment.control})


def lm_claims(kind: str, experiment: LMExperiment, results: list[dict], config: ReproduceConfig) -> list[dict]:
    """The claims of one kind of language model from its finished runs (claims with < 2 paired seeds are left
    out: `pending_claims` names them)."""
    claims = []
    seeds = paired_seeds(results, experiment)
    results = [r for r in results if r["seed"] in seeds]
    for claim, primary in experiment.primary.items():
        if len(seeds) < 2 or any(claim not in r["evaluations"] for r in results):
            continue
        endpoints = [(primary, True)] + [(e, False) for e in experiment.secondary.get(claim, [])]
        if not experiment.secondary.get(claim):
            endpoints += [(Endpoint(metric=m, direction=primary.direction, interval=primary.interval), False)
                          for m in _default_secondary(claim, results)]
        rows = []
        for endpoint, is_primary in endpoints:
            row = _lm_row(endpoint.label or _label(endpoint.metric), endpoint, results, experiment,
                          _getter(claim, endpoint.metric, results), config, primary=is_primary,
                          paper=_paper_for(claim, endpoint.metric), scale=_scale(claim, endpoint.metric))
            if row is not None:
                rows.append(row)
        if not any(r["primary"] for r in rows):
            continue
        claims.append({"id": f"{kind}_{claim}", "section": kind, "claim_kind": claim, "title": TITLES[claim],
                       "claim": CLAIMS[claim], "rows": rows, "seeds": seeds,
                       "baselines": _lm_baselines(results) if claim == "lm_eval" else None})
    return claims


def _label(metric: str) -> str:
    if ":" in metric:
        return metric.split(":", 1)[1]
    return {"nll_in": "held-out training-distribution text: mean NLL per token",
            "nll_out": "out-of-distribution text: mean NLL per token", "zorro_mean": "mean Zorro accuracy (%)",
            "lm_eval_mean": "mean accuracy over the tasks"}.get(metric, metric)


def _scale(claim: str, metric: str) -> str:
    return {"zorro": "percent", "perplexity": "nll", "lm_eval": "accuracy"}[claim]


def _lm_baselines(results: list[dict]) -> dict[str, Any]:
    """Chance and majority per lm-eval task, from the documents the first run scored."""
    tasks = results[0]["evaluations"]["lm_eval"]["tasks"]
    return {task: entry.get("baselines") for task, entry in tasks.items()}
