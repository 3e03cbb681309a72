"""Statistics across seeds: Student-t intervals of one arm, paired comparisons of two arms, and the verdict rule
(`verdict`: the one implementation; ssa_hf.reproduce's RESULTS.md and the ICL report both use it).

Two scoring functions run with the same seed share the initial weights, the training prompts and the test prompts,
so every comparison is paired by seed: the per-seed differences a_k - b_k, a paired bootstrap interval of their
mean, and two exact tests of "no difference" (Wilcoxon signed-rank and sign test). Exact p-values are computed
here (no scipy needed): the sign test from the binomial distribution, the signed-rank test from the exact
distribution of the signed-rank sum under random signs, counted by dynamic programming (exact with tied
magnitudes too, by conditioning on the observed midranks). Zero differences are dropped (Wilcoxon's convention,
also scipy's default `zero_method="wilcox"`).

The t distribution for integer degrees of freedom has a closed-form CDF, inverted here by bisection.
"""

from __future__ import annotations

import math
from typing import Sequence

# differences are compared after rounding to this many significant digits, so that a mean of equal error rates
# computed in a different order still counts as a tie (and as zero)
_DIGITS = 12


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with integer `df` >= 1 (closed form in theta = atan(t / sqrt(df)))."""
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive integer, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        # P(|T| < |t|) = (2/pi) (theta + sin(theta) (cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ...)), terms up to cos^(df-2)
        total, term = 0.0, math.cos(theta)
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        central = 2 / math.pi * (theta + s * total) if df > 1 else 2 / math.pi * theta
    else:
        # P(|T| < |t|) = sin(theta) (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), terms up to cos^(df-2)
        total, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        central = s * total
    return 0.5 + math.copysign(central / 2, t)


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with integer `df` (bisection on `t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return (low + high) / 2


def mean_ci(values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None) -> dict:
    """{"mean", "low", "high", "n", "values"}: the mean across seeds with a Student-t interval at `level`.

    With one value the interval is undefined (low = high = None). `bounds` clips the interval to the metric's
    range (an error rate cannot leave [0, 1]).
    """
    values = [float(v) for v in values]
    n = len(values)
    if n == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = sum(values) / n
    if n == 1:
        return {"mean": mean, "low": None, "high": None, "n": 1, "values": values}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return {"mean": mean, "low": low, "high": high, "n": n, "values": values}


def separated(a: dict, b: dict) -> int:
    """-1 if a's interval lies wholly below b's, +1 if wholly above, 0 if they overlap (or are undefined)."""
    if None in (a["low"], a["high"], b["low"], b["high"]):
        return 0
    if a["high"] < b["low"]:
        return -1
    if a["low"] > b["high"]:
        return 1
    return 0


# --------------------------------------------------------------------------------------------------
# Paired comparisons
# --------------------------------------------------------------------------------------------------


def _rounded(value: float) -> float:
    return float(f"{value:.{_DIGITS}g}")


def paired_differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """a_k - b_k for each seed k (both sequences in the same seed order)."""
    if len(a) != len(b):
        raise ValueError(f"paired values need the same number of seeds, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("paired values need at least one seed")
    return [_rounded(float(x) - float(y)) for x, y in zip(a, b)]


def sign_test(differences: Sequence[float]) -> dict:
    """Exact two-sided sign test of median 0: {"n", "positive", "negative", "zeros", "p"} (zeros dropped)."""
    positive = sum(d > 0 for d in differences)
    negative = sum(d < 0 for d in differences)
    n = positive + negative
    if n == 0:
        return {"n": 0, "positive": 0, "negative": 0, "zeros": len(differences), "p": 1.0}
    k = min(positive, negative)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return {"n": n, "positive": positive, "negative": negative, "zeros": len(differences) - n, "p": min(1.0, 2 * tail)}


def _midranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of `values` with tied values given the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def signed_rank_distribution(doubled_ranks: Sequence[int]) -> list[int]:
    """counts[s]: how many of the 2^n sign assignments give a positive-rank sum of s / 2 (ranks given doubled,
    so that midranks are integers)."""
    counts = [1] + [0] * sum(doubled_ranks)
    top = 0
    for r in doubled_ranks:
        for s in range(top, -1, -1):
            if counts[s]:
                counts[s + r] += counts[s]
        top += r
    return counts


def wilcoxon_signed_rank(differences: Sequence[float]) -> dict:
    """Exact two-sided Wilcoxon signed-rank test of "the differences are symmetric about 0".

    Returns {"n" (non-zero differences), "zeros", "w_plus", "w_minus", "p"}. Zeros are dropped; tied magnitudes
    get midranks and the null distribution is the exact one of those midranks under random signs.
    """
    nonzero = [d for d in differences if d != 0]
    zeros = len(differences) - len(nonzero)
    if not nonzero:
        return {"n": 0, "zeros": zeros, "w_plus": 0.0, "w_minus": 0.0, "p": 1.0}
    ranks = _midranks([abs(d) for d in nonzero])
    doubled = [round(2 * r) for r in ranks]
    w_plus2 = sum(r for r, d in zip(doubled, nonzero) if d > 0)
    counts = signed_rank_distribution(doubled)
    total = 2 ** len(nonzero)
    lower = sum(counts[: w_plus2 + 1]) / total
    upper = sum(counts[w_plus2:]) / total
    return {
        "n": len(nonzero),
        "zeros": zeros,
        "w_plus": w_plus2 / 2,
        "w_minus": sum(doubled) / 2 - w_plus2 / 2,
        "p": min(1.0, 2 * min(lower, upper)),
    }


def paired_t_test(differences: Sequence[float]) -> float:
    """Two-sided p of the paired Student-t test of mean difference 0 (1.0 for identical pairs; 0.0 for a constant
    non-zero difference)."""
    n = len(differences)
    if n < 2:
        return 1.0
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(n))
    return min(1.0, 2 * (1 - t_cdf(abs(t), n - 1)))


def paired_bootstrap(differences: Sequence[float], level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile interval at `level` of the mean difference, resampling seeds (pairs) with replacement.

    Deterministic for a given `seed`: the same resampled seed indices are used for every comparison of the same
    size (common random numbers), so intervals of different cells are comparable.
    """
    import torch

    values = torch.tensor([float(d) for d in differences], dtype=torch.float64)
    n = values.numel()
    if n == 0:
        raise ValueError("paired_bootstrap needs at least one difference")
    if not 0 < level < 1 or resamples < 1:
        raise ValueError(f"need 0 < level < 1 and resamples >= 1, got {level}, {resamples}")
    generator = torch.Generator().manual_seed(int(seed))
    index = torch.randint(0, n, (int(resamples), n), generator=generator)
    means = values[index].mean(-1).sort().values
    alpha = (1 - level) / 2
    low = means[max(0, math.floor(alpha * resamples))]
    high = means[min(resamples - 1, math.ceil((1 - alpha) * resamples) - 1)]
    return float(low), float(high)


