"""From the runs' results to the claims of RESULTS.md: per claim its primary endpoint on the confirmatory seeds
(the one row with a verdict), the same endpoint on the exploratory seeds and the declared secondary endpoints
(exploratory rows), each beside the paper's figure and the trivial baselines (ssa_hf.reproduce.verdict)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Callable

from ..evaluation.compare import PAPER_FIGURES, PaperFigure
from ..icl.stats import endpoint_value, holm, mean_ci, paired_t_power, seeds_for_power
from .config import Claim, Endpoint, ICLExperiment, LMExperiment, ReproduceConfig
from .verdict import (arm_beats_baseline, at_bound, exploratory_reading, inside_margin, measurable, paired_comparison,
                      smallest_p, survives, test_p, verdict)

ICL_QUALITATIVE = "SSA lower (qualitative: plots, no table)"
_FIGURES: dict[tuple[str, str], PaperFigure] = {}
for _figure in PAPER_FIGURES:  # a task with two figures (cb acc / f1, ReCoRD f1 / em): its first is the endpoint's
    _FIGURES.setdefault((_figure.section, _figure.key), _figure)
# the range of each kind of figure (an arm's interval is clipped to it)
BOUNDS = {"percent": (0.0, 100.0), "accuracy": (0.0, 1.0), "nll": (0.0, float("inf")), "error": (0.0, 1.0),
          "mse": (0.0, float("inf")), "log": (-float("inf"), float("inf"))}
# our perplexity endpoints and the paper's evaluation sets they stand for
PERPLEXITY_SETS = {"nll_in": "fineweb", "nll_out": "wikipedia"}
POSITIONS = {"llama": "rotary position embeddings (RoPE)", "gpt2": "learned absolute position embeddings (GPT-2)"}


def _paper_figure(figure: PaperFigure | None) -> dict:
    if figure is None:
        return {}
    return {"softmax": figure.softmax, "ssa": figure.ssa, "metric": figure.metric, "chance": figure.chance}


def power_summary(claim: Claim, seeds: int, alpha: float) -> dict | None:
    """The power calculation behind a claim's confirmatory seeds (config `power`), for RESULTS.md."""
    if claim.power is None or seeds < 2:
        return None
    p = claim.power
    return {"sd": p.sd, "effect": p.effect, "source": p.source, "seeds": seeds,
            "power": paired_t_power(p.effect, p.sd, seeds, alpha), "seeds_for_80": seeds_for_power(p.effect, p.sd, 0.8, alpha)}


def _row(label: str, endpoint: Endpoint, treatment: list[float], control: list[float], seeds: list[int], config, *,
         kind: str, primary: bool, baselines: dict[str, float | None], measure_baseline: float | None,
         measure_control: list[float] | None, paper: dict, scale: str, measure_treatment: list[float] | None = None,
         margin: float | None = None, bounds: tuple[float | None, float | None] = (None, None)) -> dict:
    """One row: the paired comparison of `treatment` and `control` over `seeds`; `kind` confirmatory or
    exploratory; a verdict only for a primary endpoint on confirmatory seeds. Measurable unless both arms sit at
    the trivial baseline (`measure_*`: the values the rule reads, default the endpoint's) or, with declared
    `bounds` (floor, ceiling), both at the floor or both at the ceiling. `margin`: the claim's equivalence margin."""
    comparison = paired_comparison(treatment, control, endpoint.interval, config.level)
    comparison["treatment_ci"] = mean_ci(treatment, config.level, BOUNDS[scale])
    comparison["control_ci"] = mean_ci(control, config.level, BOUNDS[scale])
    p = test_p(comparison, endpoint.test)
    better = "lower" if scale in ("error", "mse", "log", "nll") else endpoint.direction
    control_beats = arm_beats_baseline(measure_control if measure_control is not None else control, measure_baseline, better)
    treatment_beats = arm_beats_baseline(measure_treatment if measure_treatment is not None else treatment,
                                         measure_baseline, better)
    is_measurable = measurable(control_beats, treatment_beats)
    bound = at_bound(comparison["mean_b"], comparison["mean_a"], *bounds)
    if bound is not None:
        is_measurable = False
    decides = primary and kind == "confirmatory"
    return {"label": label, "direction": endpoint.direction, "comparison": comparison, "p": p, "test": endpoint.test,
            "seed_list": list(seeds), "seeds_kind": kind, "primary": primary, "decides": decides,
            "measurable": is_measurable, "control_beats": control_beats, "treatment_beats": treatment_beats,
            "bound": bound, "baselines": baselines, "measure_baseline": measure_baseline,
            "margin": margin if decides else None,
            "inside_margin": inside_margin(comparison["low"], comparison["high"], margin) if decides else None,
            "verdict": verdict(comparison["low"], comparison["high"], endpoint.direction, p, config.alpha, is_measurable,
                               margin) if decides else None,
            "reading": None if decides else exploratory_reading(p, endpoint.test, is_measurable)
            + (f" (both arms at the declared {bound})" if bound else ""),
            "paper": paper, "scale": scale, "metric": endpoint.metric, "holm_p": None, "survives": None}


