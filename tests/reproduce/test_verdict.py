"""The verdict rule of RESULTS.md and the paired comparison behind it."""

from __future__ import annotations

import math

import pytest

from ssa_hf.reproduce import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, paired_comparison, verdict


@pytest.mark.parametrize("low,high,direction,expected", [
    (-0.3, -0.1, "lower", REPRODUCED),        # interval below 0, the paper says lower: reproduced
    (0.1, 0.3, "higher", REPRODUCED),
    (0.1, 0.3, "lower", NOT_REPRODUCED),      # excludes 0 on the other side: SSA worse
    (-0.3, -0.1, "higher", NOT_REPRODUCED),
    (-0.1, 0.2, "lower", INCONCLUSIVE),       # contains 0
    (-0.1, 0.2, "higher", INCONCLUSIVE),
    (None, None, "lower", INCONCLUSIVE),
    (-math.inf, -1.0, "lower", INCONCLUSIVE),
])
def test_verdict_from_the_interval(low, high, direction, expected):
    assert verdict(low, high, direction) == expected


def test_a_declared_test_must_also_reject():
    assert verdict(-0.3, -0.1, "lower", p=0.01, alpha=0.05) == REPRODUCED
    assert verdict(-0.3, -0.1, "lower", p=0.25, alpha=0.05) == INCONCLUSIVE
    assert verdict(0.1, 0.3, "lower", p=0.01, alpha=0.05) == NOT_REPRODUCED


def test_a_margin_turns_a_tight_null_into_not_reproduced():
    assert verdict(-0.01, 0.02, "lower", margin=0.05) == NOT_REPRODUCED
    assert verdict(-0.01, 0.08, "lower", margin=0.05) == INCONCLUSIVE
    assert verdict(-0.3, -0.1, "lower", margin=0.05) == REPRODUCED


def test_bad_arguments():
    with pytest.raises(ValueError, match="direction"):
        verdict(0, 1, "down")
    with pytest.raises(ValueError, match="out of order"):
        verdict(1.0, 0.0, "lower")


def test_paired_t_interval_uses_the_differences():
    treatment, control = [1.0, 2.0, 3.0], [1.5, 2.6, 3.4]  # differences -0.5, -0.6, -0.4
    result = paired_comparison(treatment, control, "t")
    assert result["mean_difference"] == pytest.approx(-0.5)
    # t(2, 0.975) = 4.303, sd 0.1, n 3
    half = 4.302652729911275 * 0.1 / math.sqrt(3)
    assert result["low"] == pytest.approx(-0.5 - half, rel=1e-6) and result["high"] == pytest.approx(-0.5 + half, rel=1e-6)
    assert result["interval"] == "t" and result["lower"] == 3 and result["seeds"] == 3
    assert verdict(result["low"], result["high"], "lower") == REPRODUCED
    # the arms alone overlap widely: only the pairing shows the effect
    boot = paired_comparison(treatment, control, "bootstrap")
    assert boot["interval"] == "bootstrap" and boot["high"] < 0


def test_a_diverged_run_gives_no_interval():
    result = paired_comparison([1.0, float("nan")], [1.0, 2.0])
    assert result["low"] is None and verdict(result["low"], result["high"], "lower") == INCONCLUSIVE