def compare_paired(a: Sequence[float], b: Sequence[float], level: float = 0.95, resamples: int = 10_000, seed: int = 0) -> dict:
    """Everything about one paired comparison a - b across seeds (lower is better for every ICL metric)."""
    differences = paired_differences(a, b)
    low, high = paired_bootstrap(differences, level, resamples, seed)
    wilcoxon = wilcoxon_signed_rank(differences)
    sign = sign_test(differences)
    return {
        "a": [float(x) for x in a],
        "b": [float(y) for y in b],
        "differences": differences,
        "mean_a": sum(map(float, a)) / len(a),
        "mean_b": sum(map(float, b)) / len(b),
        "mean_difference": sum(differences) / len(differences),
        "low": low,
        "high": high,
        "level": level,
        "seeds": len(differences),
        "lower": sign["negative"],  # seeds where a < b
        "higher": sign["positive"],
        "ties": sign["zeros"],
        "wilcoxon_p": wilcoxon["p"],
        "w_plus": wilcoxon["w_plus"],
        "w_minus": wilcoxon["w_minus"],
        "sign_p": sign["p"],
    }


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given): controls the family-wise error rate."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def normal_cdf(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def paired_t_power(effect: float, sd: float, seeds: int, alpha: float = 0.05) -> float:
    """The power of the two-sided paired t-test at `alpha` with `seeds` pairs against a true mean difference of
    size `effect` when the differences have standard deviation `sd` (the usual normal approximation of the
    noncentral t: P(|T| > t_crit) ~ Phi(delta - t_crit) + Phi(-delta - t_crit), delta = effect sqrt(n) / sd).
    The exact signed-rank test needs about 5% more seeds for the same power (its efficiency is 3/pi)."""
    if seeds < 2 or sd <= 0:
        raise ValueError(f"need seeds >= 2 and sd > 0, got {seeds}, {sd}")
    delta = abs(effect) * math.sqrt(seeds) / sd
    critical = t_quantile(1 - alpha / 2, seeds - 1)
    return normal_cdf(delta - critical) + normal_cdf(-delta - critical)