def apply_multiplicity(claims: list[dict], config: ReproduceConfig) -> None:
    """Holm-adjusted p over every deciding primary row with a p; with multiplicity holm the verdicts use it."""
    rows = [r for c in claims for r in c["rows"] if r["decides"] and r["p"] is not None]
    for row, adjusted in zip(rows, holm([r["p"] for r in rows])):
        row["holm_p"] = adjusted
        c = row["comparison"]
        if config.multiplicity == "holm":
            row["verdict"] = verdict(c["low"], c["high"], row["direction"], adjusted, config.alpha, row["measurable"],
                                     row["margin"])
        row["survives"] = survives(row["verdict"], c["low"], c["high"], row["direction"], adjusted, config.alpha,
                                   row["measurable"], row["margin"])


# ------------------------------------------------------------------------------------------------- ICL


def _selector(endpoint: Endpoint):
    linear = endpoint.metric in ("mse", "log_mse_ratio")
    return SimpleNamespace(sweep=endpoint.sweep or ("grid" if linear else "sigma_sweep"), test_set=endpoint.test_set,
                           metric=endpoint.metric, min_value=endpoint.min_value, max_value=endpoint.max_value,
                           describe=lambda: endpoint.label or endpoint.metric)


def _icl_label(endpoint: Endpoint) -> str:
    selector = _selector(endpoint)
    span = f">= {endpoint.min_value:g}" + (f" and <= {endpoint.max_value:g}" if endpoint.max_value is not None else "")
    axis = {"sigma_sweep": "sigma", "length_sweep": "points", "grid": "sigma_x"}[selector.sweep]
    label = endpoint.label or f"mean {endpoint.metric.replace('_', ' ')} over {axis} {span}"
    where = f" ({selector.test_set} set)" if selector.sweep != "grid" else ""
    return f"{label}{where}, {endpoint.treatment} minus {endpoint.control}"


def _in_distribution(evaluation: dict, endpoint: Endpoint) -> float:
    """The cell the measurability rule reads: sigma 1 at the trained length (quantifiers, the endpoint's test set;
    metric sequence error), or sigma_x = sigma_ab = 1 (linear: MSE)."""
    if "grid" in evaluation:
        grid = evaluation["grid"]
        return grid["mse"][grid["sigmas_x"].index(1)][grid["sigmas_ab"].index(1)]
    sweep = evaluation["sigma_sweep"]
    return sweep[endpoint.test_set][sweep["values"].index(1)]["sequence_error"]


def icl_baseline_evaluations(icl_config) -> dict[str, dict]:
    """Every trivial baseline of the experiment's task, evaluated on the runs' test prompts."""
    from ..icl.evaluate import baselines_for, evaluate_task

    task = icl_config.tasks[0]
    return {name: evaluate_task(task, fn, icl_config.eval, icl_config.eval_length) for name, fn in baselines_for(task).items()}


