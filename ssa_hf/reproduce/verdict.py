"""Paired comparisons of two arms across seeds, the verdict rule of RESULTS.md, and when a scale cannot measure.

Every comparison is treatment minus control, paired by seed (the same seed gives both arms the same data, prompts
and initial weights). Its interval is a paired Student-t interval of the mean difference (the default: its coverage
at 3, 5 and 10 seeds is nominal for normal differences, tests/reproduce/test_verdict.py), or the paired
percentile bootstrap of ssa_hf.icl.stats (which covers 76% / 83% / 89% of nominal 95% at 3 / 5 / 10 seeds: kept
only where a config asks for it, and marked). The exact Wilcoxon signed-rank and sign tests and the paired t-test
are computed for every row.

The one verdict rule, for a primary endpoint whose paper direction is `lower` (or `higher`) for treatment minus
control, with its declared test at alpha:
- not measurable at this scale: the control arm does not beat the trivial baseline (chance, majority, predict-0)
  by more than one standard error of its mean across seeds (`measurable`), so no difference of the paper's kind
  can show; decided before looking at the treatment;
- reproduced: the declared test rejects at alpha AND the interval excludes 0 on the paper's side;
- not reproduced: the declared test rejects at alpha AND the interval excludes 0 on the other side (the treatment
  is worse);
- inconclusive at this scale: anything else.
Secondary endpoints never get these words: they read "exploratory, nominal p = ...".
"""

from __future__ import annotations

import math
from typing import Sequence

from ..icl.stats import compare_paired, mean_ci, paired_t_test

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive at this scale"
NOT_MEASURABLE = "not measurable at this scale"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_MEASURABLE)
TEST_NAMES = {"wilcoxon": "Wilcoxon signed-rank", "t": "paired t", "sign": "sign"}


def paired_comparison(treatment: Sequence[float], control: Sequence[float], interval: str = "t", level: float = 0.95,
                      resamples: int = 10_000, seed: int = 0) -> dict:
    """compare_paired's figures (differences, tests, bootstrap interval) with `low`/`high` the chosen interval
    of the mean difference and `interval` naming it, `sd` the SD of the differences and `t_p` the paired t-test.
    Non-finite values (a diverged run) make the interval and the tests None."""
    if interval not in ("t", "bootstrap"):
        raise ValueError(f"interval must be 't' or 'bootstrap', got {interval!r}")
    values = [float(v) for v in list(treatment) + list(control)]
    if not all(math.isfinite(v) for v in values):
        differences = [float(a) - float(b) for a, b in zip(treatment, control)]
        return {"a": list(map(float, treatment)), "b": list(map(float, control)), "differences": differences,
                "mean_a": sum(map(float, treatment)) / len(treatment), "mean_b": sum(map(float, control)) / len(control),
                "mean_difference": float("nan"), "low": None, "high": None, "interval": interval, "level": level,
                "seeds": len(differences), "wilcoxon_p": None, "sign_p": None, "t_p": None, "sd": None,
                "note": "a non-finite value"}
    result = compare_paired(treatment, control, level=level, resamples=resamples, seed=seed)
    result["bootstrap"] = [result["low"], result["high"]]
    t = mean_ci(result["differences"], level=level)
    result["sd"] = _sd(result["differences"])
    result["t_p"] = paired_t_test(result["differences"])
    if interval == "t":
        result["low"], result["high"] = t["low"], t["high"]
    result["interval"] = interval
    return result


def _sd(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_p(comparison: dict, test: str) -> float | None:
    """The p-value of the declared `test` (wilcoxon, t or sign) of a paired comparison."""
    key = {"wilcoxon": "wilcoxon_p", "t": "t_p", "sign": "sign_p"}.get(test)
    if key is None:
        raise ValueError(f"test must be one of {list(TEST_NAMES)}, got {test!r}")
    return comparison.get(key)


def measurable(control: Sequence[float], baseline: float | None, direction: str) -> bool | None:
    """Whether the control arm beats the trivial baseline by more than one standard error of its mean across
    seeds, on the better side of `direction` (lower: errors, MSE, NLL; higher: accuracies). None: no baseline
    (nothing to decide). An arm that sits at the baseline (an untrained model, an always-"no" answer) is not."""
    if baseline is None:
        return None
    values = [float(v) for v in control]
    if not values or not all(math.isfinite(v) for v in values):
        return False
    mean = sum(values) / len(values)
    se = (_sd(values) or 0.0) / math.sqrt(len(values))
    margin = (baseline - mean) if direction == "lower" else (mean - baseline)
    return margin > se


def verdict(low: float | None, high: float | None, direction: str, p: float | None, alpha: float = 0.05,
            is_measurable: bool | None = True) -> str:
    """The verdict of a primary endpoint (module doc): a declared test's `p` and the interval [low, high] of
    treatment minus control must agree; `is_measurable` False reads "not measurable at this scale"."""
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', got {direction!r}")
    if low is not None and high is not None and low > high:
        raise ValueError(f"interval out of order: [{low}, {high}]")
    if is_measurable is False:
        return NOT_MEASURABLE
    if p is None or low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return INCONCLUSIVE
    if p >= alpha:
        return INCONCLUSIVE
    below, above = high < 0, low > 0
    if (below and direction == "lower") or (above and direction == "higher"):
        return REPRODUCED
    if below or above:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def exploratory_reading(p: float | None, test: str, is_measurable: bool | None = True) -> str:
    """What a secondary row says instead of a verdict."""
    text = "exploratory" + ("" if p is None else f", nominal p = {p:.3g} ({TEST_NAMES[test]})")
    return text + ("; not measurable at this scale" if is_measurable is False else "")


def describe_rule(level: float, alpha: float, multiplicity: str = "none", primaries: int | None = None) -> str:
    family = (f"Each primary endpoint is tested alone at alpha = {alpha:g} (no family-wise correction); the Holm-adjusted "
              f"p over the {primaries or 'all'} primary endpoints is shown beside it, and with that many tests at "
              f"{alpha:g} the chance of at least one false 'reproduced' when nothing is real is up to "
              f"{100 * (1 - (1 - alpha) ** (primaries or 1)):.0f}%."
              if multiplicity == "none" else
              f"The verdicts use Holm-adjusted p-values over the {primaries or 'all'} primary endpoints "
              f"(family-wise error at most {alpha:g}).")
    return (f"Each comparison is SSA minus the control (treatment minus control), paired by seed, with a {100 * level:g}% "
            "paired Student-t interval of the mean difference (marked 'bootstrap' where a config asks for the "
            "percentile bootstrap). Only the confirmatory seeds (declared in the config before their runs; never the "
            "seeds seen earlier) decide a verdict, and only on each claim's primary endpoint, with its declared test: "
            f"**reproduced**: the test has p < {alpha:g} AND the interval excludes 0 on the paper's side; "
            f"**not reproduced**: p < {alpha:g} AND the interval excludes 0 on the other side (SSA worse); "
            "**inconclusive at this scale**: anything else; **not measurable at this scale**: the control arm does not "
            "beat the trivial baseline (chance, majority answer, predicting 0) by more than one standard error of its "
            "mean across seeds (for ICL: at sigma 1, in distribution), so no effect of the paper's kind can show. "
            f"{family} Secondary rows and exploratory seeds are exploratory: they show a nominal p and carry no verdict.")
