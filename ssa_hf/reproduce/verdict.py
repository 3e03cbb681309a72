"""Paired comparisons of two arms across seeds, and the verdict rule of RESULTS.md.

Every comparison is treatment minus control, paired by seed (the same seed gives both arms the same data, prompts
and initial weights). Its interval is either a Student-t interval of the mean paired difference (the default for
the language-model claims: with 3 seeds a bootstrap interval is just the range of the resampled means and far too
narrow) or the paired bootstrap of ssa_hf.icl.stats (the ICL report's, with >= 10 seeds). Exact Wilcoxon
signed-rank and sign tests are reported beside it.

The verdict, for a claim whose paper direction is `lower` (or `higher`) for treatment minus control:
- reproduced: the interval excludes 0 on the paper's side (and the declared test, where there is one, has
  p < alpha);
- not reproduced: the interval excludes 0 on the other side (the treatment is worse), or a declared margin
  holds the whole interval (any effect is smaller than the margin);
- inconclusive at this scale: anything else (the interval contains 0 and is wider than the margin).
"""

from __future__ import annotations

import math
from typing import Sequence

from ..icl.stats import compare_paired, mean_ci

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive at this scale"


def paired_comparison(treatment: Sequence[float], control: Sequence[float], interval: str = "t", level: float = 0.95,
                      resamples: int = 10_000, seed: int = 0) -> dict:
    """compare_paired's figures (differences, tests, bootstrap interval) with `low`/`high` the chosen interval
    of the mean difference and `interval` naming it. Non-finite values (a diverged run) make the interval None."""
    values = [float(v) for v in list(treatment) + list(control)]
    if not all(math.isfinite(v) for v in values):
        differences = [float(a) - float(b) for a, b in zip(treatment, control)]
        return {"a": list(map(float, treatment)), "b": list(map(float, control)), "differences": differences,
                "mean_a": sum(map(float, treatment)) / len(treatment), "mean_b": sum(map(float, control)) / len(control),
                "mean_difference": float("nan"), "low": None, "high": None, "interval": interval, "level": level,
                "seeds": len(differences), "wilcoxon_p": None, "sign_p": None, "note": "a non-finite value"}
    result = compare_paired(treatment, control, level=level, resamples=resamples, seed=seed)
    result["bootstrap"] = [result["low"], result["high"]]
    if interval == "t":
        t = mean_ci(result["differences"], level=level)
        result["low"], result["high"] = t["low"], t["high"]
    elif interval != "bootstrap":
        raise ValueError(f"interval must be 't' or 'bootstrap', got {interval!r}")
    result["interval"] = interval
    return result


def verdict(low: float | None, high: float | None, direction: str, p: float | None = None, alpha: float = 0.05,
            margin: float | None = None) -> str:
    """The verdict for an interval [low, high] of treatment minus control (see the module doc)."""
    if direction not in ("lower", "higher"):
        raise ValueError(f"direction must be 'lower' or 'higher', got {direction!r}")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return INCONCLUSIVE
    if low > high:
        raise ValueError(f"interval bounds out of order: [{low}, {high}]")
    better = high < 0 if direction == "lower" else low > 0
    worse = low > 0 if direction == "lower" else high < 0
    significant = p is None or p < alpha
    if better and significant:
        return REPRODUCED
    if worse and significant:
        return NOT_REPRODUCED
    if margin is not None and -margin < low and high < margin:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def describe_rule(level: float, alpha: float) -> str:
    return (f"Each comparison is SSA minus softmax (treatment minus control), paired by seed, with a {100 * level:g}% "
            "interval of the mean difference (Student-t over seeds unless marked 'bootstrap', the ICL report's paired "
            f"bootstrap). **Reproduced**: the interval excludes 0 on the paper's side (and, where a test is declared, "
            f"its p < {alpha:g}). **Not reproduced**: the interval excludes 0 on the other side (SSA worse), or a "
            "declared margin holds the whole interval. **Inconclusive at this scale**: the interval contains 0. "
            "Only each claim's primary endpoint (declared in the config before the run) is confirmatory; the other "
            "rows are exploratory and not corrected for multiplicity.")