def claim_endpoints(claim) -> list[tuple]:
    """(endpoint, is_primary, seed kind) in the order a claim's rows are shown: the primary on the confirmatory
    seeds (the verdict), then on the exploratory ones, then each declared secondary on the confirmatory seeds."""
    return ([(claim.primary, True, "confirmatory"), (claim.primary, True, "exploratory")]
            + [(endpoint, False, "confirmatory") for endpoint in claim.secondary])


def icl_claims(name: str, experiment: ICLExperiment, runs: list[dict], baseline_evals: dict[str, dict],
               icl_settings: dict, config: ReproduceConfig) -> list[dict]:
    """The claims of one ICL experiment from its finished runs (a claim whose confirmatory seeds have fewer than 2
    finished pairs is left out: `expected_claims` names it as pending)."""
    zero = baseline_evals.get("zero", {}).get("grid", {}).get("mse")
    trivial = "zero" if "zero" in baseline_evals else "majority"

    def value(evaluation, endpoint):
        return endpoint_value(evaluation, _selector(endpoint), zero)

    out = []
    for claim_name, claim in experiment.claims.items():
        rows = []
        endpoints = claim_endpoints(claim)
        for endpoint, is_primary, kind in endpoints:
            wanted = getattr(experiment.seeds, kind)
            by_arm = {arm: {r["seed"]: r["eval"] for r in runs if r["scoring"] == arm and r["seed"] in wanted}
                      for arm in (endpoint.treatment, endpoint.control)}
            seeds = sorted(set(by_arm[endpoint.treatment]) & set(by_arm[endpoint.control]))
            if len(seeds) < 2:
                if is_primary and kind == "confirmatory":
                    break  # the claim is pending
                continue
            scale = "log" if endpoint.metric == "log_mse_ratio" else "mse" if endpoint.metric == "mse" else "error"
            baselines = {b: value(e, endpoint) for b, e in baseline_evals.items()}
            rows.append(_row(
                _icl_label(endpoint), endpoint, [value(by_arm[endpoint.treatment][s], endpoint) for s in seeds],
                [value(by_arm[endpoint.control][s], endpoint) for s in seeds], seeds, config, kind=kind,
                primary=is_primary, baselines=baselines,
                measure_baseline=_in_distribution(baseline_evals[trivial], endpoint),
                measure_control=[_in_distribution(by_arm[endpoint.control][s], endpoint) for s in seeds],
                measure_treatment=[_in_distribution(by_arm[endpoint.treatment][s], endpoint) for s in seeds],
                paper={"text": ICL_QUALITATIVE}, scale=scale, margin=claim.margin))
        if not rows or not rows[0]["decides"]:
            continue
        backbone = icl_settings.get("backbone", "llama")
        protocol = (f"{icl_settings['model']}; {icl_settings['training']}; test prompts: "
                    f"{icl_settings['prompts']} per cell, scored from position {icl_settings['from_position']}")
        if claim_name == "length" or claim.primary.sweep == "length_sweep":
            protocol += f"; positions: {POSITIONS.get(backbone, backbone)} (prompts up to {icl_settings['max_points']} points)"
        out.append({"id": f"icl_{name}_{claim_name}", "section": "icl", "experiment": name, "claim_name": claim_name,
                    "title": f"ICL `{icl_settings['task']}` ({claim_name}, {backbone} backbone): SSA vs softmax",
                    "claim": claim.claim, "description": experiment.description, "protocol": protocol,
                    "seeds": {"confirmatory": rows[0]["seed_list"], "exploratory": experiment.seeds.exploratory,
                              "declared": experiment.seeds.confirmatory},
                    "exploratory_run": [r["seed_list"] for r in rows if r["seeds_kind"] == "exploratory" and r["primary"]],
                    "power": power_summary(claim, len(rows[0]["seed_list"]), config.alpha),
                    "measure_rule": (f"each arm (`{claim.primary.control}`, `{claim.primary.treatment}`) in distribution "
                                     f"(sigma 1, trained length) vs the "
                                     f"{'predict-0' if trivial == 'zero' else 'majority-answer'} baseline"),
                    "paper_primary": None, "margin": claim.margin, "margin_source": claim.margin_source, "margin_seen": claim.margin_seen,
                    "size": _size(claim), "rows": rows})
    return out