def seeds_for_power(effect: float, sd: float, power: float = 0.8, alpha: float = 0.05, most: int = 10_000) -> int:
    """The fewest paired seeds whose paired t-test reaches `power` (paired_t_power); `most` if none does."""
    for seeds in range(2, most + 1):
        if paired_t_power(effect, sd, seeds, alpha) >= power:
            return seeds
    return most


def smallest_p(seeds: int) -> float:
    """The smallest two-sided p-value an exact sign or signed-rank test can give with `seeds` pairs: 2 / 2^n."""
    return min(1.0, 2.0 / 2**seeds)


# --------------------------------------------------------------------------------------------------
# The verdict rule (the one implementation: ssa_hf.reproduce and the ICL report both read it from here)
# --------------------------------------------------------------------------------------------------

REPRODUCED, NOT_REPRODUCED = "reproduced at this scale", "not reproduced at this scale"
INCONCLUSIVE, NOT_MEASURABLE = "inconclusive at this scale", "not measurable at this scale"
EXCLUDED = "paper-sized effect excluded at this scale"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, EXCLUDED, INCONCLUSIVE, NOT_MEASURABLE)


def standard_error(values: Sequence[float]) -> float:
    """The standard error of the mean across seeds (0 for a single value)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / math.sqrt(len(values))


def beats_baseline(mean: float, se: float | None, baseline: float, direction: str) -> bool | None:
    """Whether an arm's mean beats the trivial baseline by more than one standard error `se` on the better side of
    `direction` (lower: errors, NLL; higher: accuracies). With `se` None only a mean on the baseline's side or at it
    decides (False); else None (unknown)."""
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', got {direction!r}")
    if mean is None or not math.isfinite(mean):
        return False
    margin = (baseline - mean) if direction == "lower" else (mean - baseline)
    if se is None:
        return False if margin <= 0 else None
    return margin > se


def arm_beats_baseline(values: Sequence[float], baseline: float | None, direction: str) -> bool | None:
    """`beats_baseline` of one arm's per-seed values (None: no baseline, nothing to decide). A non-finite value
    (a diverged run) does not beat it."""
    if baseline is None:
        return None
    values = [float(v) for v in values]
    if not values or not all(math.isfinite(v) for v in values):
        return False
    return beats_baseline(sum(values) / len(values), standard_error(values), baseline, direction)


def measurable(control: bool | None, treatment: bool | None) -> bool | None:
    """A comparison is measurable at its scale unless BOTH arms sit at the trivial baseline (each arm's
    `beats_baseline`): the paper's kind of effect can be SSA leaving a baseline the control sits at. None: no
    baseline to decide by (counted as measurable)."""
    if control is None and treatment is None:
        return None
    return bool(control) or bool(treatment)


def inside_margin(low: float | None, high: float | None, margin: float | None) -> bool:
    """Whether the interval [low, high] of the difference lies strictly inside (-margin, +margin): a difference as
    large as the margin is excluded (the interval version of two one-sided tests)."""
    if margin is None or low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return False
    return -margin < low and high < margin


def verdict(low: float | None, high: float | None, direction: str, p: float | None, alpha: float = 0.05,
            is_measurable: bool | None = True, margin: float | None = None) -> str:
    """The verdict of a primary endpoint, treatment minus control, whose paper direction is `direction`:

    - not measurable at this scale: both arms sit at the trivial baseline (`measurable` False);
    - reproduced at this scale: the declared test's `p` < alpha AND the interval excludes 0 on the paper's side;
    - not reproduced at this scale: p < alpha AND the interval excludes 0 on the other side (SSA worse);
    - paper-sized effect excluded at this scale: neither, and the interval lies inside +-`margin` (the declared
      equivalence margin, e.g. half the paper's effect);
    - inconclusive at this scale: anything else.
    The interval alone never reads reproduced: the test must reject too."""
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', got {direction!r}")
    if low is not None and high is not None and low > high:
        raise ValueError(f"interval out of order: [{low}, {high}]")
    if margin is not None and not margin > 0:
        raise ValueError(f"an equivalence margin must be > 0, got {margin}")
    if is_measurable is False:
        return NOT_MEASURABLE
    finite = low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
    if p is not None and finite and p < alpha:
        below, above = high < 0, low > 0
        if (below and direction == "lower") or (above and direction == "higher"):
            return REPRODUCED
        if below or above:
            return NOT_REPRODUCED
    if inside_margin(low, high, margin):
        return EXCLUDED
    return INCONCLUSIVE


def at_bound(control_mean: float, treatment_mean: float, floor: float | None, ceiling: float | None) -> str | None:
    """"floor" when both arms sit at or below `floor`, "ceiling" when both sit at or above `ceiling` (declared
    bounds, e.g. of a Zorro paradigm's accuracy): no difference of the paper's kind can show there; else None."""
    if floor is not None and control_mean <= floor and treatment_mean <= floor:
        return "floor"
    if ceiling is not None and control_mean >= ceiling and treatment_mean >= ceiling:
        return "ceiling"
    return None


def survives(verdict_word: str, low: float | None, high: float | None, direction: str, adjusted_p: float | None,
             alpha: float = 0.05, is_measurable: bool | None = True, margin: float | None = None) -> bool | None:
    """Whether a verdict that a test decided (reproduced / not reproduced) stays the same with the family-wise
    adjusted p (Holm); None for verdicts no test decided (inconclusive, not measurable, excluded by the interval)."""
    if verdict_word not in (REPRODUCED, NOT_REPRODUCED):
        return None
    return verdict(low, high, direction, adjusted_p, alpha, is_measurable, margin) == verdict_word


# --------------------------------------------------------------------------------------------------
# The ICL experiment's comparisons: every pair of scoring functions, every cell, and the primary endpoint
# --------------------------------------------------------------------------------------------------

QUANTIFIER_CELLS = (("sigma_sweep", "standard"), ("sigma_sweep", "balanced"), ("length_sweep", "standard"), ("length_sweep", "balanced"))


def _by_seed(runs: list[dict], task: str, scoring: str) -> dict[int, dict]:
    return {r["seed"]: r["eval"] for r in runs if r["task"] == task and r["scoring"] == scoring}


def _cells(evaluation: dict, task_is_quantifier: bool) -> list[tuple[dict, float]]:
    """(description, value) of every secondary cell of one run's evaluation, in a fixed order."""
    out = []
    if not task_is_quantifier:
        grid = evaluation["grid"]
        for r, sx in enumerate(grid["sigmas_x"]):
            for c, sab in enumerate(grid["sigmas_ab"]):
                out.append(({"sweep": "grid", "metric": "mse", "sigma_x": sx, "sigma_ab": sab}, grid["mse"][r][c]))
        return out
    for sweep, test_set in QUANTIFIER_CELLS:
        if test_set not in evaluation[sweep]:
            continue
        for value, cell in zip(evaluation[sweep]["values"], evaluation[sweep][test_set]):
            out.append(({"sweep": sweep, "test_set": test_set, "metric": "sequence_error", "value": value}, cell["sequence_error"]))
    return out


def endpoint_value(evaluation: dict, primary, zero_mse: list[list[float]] | None = None) -> float:
    """One run's value of the declared endpoint: the mean of the metric over the selected cells.

    Metric `log_mse_ratio` (linear grid): per cell log(MSE / MSE of always predicting 0), `zero_mse` being that
    baseline's grid on the same prompts; 0 means no better than predicting 0, log(1e-3) a thousand times better.
    Averaging logs keeps one large-sigma cell from dominating, as the raw MSE is dominated by its largest cell."""
    def inside(v: float) -> bool:
        return v >= primary.min_value and (primary.max_value is None or v <= primary.max_value)

    if primary.sweep == "grid":
        grid = evaluation["grid"]
        if primary.metric == "log_mse_ratio":
            if zero_mse is None:
                raise ValueError("the log_mse_ratio endpoint needs the predict-0 baseline's grid (zero_mse)")
            values = [math.log(max(m, 1e-300) / z) for sx, row, zero_row in zip(grid["sigmas_x"], grid["mse"], zero_mse)
                      if inside(sx) for m, z in zip(row, zero_row)]
        else:
            values = [m for sx, row in zip(grid["sigmas_x"], grid["mse"]) if inside(sx) for m in row]
    else:
        sweep = evaluation[primary.sweep]
        values = [cell[primary.metric] for v, cell in zip(sweep["values"], sweep[primary.test_set]) if inside(v)]
    if not values:
        raise ValueError(f"the primary endpoint selects no cell of this evaluation ({primary.describe()})")
    return sum(values) / len(values)


def _pair(runs, task, a, b):
    first, second = _by_seed(runs, task, a), _by_seed(runs, task, b)
    seeds = sorted(set(first) & set(second))
    return seeds, [first[s] for s in seeds], [second[s] for s in seeds]


def paired_comparisons(config, runs: list[dict]) -> dict:
    """{"primary": ..., "secondary": [...], "tasks": {task: [comparison, ...]}}: every comparison paired by seed
    (see module doc); the per-cell comparisons of "tasks" are descriptive.

    `config` is an ICLConfig; `runs` the runs' results (each with task, scoring, seed, eval).
    """
    from .registry import get_task

    stats = config.stats
    options = {"level": stats.level, "resamples": stats.bootstrap_resamples, "seed": stats.bootstrap_seed}
    out: dict = {"primary": None, "tasks": {}, "level": stats.level}
    for task in config.tasks:
        comparisons = []
        for a, b in stats.pairs(config.attention_scoring):
            seeds, evals_a, evals_b = _pair(runs, task, a, b)
            if not seeds:
                continue
            cells_a = [_cells(e, get_task(task).is_quantifier) for e in evals_a]
            cells_b = [_cells(e, get_task(task).is_quantifier) for e in evals_b]
            cells = []
            for i, (where, _) in enumerate(cells_a[0]):
                result = compare_paired([c[i][1] for c in cells_a], [c[i][1] for c in cells_b], **options)
                cells.append({**where, **result})
            entry = {"a": a, "b": b, "seeds": seeds, "cells": cells}
            primary = stats.primary
            if primary is not None and primary.task == task and stats.primary_applies(config.attention_scoring, config.tasks) is None:
                entry["endpoint"] = compare_paired([endpoint_value(e, primary) for e in evals_a],
                                                   [endpoint_value(e, primary) for e in evals_b], **options)
            comparisons.append(entry)
        # the cells are descriptive (nominal p, no correction, no verdict): the declared endpoints are the tests
        out["tasks"][task] = comparisons
    reason = stats.primary_applies(config.attention_scoring, config.tasks)
    seen = set(stats.seen_seeds)
    out["primary"] = _primary(stats.primary, runs, options, seen) if reason is None else {"skipped": reason}
    out["secondary"] = [_secondary(endpoint, runs, options, seen) for endpoint in stats.secondary
                        if endpoint.task in config.tasks and {endpoint.treatment, endpoint.control} <= set(config.attention_scoring)]
    return out


def _secondary(endpoint, runs, options, seen) -> dict:
    """A declared secondary endpoint, or why it was not evaluated (e.g. the sweep was overridden and no longer
    reaches its cells)."""
    try:
        return _primary(endpoint, runs, options, seen)
    except ValueError as error:
        return {"skipped": str(error), "description": endpoint.describe()}


def _primary(primary, runs, options, seen: set[int] = frozenset()) -> dict:
    """One declared endpoint: the paired comparison, its declared test and a paired t interval; `direction` is
    lower / higher only when the test rejects at alpha AND the t interval lies on that side of 0 (`verdict`), else
    none. `exploratory`: some seed had been seen when the endpoint was chosen."""
    seeds, evals_t, evals_c = _pair(runs, primary.task, primary.treatment, primary.control)
    if not seeds:
        raise ValueError(f"no seed has runs of both {primary.treatment} and {primary.control} on {primary.task!r}")
    result = compare_paired([endpoint_value(e, primary) for e in evals_t], [endpoint_value(e, primary) for e in evals_c], **options)
    p = result["wilcoxon_p"] if primary.test == "wilcoxon" else result["sign_p"]
    t = mean_ci(result["differences"], options["level"])
    # the verdict rule above: a direction only where it would read reproduced or not reproduced for either side
    word = verdict(t["low"], t["high"], "lower", p, primary.alpha)
    direction = {REPRODUCED: "lower", NOT_REPRODUCED: "higher"}.get(word, "none")
    return {
        **result,
        "t_low": t["low"],
        "t_high": t["high"],
        "declared": {k: getattr(primary, k) for k in primary.__dataclass_fields__},
        "description": primary.describe(),
        "seed_list": seeds,
        "test": primary.test,
        "p": p,
        "alpha": primary.alpha,
        "significant": direction != "none",
        "direction": direction,
        "exploratory": bool(seen & set(seeds)),
        "smallest_possible_p": smallest_p(result["seeds"]),
    }
