"""Paired comparisons of two arms across seeds and the words of RESULTS.md; the verdict rule itself is
ssa_hf.icl.stats.verdict (one implementation, used by the ICL report too).

Every comparison is treatment minus control, paired by seed (the same seed gives both arms the same data, prompts
and initial weights). Its interval is a paired Student-t interval of the mean difference (the default: its coverage
at 3, 5 and 10 seeds is nominal for normal differences, tests/reproduce/test_verdict.py), or the paired
percentile bootstrap of ssa_hf.icl.stats (which covers 76% / 83% / 89% of nominal 95% at 3 / 5 / 10 seeds: kept
only where a config asks for it, and marked). The exact Wilcoxon signed-rank and sign tests and the paired t-test
are computed for every row.

The verdict of a primary endpoint (ssa_hf.icl.stats.verdict), with its declared test at alpha:
- not measurable at this scale: BOTH arms sit at the trivial baseline (neither beats it by more than one standard
  error of its mean across seeds), so this scale shows nothing of the paper's kind;
- reproduced at this scale: the declared test rejects at alpha AND the interval excludes 0 on the paper's side;
- not reproduced at this scale: the declared test rejects AND the interval excludes 0 on the other side;
- paper-sized effect excluded at this scale: neither, and the interval lies inside the claim's declared
  equivalence margin (e.g. half the paper's effect);
- inconclusive at this scale: anything else.
Secondary endpoints never get these words: they read "exploratory, nominal p = ...".
"""

from __future__ import annotations

import math
from typing import Sequence

from ..icl.stats import (EXCLUDED, INCONCLUSIVE, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, VERDICTS,
                         arm_beats_baseline, at_bound, beats_baseline, compare_paired, inside_margin, mean_ci, measurable,
                         paired_t_test, smallest_p, standard_error, survives, verdict)

__all__ = ["EXCLUDED", "INCONCLUSIVE", "NOT_MEASURABLE", "NOT_REPRODUCED", "REPRODUCED", "TEST_NAMES", "VERDICTS",
           "arm_beats_baseline", "at_bound", "beats_baseline", "describe_rule", "exploratory_reading", "inside_margin",
           "measurable", "paired_comparison", "smallest_p", "standard_error", "survives", "test_p", "verdict"]

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


def exploratory_reading(p: float | None, test: str, is_measurable: bool | None = True) -> str:
    """What a secondary row says instead of a verdict."""
    text = "exploratory" + ("" if p is None else f", nominal p = {p:.3g} ({TEST_NAMES[test]})")
    return text + (f"; {NOT_MEASURABLE}" if is_measurable is False else "")


def describe_rule(level: float, alpha: float, multiplicity: str = "none", primaries: int | None = None) -> str:
    family = (f"Each primary endpoint is tested alone at alpha = {alpha:g} (no family-wise correction); the Holm-adjusted "
              f"p over the {primaries or 'all'} primary endpoints is shown beside it with whether the verdict survives "
              f"it, and with that many tests at {alpha:g} the chance of at least one false 'reproduced' when nothing is "
              f"real is up to {100 * (1 - (1 - alpha) ** (primaries or 1)):.0f}%."
              if multiplicity == "none" else
              f"The verdicts use Holm-adjusted p-values over the {primaries or 'all'} primary endpoints "
              f"(family-wise error at most {alpha:g}).")
    return (f"Each comparison is SSA minus the control (treatment minus control), paired by seed, with a {100 * level:g}% "
            "paired Student-t interval of the mean difference (marked 'bootstrap' where a config asks for the "
            "percentile bootstrap). Only the confirmatory seeds (declared in the config before their runs; never the "
            "seeds seen earlier) decide a verdict, and only on each claim's primary endpoint, with its declared test: "
            "**not measurable at this scale**: BOTH arms sit at the trivial baseline (chance or the majority answer "
            "of the full evaluation split, predicting 0, the uniform distribution; for ICL at sigma 1, in "
            "distribution): neither beats it by more than one standard error of its mean across seeds; "
            f"**reproduced at this scale**: the test has p < {alpha:g} AND the interval excludes 0 on the paper's side; "
            f"**not reproduced at this scale**: p < {alpha:g} AND the interval excludes 0 on the other side (SSA worse); "
            "**paper-sized effect excluded at this scale**: neither, and the interval lies inside the claim's declared "
            "equivalence margin (half the paper's effect); **inconclusive at this scale**: anything else. "
            f"{family} Secondary rows and exploratory seeds are exploratory: they show a nominal p and carry no verdict.")