def icl_settings(config) -> dict:
    model, train = config.model, config.train
    return {"task": config.tasks[0], "backbone": model.backbone,
            "model": f"{model.backbone} backbone, {model.layers} layers, {model.heads} heads, width {model.width}"
                     + (f", scoring options {model.scoring_options}" if model.scoring_options else ""),
            "training": f"{train.steps} steps, batch {train.batch_size}, lr {train.lr}, warm-up {train.warmup_steps}, "
                        f"curriculum {train.curriculum.start} -> {train.curriculum.end} points (+{train.curriculum.increment} "
                        f"every {train.curriculum.interval} steps)",
            "prompts": config.eval.batches * config.eval.batch_size, "from_position": config.eval.from_position,
            "max_points": model.max_points}


# ------------------------------------------------------------------------------------------- language models


def _zorro_getter(metric: str) -> Callable[[dict], float]:
    if metric == "zorro_mean":
        return lambda r: 100 * r["evaluations"]["zorro"]["mean"]
    paradigm = metric.split(":", 1)[1]
    return lambda r: 100 * r["evaluations"]["zorro"]["paradigms"][paradigm]


def _lm_eval_metric(task: str) -> str:
    figure = _FIGURES.get(("lm_eval", task))
    return figure.metric if figure else "acc"


def _lm_eval_tasks(results: list[dict]) -> list[str]:
    return sorted(set.intersection(*(set(r["evaluations"]["lm_eval"]["tasks"]) for r in results)))


def _getter(claim: str, metric: str, results: list[dict]) -> Callable[[dict], float]:
    if claim == "zorro":
        return _zorro_getter(metric)
    if claim == "perplexity":
        return lambda r: r["evaluations"]["perplexity"][metric]
    tasks = _lm_eval_tasks(results)
    if metric == "lm_eval_mean":
        return lambda r: sum(r["evaluations"]["lm_eval"]["tasks"][t]["metrics"][_lm_eval_metric(t)] for t in tasks) / len(tasks)
    task = metric.split(":", 1)[1]
    return lambda r: r["evaluations"]["lm_eval"]["tasks"][task]["metrics"][_lm_eval_metric(task)]


_FULL_SPLIT: dict[tuple, dict] = {}


def full_split_baselines(tasks: list[str], lm_eval_settings: dict, scored: dict[str, dict | None]) -> dict[str, dict | None]:
    """Chance and majority of each task on its whole evaluation split (not the documents a `limit` scored: their
    label majority is not the task's, e.g. ARC-Easy 0.333 on its first 150 documents, 0.266 on the split). Without
    a limit the scored documents are the split; else read from the data (ssa_hf.evaluation.harness.task_baselines),
    falling back to the scored documents' figures (marked) where the split cannot be read."""
    if not lm_eval_settings.get("limit"):
        return {t: scored.get(t) for t in tasks}
    from .runs import resolve_path

    data_dir = lm_eval_settings.get("data_dir") or "${SSA_HF_DATA_DIR}"
    key = (tuple(sorted(tasks)), str(resolve_path(data_dir)))
    if key not in _FULL_SPLIT:
        try:
            from ..evaluation.harness import task_baselines

            _FULL_SPLIT[key] = task_baselines(list(key[0]), key[1])
        except Exception:  # no copy of the split here (offline, no data): the scored documents' figures, marked
            _FULL_SPLIT[key] = {t: {**scored[t], "scored_only": True} if scored.get(t) else None for t in tasks}
    return {t: _FULL_SPLIT[key].get(t) for t in tasks}


