"""The one verdict rule of RESULTS.md: a declared test and the interval must agree; a scale that cannot measure
says so; the paired t interval covers at the seed counts used (a small seeded simulation)."""

from __future__ import annotations

import math
import random

import pytest

from ssa_hf.icl import stats
from ssa_hf.icl.stats import (arm_beats_baseline, at_bound, beats_baseline, mean_ci, paired_bootstrap, paired_t_power,
                              paired_t_test, seeds_for_power, survives)
from ssa_hf.reproduce import (EXCLUDED, INCONCLUSIVE, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, VERDICTS,
                              measurable, paired_comparison, verdict)
from ssa_hf.reproduce.verdict import exploratory_reading


@pytest.mark.parametrize("low,high,direction,p,expected", [
    (-0.3, -0.1, "lower", 0.01, REPRODUCED),        # the test rejects and the interval is on the paper's side
    (0.1, 0.3, "higher", 0.01, REPRODUCED),
    (0.1, 0.3, "lower", 0.01, NOT_REPRODUCED),      # rejects on the other side: SSA worse
    (-0.3, -0.1, "higher", 0.01, NOT_REPRODUCED),
    (-0.3, -0.1, "lower", 0.084, INCONCLUSIVE),     # the interval alone never decides (the audit's temperature row)
    (-0.3, 0.1, "lower", 0.01, INCONCLUSIVE),       # test and interval disagree
    (-0.1, 0.2, "higher", 0.5, INCONCLUSIVE),
    (None, None, "lower", 0.01, INCONCLUSIVE),
    (-math.inf, -1.0, "lower", 0.01, INCONCLUSIVE),
    (-0.3, -0.1, "lower", None, INCONCLUSIVE),      # no test, no verdict word
])
def test_verdict_needs_the_test_and_the_interval(low, high, direction, p, expected):
    assert verdict(low, high, direction, p, 0.05) == expected


def test_a_row_with_p_at_or_above_alpha_never_reads_reproduced():
    rng = random.Random(0)
    for _ in range(2000):
        low = rng.uniform(-1, 1)
        high = low + rng.uniform(0, 1)
        p = rng.uniform(0.05, 1.0)
        for direction in ("lower", "higher"):
            assert verdict(low, high, direction, p, 0.05) not in (REPRODUCED, NOT_REPRODUCED)


def test_the_rule_is_written_once():
    # ssa_hf.reproduce reads the verdict rule from ssa_hf.icl.stats (the ICL report uses it there too)
    assert verdict is stats.verdict and measurable is stats.measurable
    assert all(word.endswith("at this scale") for word in VERDICTS)


def test_an_arm_at_the_baseline_does_not_beat_it():
    # an arm that answers like the trivial baseline (BoolQ's always-"no" 0.353 below the 0.622 majority; an ICL
    # model at the majority answer's error) does not beat it
    assert arm_beats_baseline([0.353] * 6, 0.622, "higher") is False
    assert arm_beats_baseline([0.5, 0.5, 0.5], 0.5, "lower") is False
    # within one standard error of the baseline still does not; clearly beyond it does
    assert arm_beats_baseline([0.50, 0.52, 0.48, 0.51], 0.5, "higher") is False
    assert arm_beats_baseline([0.02, 0.03, 0.01], 0.6, "lower") is True
    assert arm_beats_baseline([0.7, 0.72, 0.71], 0.5, "higher") is True
    assert arm_beats_baseline([0.7], None, "higher") is None  # no baseline: nothing to decide
    assert arm_beats_baseline([0.7, float("nan")], 0.5, "higher") is False
    # from a mean alone: only a mean on the baseline's side decides
    assert beats_baseline(0.29, None, 0.35, "higher") is False and beats_baseline(0.40, None, 0.35, "higher") is None


def test_not_measurable_only_when_both_arms_sit_at_the_baseline():
    both = measurable(arm_beats_baseline([0.291, 0.29, 0.292], 0.353, "higher"),
                      arm_beats_baseline([0.289, 0.288, 0.29], 0.353, "higher"))
    assert both is False and verdict(-0.3, -0.1, "higher", 0.001, 0.05, both) == NOT_MEASURABLE
    # the paper's kind of effect: the control at chance, SSA leaving it
    leaves = measurable(arm_beats_baseline([0.29, 0.291, 0.293], 0.353, "higher"),
                        arm_beats_baseline([0.42, 0.425, 0.43], 0.353, "higher"))
    assert leaves is True and verdict(0.12, 0.14, "higher", 0.001, 0.05, leaves) == REPRODUCED
    assert measurable(True, False) is True and measurable(None, None) is None