def _lm_baselines(claim: str, metric: str, results: list[dict], vocab_size: int | None,
                  lm_eval_settings: dict | None = None) -> dict[str, float | None]:
    """The trivial baselines of an endpoint: zorro chance 50%; lm-eval chance and majority of the full evaluation
    split (`full_split_baselines`); NLL of the uniform distribution over the vocabulary."""
    if claim == "zorro":
        return {"chance": 50.0}
    if claim == "perplexity":
        return {"uniform": math.log(vocab_size) if vocab_size else None}
    tasks = _lm_eval_tasks(results) if metric == "lm_eval_mean" else [metric.split(":", 1)[1]]
    scored = {t: results[0]["evaluations"]["lm_eval"]["tasks"][t].get("baselines") for t in tasks}
    split = full_split_baselines(tasks, lm_eval_settings or {}, scored)
    entries = [split.get(t) or {} for t in tasks]
    if not all(e.get("chance") is not None and e.get("majority") is not None for e in entries):
        return {}
    return {"chance": sum(e["chance"] for e in entries) / len(entries),
            "majority": sum(e["majority"] for e in entries) / len(entries),
            "best trivial": sum(max(e["chance"], e["majority"]) for e in entries) / len(entries)}


def paper_primary(claim: str, metric: str, tasks: list[str] | None = None) -> dict | None:
    """The paper's own value of a primary endpoint beside ours: {control, treatment, difference, note}; lm-eval:
    the mean over the tasks we ran (all must have a paper figure); perplexity: NLL = log(perplexity); Zorro: the
    paper gives no 23-paradigm mean, so the mean over the four paradigms it reports (said in `note`). None: the
    paper gives plots, no figure (ICL)."""
    if claim == "lm_eval" and metric == "lm_eval_mean" and tasks:
        figures = [_FIGURES.get(("lm_eval", t)) for t in tasks]
        if any(f is None for f in figures):
            return None
        control = sum(f.softmax for f in figures) / len(figures)
        treatment = sum(f.ssa for f in figures) / len(figures)
        return {"control": control, "treatment": treatment, "difference": treatment - control,
                "note": f"mean over the {len(tasks)} tasks run"}
    if claim == "perplexity" and metric in PERPLEXITY_SETS:
        figure = _FIGURES[("perplexity", PERPLEXITY_SETS[metric])]
        control, treatment = math.log(figure.softmax), math.log(figure.ssa)
        return {"control": control, "treatment": treatment, "difference": treatment - control,
                "note": f"NLL = log of the perplexity {figure.softmax:g} -> {figure.ssa:g}"}
    if claim == "zorro" and metric == "zorro_mean":
        figures = [f for f in PAPER_FIGURES if f.section == "zorro"]
        control = sum(f.softmax for f in figures) / len(figures)
        treatment = sum(f.ssa for f in figures) / len(figures)
        return {"control": control, "treatment": treatment, "difference": treatment - control,
                "note": f"the paper's {len(figures)} reported paradigms only (its best SSA); no 23-paradigm mean"}
    return None


def _size(claim: Claim) -> dict | None:
    return None if claim.size is None else {k: getattr(claim.size, k) for k in claim.size.__dataclass_fields__}


def _paper_for(claim: str, metric: str) -> dict:
    if claim == "zorro" and metric.startswith("zorro:"):
        return _paper_figure(_FIGURES.get(("zorro", metric.split(":", 1)[1])))
    if claim == "perplexity" and metric in PERPLEXITY_SETS:
        figure = _FIGURES[("perplexity", PERPLEXITY_SETS[metric])]
        return {**_paper_figure(figure), "nll_difference": math.log(figure.ssa / figure.softmax)}
    if claim == "lm_eval" and metric.startswith("lm_eval:"):
        return _paper_figure(_FIGURES.get(("lm_eval", metric.split(":", 1)[1])))
    return {}


TITLES = {"zorro": "BabyBERTa-style masked LM: Zorro grammar probes, SSA vs softmax",
          "perplexity": "Small decoder: perplexity in and out of distribution, SSA vs softmax",
          "lm_eval": "Small decoder: lm-eval (zero-shot multiple choice), SSA vs softmax"}
SCALES = {"zorro": "percent", "perplexity": "nll", "lm_eval": "accuracy"}
MEASURE_RULES = {"zorro": "each arm vs chance (50%) on the endpoint", "perplexity": "each arm vs the uniform "
                 "distribution's NLL (log of the vocabulary size)", "lm_eval": "each arm vs the better of chance and "
                 "the majority answer of each task's full evaluation split"}


def _label(metric: str) -> str:
    if ":" in metric:
        return metric.split(":", 1)[1]
    return {"nll_in": "held-out training-distribution text: mean NLL per token",
            "nll_out": "out-of-distribution text: mean NLL per token", "zorro_mean": "mean Zorro accuracy (%)",
            "lm_eval_mean": "mean accuracy over the tasks"}.get(metric, metric)


def endpoint_arms(endpoint: Endpoint, experiment: LMExperiment) -> tuple[str, ...]:
    """The arms an endpoint reads, control last: (treatment, control) as it declares them, else the experiment's
    (validation fills them in; the fallback covers an endpoint built without it); a best-of endpoint: (*best_of,
    control)."""
    control = endpoint.control or experiment.control
    if endpoint.best_of:
        return (*endpoint.best_of, control)
    return endpoint.treatment or experiment.treatment, control


def paired_seeds(results: list[dict], arms: tuple[str, ...], wanted: list[int]) -> list[int]:
    """Seeds of `wanted` with a finished run of every one of `arms`."""
    return sorted(set.intersection(*({r["seed"] for r in results if r["arm"] == arm and r["seed"] in wanted}
                                     for arm in arms)))


def best_of_values(results: list[dict], arms: tuple[str, ...], control: str,
                   seeds: list[int]) -> tuple[list[float], list[float], dict[str, str]]:
    """The paper's "best SSA per paradigm" on Zorro: per paradigm the arm of `arms` with the higher mean accuracy
    over `seeds` (the first declared on a tie); per seed the mean over the paradigms (%) of the chosen arms and of
    the control. Returns (treatment values, control values, paradigm -> chosen arm). The choice reads the figures
    it then compares, so the difference favours SSA (exploratory only)."""
    table = {(r["arm"], r["seed"]): r["evaluations"]["zorro"]["paradigms"] for r in results}
    paradigms = list(table[(control, seeds[0])])

    def mean(arm: str, paradigm: str) -> float:
        return sum(table[(arm, s)][paradigm] for s in seeds) / len(seeds)

    chosen = {p: max(arms, key=lambda arm: mean(arm, p)) for p in paradigms}
    treatment = [100 * sum(table[(chosen[p], s)][p] for p in paradigms) / len(paradigms) for s in seeds]
    control_values = [100 * sum(table[(control, s)][p] for p in paradigms) / len(paradigms) for s in seeds]
    return treatment, control_values, chosen


def _vocab_size(experiment: LMExperiment) -> int | None:
    return ((experiment.overrides.get("tokenizer") or {}).get("vocab_size")
            or ((experiment.overrides.get("model") or {}).get("overrides") or {}).get("vocab_size"))