def test_an_interval_inside_the_margin_excludes_a_paper_sized_effect():
    # the CPU lm-eval interval against half the paper's +0.133
    assert verdict(-0.0088, 0.0044, "higher", 0.47, 0.05, True, 0.0667) == EXCLUDED
    assert verdict(-0.0088, 0.0044, "higher", 0.47, 0.05, True, None) == INCONCLUSIVE   # no margin declared
    assert verdict(-0.0088, 0.08, "higher", 0.47, 0.05, True, 0.0667) == INCONCLUSIVE   # crosses it
    # a significant difference keeps its direction even inside the margin; both arms at chance stay not measurable
    assert verdict(0.001, 0.004, "higher", 0.01, 0.05, True, 0.0667) == REPRODUCED
    assert verdict(-0.004, -0.001, "higher", 0.01, 0.05, True, 0.0667) == NOT_REPRODUCED
    assert verdict(-0.0088, 0.0044, "higher", 0.47, 0.05, False, 0.0667) == NOT_MEASURABLE
    with pytest.raises(ValueError, match="margin"):
        verdict(-0.1, 0.1, "lower", 0.5, 0.05, True, 0.0)


def test_survival_under_holm():
    assert survives(REPRODUCED, -0.2, -0.1, "lower", 0.001) is True
    assert survives(NOT_REPRODUCED, 0.1, 0.2, "lower", 0.19) is False  # the CPU perplexity row: Holm p 0.19
    assert survives(INCONCLUSIVE, -0.1, 0.2, "lower", 0.9) is None      # no test decided it
    assert survives(EXCLUDED, -0.01, 0.01, "lower", 0.9, True, 0.05) is None


def test_floor_and_ceiling():
    assert at_bound(50.1, 50.0, 60, 95) == "floor" and at_bound(100, 100, 60, 95) == "ceiling"
    assert at_bound(55.1, 64.9, 60, 95) is None   # SSA left the floor: measurable
    assert at_bound(92.2, 99.7, 60, 95) is None and at_bound(50, 50, None, None) is None


def test_exploratory_rows_carry_no_verdict_word():
    text = exploratory_reading(0.084, "wilcoxon")
    assert text == "exploratory, nominal p = 0.084 (Wilcoxon signed-rank)"
    assert not any(word in text for word in (REPRODUCED, INCONCLUSIVE))
    assert exploratory_reading(0.5, "t", False).endswith("not measurable at this scale")


def test_bad_arguments():
    with pytest.raises(ValueError, match="direction"):
        verdict(0, 1, "down", 0.01)
    with pytest.raises(ValueError, match="out of order"):
        verdict(1.0, 0.0, "lower", 0.01)


def test_paired_t_interval_and_test_use_the_differences():
    treatment, control = [1.0, 2.0, 3.0], [1.5, 2.6, 3.4]  # differences -0.5, -0.6, -0.4
    result = paired_comparison(treatment, control, "t")
    assert result["mean_difference"] == pytest.approx(-0.5) and result["sd"] == pytest.approx(0.1)
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t(2, 0.975) = 4.303, sd 0.1, n 3
    assert result["low"] == pytest.approx(-0.5 - half, rel=1e-6) and result["high"] == pytest.approx(-0.5 + half, rel=1e-6)
    # t = -0.5 / (0.1 / sqrt 3) = -8.66 with 2 df: two-sided p = 0.01307 (scipy.stats.ttest_1samp)
    assert result["t_p"] == pytest.approx(0.013072, rel=1e-3)
    assert verdict(result["low"], result["high"], "lower", result["t_p"]) == REPRODUCED
    # with 3 seeds the exact Wilcoxon cannot go below 0.25: the same data, tested with it, is inconclusive
    assert verdict(result["low"], result["high"], "lower", result["wilcoxon_p"]) == INCONCLUSIVE
    assert paired_t_test([0.0, 0.0]) == 1.0 and paired_t_test([0.2, 0.2]) == 0.0


def test_a_diverged_run_gives_no_interval():
    result = paired_comparison([1.0, float("nan")], [1.0, 2.0])
    assert result["low"] is None and verdict(result["low"], result["high"], "lower", result["t_p"]) == INCONCLUSIVE


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_the_paired_t_interval_covers_at_nominal_level(seeds):
    # normal differences around a true mean of 0.3: the 95% t interval must cover it 95% +- 2 points
    rng = random.Random(seeds)
    trials = 4000
    covered = 0
    for _ in range(trials):
        ci = mean_ci([rng.gauss(0.3, 1.0) for _ in range(seeds)], 0.95)
        covered += ci["low"] <= 0.3 <= ci["high"]
    assert abs(covered / trials - 0.95) <= 0.02


def test_the_percentile_bootstrap_undercovers_at_few_seeds():
    # why the t interval is the default: the percentile bootstrap covers ~76% at 3 seeds (nominal 95%)
    rng = random.Random(3)
    trials = 400
    covered = sum(low <= 0.3 <= high for low, high in
                  (paired_bootstrap([rng.gauss(0.3, 1.0) for _ in range(3)], resamples=400, seed=t) for t in range(trials)))
    assert covered / trials < 0.85


def test_power_calculation():
    # 80% power against an effect of one SD needs about 10 pairs (paired t, alpha 0.05; the textbook n is 10)
    assert seeds_for_power(1.0, 1.0) in (10, 11)
    assert paired_t_power(1.0, 1.0, 10) == pytest.approx(0.80, abs=0.03)
    assert seeds_for_power(0.141, 0.180) == 15  # the `every` figures of reproduce_cpu.yaml's comment
    assert paired_t_power(0.0, 1.0, 20) < 0.05  # no effect: at most the level (the approximation errs low)