def lm_claims(kind: str, experiment: LMExperiment, results: list[dict], config: ReproduceConfig) -> list[dict]:
    """The claims of one kind of language model from its finished runs (claims with < 2 paired confirmatory
    seeds are left out: `expected_claims` names them as pending)."""
    claims = []
    for claim_name, claim in experiment.claims.items():
        rows = []
        endpoints = claim_endpoints(claim)
        for endpoint, is_primary, seed_kind in endpoints:
            arms = endpoint_arms(endpoint, experiment)
            treatment, control = arms[0], arms[-1]
            seeds = paired_seeds(results, arms, getattr(experiment.seeds, seed_kind))
            chosen = [r for r in results if r["seed"] in seeds and r["arm"] in arms]
            if len(seeds) < 2 or any(claim_name not in r["evaluations"] for r in chosen):
                if is_primary and seed_kind == "confirmatory":
                    break
                continue
            label = endpoint.label or _label(endpoint.metric)
            try:
                if endpoint.best_of:
                    treatment_values, control_values, picked = best_of_values(chosen, arms[:-1], control, seeds)
                    counts = ", ".join(f"{arm} in {list(picked.values()).count(arm)}" for arm in arms[:-1])
                    label += (f", per paradigm the better of {' and '.join(arms[:-1])} ({counts} of {len(picked)}; "
                              f"chosen on these figures, which favours SSA) minus {control}")
                else:
                    getter = _getter(claim_name, endpoint.metric, chosen)
                    by_arm = {arm: {r["seed"]: float(getter(r)) for r in chosen if r["arm"] == arm} for arm in arms}
                    treatment_values = [by_arm[treatment][s] for s in seeds]
                    control_values = [by_arm[control][s] for s in seeds]
                    if arms != (experiment.treatment, experiment.control):
                        label += f", {treatment} minus {control}"
            except (KeyError, TypeError):
                continue  # this figure is missing from some run (e.g. a task that did not run)
            baselines = _lm_baselines(claim_name, endpoint.metric, chosen, _vocab_size(experiment),
                                      experiment.evaluation.get("lm_eval") or {})
            measure = baselines.get("best trivial", baselines.get("chance", baselines.get("uniform")))
            paradigm = endpoint.metric.startswith("zorro:")
            rows.append(_row(label, endpoint, treatment_values, control_values,
                             seeds, config, kind=seed_kind, primary=is_primary, baselines=baselines,
                             measure_baseline=measure, measure_control=None, paper=_paper_for(claim_name, endpoint.metric),
                             scale=SCALES[claim_name], margin=claim.margin,
                             bounds=(claim.floor, claim.ceiling) if paradigm else (None, None)))
        if not rows or not rows[0]["decides"]:
            continue
        confirmatory = rows[0]["seed_list"]
        entry = {"id": f"{kind}_{claim_name}", "section": kind, "experiment": kind, "claim_name": claim_name,
                 "title": TITLES[claim_name], "claim": claim.claim, "description": experiment.description,
                 "protocol": _lm_protocol(kind, experiment),
                 "seeds": {"confirmatory": confirmatory, "exploratory": experiment.seeds.exploratory,
                           "declared": experiment.seeds.confirmatory},
                 "exploratory_run": [r["seed_list"] for r in rows if r["seeds_kind"] == "exploratory" and r["primary"]],
                 "power": power_summary(claim, len(confirmatory), config.alpha), "measure_rule": MEASURE_RULES[claim_name],
                 "margin": claim.margin, "margin_source": claim.margin_source, "margin_seen": claim.margin_seen, "size": _size(claim),
                 "floor": claim.floor, "ceiling": claim.ceiling, "rows": rows}
        primary_arms = endpoint_arms(claim.primary, experiment)
        chosen = [r for r in results if r["seed"] in confirmatory and r["arm"] in primary_arms]
        tasks = _lm_eval_tasks(chosen) if claim_name == "lm_eval" else None
        entry["paper_primary"] = paper_primary(claim_name, claim.primary.metric, tasks)
        if claim_name == "lm_eval":
            scored = {t: e.get("baselines") for t, e in chosen[0]["evaluations"]["lm_eval"]["tasks"].items()}
            entry["baselines"] = scored
            entry["full_split_baselines"] = full_split_baselines(sorted(scored), experiment.evaluation.get("lm_eval") or {},
                                                                 scored)
        if claim_name == "zorro":
            entry["paradigms"] = zorro_paradigms(chosen, primary_arms, claim)
        claims.append(entry)
    return claims


def zorro_paradigms(results: list[dict], arms: tuple[str, str], claim: Claim) -> list[dict]:
    """Every Zorro paradigm, descriptive (no test): both arms' (treatment, control) means; not measurable where
    both arms sit at chance (neither beats 50% by more than one standard error) or both at the claim's declared
    floor or ceiling."""
    out = []
    for paradigm in results[0]["evaluations"]["zorro"]["paradigms"]:
        getter = _zorro_getter(f"zorro:{paradigm}")
        treatment = [getter(r) for r in results if r["arm"] == arms[0]]
        control = [getter(r) for r in results if r["arm"] == arms[1]]
        c_mean, t_mean = sum(control) / len(control), sum(treatment) / len(treatment)
        bound = at_bound(c_mean, t_mean, claim.floor, claim.ceiling)
        chance = not measurable(arm_beats_baseline(control, 50.0, "higher"), arm_beats_baseline(treatment, 50.0, "higher"))
        out.append({"paradigm": paradigm, "control": c_mean, "treatment": t_mean,
                    "bound": "chance" if chance else bound, "measurable": not chance and bound is None})
    return out


def _lm_protocol(kind: str, experiment: LMExperiment) -> str:
    o = experiment.overrides
    text = (f"{o.get('max_steps', '?')} steps of batch {o.get('per_device_train_batch_size', '?')}, lr "
            f"{o.get('learning_rate', '?')}, warm-up {o.get('warmup_steps', '?')}")
    evaluation = experiment.evaluation
    if kind == "masked":
        zorro = evaluation.get("zorro") or {}
        return text + f"; Zorro {', '.join(zorro.get('methods', ['holistic']))}, {zorro.get('limit')} pairs per paradigm"
    lm_eval, perplexity = evaluation.get("lm_eval") or {}, evaluation.get("perplexity") or {}
    return (text + f"; perplexity on {perplexity.get('windows')} windows; lm-eval {lm_eval.get('num_fewshot', 0)}-shot, "
            f"{lm_eval.get('limit')} documents per task ({', '.join(lm_eval.get('tasks', []))})")


def expected_claims(config: ReproduceConfig) -> list[str]:
    names = [f"icl_{name}_{claim}" for name, e in config.icl.items() for claim in e.claims]
    for kind in ("masked", "causal"):
        experiment = getattr(config, kind)
        if experiment is not None:
            names += [f"{kind}_{claim}" for claim in experiment.claims]
    return names


def results_summary(claims: list[dict], alpha: float = 0.05) -> dict[str, Any]:
    """The figures the docs quote, per claim (docs/results_summary.json, which tests compare with the docs): the
    primary endpoint on the confirmatory seeds, with everything its verdict was decided from (per-seed values,
    both arms against the baseline, the margin, the Holm p), the paper's value, the scale and the claim's words;
    ssa_hf.reproduce.report renders RESULTS.md's claims table and the README block from it alone."""
    out = {}
    for claim in claims:
        row = claim["rows"][0]
        c = row["comparison"]
        out[claim["id"]] = {
            "verdict": row["verdict"], "declared_seeds": len(claim["seeds"].get("declared") or []),
            "mean_difference": c["mean_difference"], "low": c["low"], "high": c["high"], "p": row["p"],
            "test": row["test"], "t_p": c.get("t_p"), "lower": c.get("lower"), "higher": c.get("higher"),
            "seeds": c.get("seeds"), "sd": c.get("sd"), "control": c["mean_b"], "treatment": c["mean_a"],
            "holm_p": row["holm_p"], "survives": row.get("survives"), "alpha": alpha,
            "smallest_p": smallest_p(c["seeds"]) if row["test"] in ("wilcoxon", "sign") and c.get("seeds") else None,
            "direction": row["direction"], "title": claim["title"], "claim": claim["claim"], "label": row["label"],
            "section": claim["section"], "seed_list": row["seed_list"],
            "control_values": c.get("b"), "treatment_values": c.get("a"),
            "baseline": row.get("measure_baseline"), "control_beats_baseline": row.get("control_beats"),
            "treatment_beats_baseline": row.get("treatment_beats"), "measurable": row.get("measurable"),
            "margin": claim.get("margin"), "margin_source": claim.get("margin_source") or None,
            "margin_seen": bool(claim.get("margin_seen")),
            "inside_margin": row.get("inside_margin"), "paper": claim.get("paper_primary"), "size": claim.get("size"),
        }
        if claim.get("paradigms"):
            out[claim["id"]].update(paradigms=claim["paradigms"], floor=claim.get("floor"), ceiling=claim.get("ceiling"))
    return out
