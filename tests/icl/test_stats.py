"""Paired statistics of the ICL experiments against hand-computed and brute-force values."""

import itertools
import random

import pytest

from ssa_hf.icl.config import PrimaryEndpoint, config_from_dict
from ssa_hf.icl.stats import (
    _midranks,
    compare_paired,
    endpoint_value,
    holm,
    mean_ci,
    paired_bootstrap,
    paired_comparisons,
    sign_test,
    smallest_p,
    wilcoxon_signed_rank,
)

from .fixtures import ssa_better_at_large_sigma_worse_when_long


@pytest.mark.parametrize(
    "differences, expected",
    [
        # n = 5: all of one sign is the most extreme of 2^5 sign patterns, twice (two-sided): 2/32
        ([0.1, 0.2, 0.3, 0.4, 0.5], 2 / 32),
        # n = 5, W- = 5: sign patterns with W+ <= 5 are {}, {1}..{5}, {1,2}, {1,3}, {1,4}, {2,3}: 10 of 32
        ([1, 2, 3, 4, -5], 2 * 10 / 32),
        # n = 10, all negative: 2/1024
        ([-k for k in range(1, 11)], 2 / 1024),
        # n = 10, ranks 1 and 2 negative (W- = 3): subsets of 1..10 summing to <= 3: {}, {1}, {2}, {3}, {1,2}
        ([-1, -2] + list(range(3, 11)), 2 * 5 / 1024),
    ],
)
def test_wilcoxon_exact_small_samples(differences, expected):
    assert wilcoxon_signed_rank(differences)["p"] == pytest.approx(expected, abs=1e-15)


def _brute_force_wilcoxon(differences):
    nonzero = [d for d in differences if d != 0]
    ranks = _midranks([abs(d) for d in nonzero])
    observed = sum(r for r, d in zip(ranks, nonzero) if d > 0)
    sums = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product((0, 1), repeat=len(nonzero))]
    lower = sum(s <= observed + 1e-9 for s in sums) / len(sums)
    upper = sum(s >= observed - 1e-9 for s in sums) / len(sums)
    return min(1.0, 2 * min(lower, upper))


@pytest.mark.parametrize("differences", [[1, 1, 2, -2, 3, -1, 0.5, 0.5], [0, 0, 0.25, -0.25, 0.5, 0.5, 0.5, 1, -1, 2], [0.0] * 4])
def test_wilcoxon_with_ties_and_zeros_matches_enumeration(differences):
    result = wilcoxon_signed_rank(differences)
    assert result["zeros"] == sum(d == 0 for d in differences)
    assert result["p"] == pytest.approx(_brute_force_wilcoxon(differences) if any(differences) else 1.0, abs=1e-12)


def test_wilcoxon_and_sign_test_match_scipy_without_ties():
    stats = pytest.importorskip("scipy.stats")  # an extra oracle where scipy is installed; the cases above are by hand
    rng = random.Random(0)
    for n in (5, 10, 12):
        for _ in range(20):
            d = [round(rng.gauss(0.3, 1), 4) for _ in range(n)]
            if len({abs(x) for x in d}) < n or 0 in d:
                continue
            assert wilcoxon_signed_rank(d)["p"] == pytest.approx(stats.wilcoxon(d, method="exact").pvalue, abs=1e-12)
            assert sign_test(d)["p"] == pytest.approx(stats.binomtest(sum(x > 0 for x in d), n).pvalue, abs=1e-12)


def test_sign_test_exact():
    assert sign_test([1] * 5)["p"] == pytest.approx(2 / 32)
    assert sign_test([1] * 10)["p"] == pytest.approx(2 / 1024)
    # 9 of 10 positive: P(X <= 1) = (1 + 10) / 1024, twice
    assert sign_test([1] * 9 + [-1])["p"] == pytest.approx(22 / 1024)
    result = sign_test([0, 0, 1, -1])
    assert (result["n"], result["zeros"], result["p"]) == (2, 2, 1.0)
    assert smallest_p(5) == 0.0625 and smallest_p(10) == pytest.approx(0.001953125)


def test_paired_bootstrap_interval_is_deterministic_and_covers():
    low, high = paired_bootstrap([1, 2, 3, 4, 5], resamples=2000, seed=3)
    assert low <= 3 <= high and (low, high) == paired_bootstrap([1, 2, 3, 4, 5], resamples=2000, seed=3)
    assert paired_bootstrap([2.0] * 6) == (2.0, 2.0)
    # coverage of the true mean over repeated samples of 10 pairs: near the nominal 95% (percentile intervals
    # under-cover a little at n = 10)
    rng = random.Random(1)
    covered = 0
    for trial in range(200):
        sample = [rng.gauss(0.3, 1.0) for _ in range(10)]
        low, high = paired_bootstrap(sample, resamples=1000, seed=trial)
        covered += low <= 0.3 <= high
    assert 0.85 <= covered / 200 <= 0.99


def test_holm_adjustment():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # adjusted values never decrease along the sorted order
    assert holm([]) == []


def test_compare_paired_counts_sides():
    result = compare_paired([0.1, 0.2, 0.3, 0.3], [0.2, 0.4, 0.1, 0.3], resamples=500)
    assert result["differences"] == pytest.approx([-0.1, -0.2, 0.2, 0.0])
    assert (result["lower"], result["higher"], result["ties"], result["seeds"]) == (2, 1, 1, 4)
    assert result["mean_difference"] == pytest.approx(-0.025)
    with pytest.raises(ValueError, match="same number of seeds"):
        compare_paired([0.1], [0.1, 0.2])


def _config(seeds=10, **primary):
    return config_from_dict({"scoring": ["softmax", "ssa"], "seeds": list(range(seeds)),
                             "eval": {"sigmas": [1, 12, 29], "lengths": [10, 200]},
                             "stats": {"primary": primary, "bootstrap_resamples": 1000}})


def test_primary_endpoint_from_fixture():
    runs = ssa_better_at_large_sigma_worse_when_long()
    primary = PrimaryEndpoint(min_value=12)
    # softmax seed 3: mean of the balanced errors at sigma 12 and 29 = (0.403 + 0.603) / 2
    assert endpoint_value(runs[6]["eval"], primary) == pytest.approx(0.503)
    result = paired_comparisons(_config(), runs)["primary"]
    assert result["mean_difference"] == pytest.approx(0.15 - (0.5 + 0.0045))
    assert (result["lower"], result["seeds"], result["p"]) == (10, 10, pytest.approx(2 / 1024))
    assert result["significant"] and result["direction"] == "lower"
    # with 5 seeds the same data cannot reach p < 0.05
    five = paired_comparisons(_config(seeds=5), [r for r in runs if r["seed"] < 5])["primary"]
    assert five["p"] == pytest.approx(0.0625) and not five["significant"] and five["smallest_possible_p"] == 0.0625


def test_comparisons_are_paired_by_seed_whatever_the_order():
    runs = ssa_better_at_large_sigma_worse_when_long()
    shuffled = list(reversed(runs))
    assert paired_comparisons(_config(), shuffled) == paired_comparisons(_config(), runs)
    entry = paired_comparisons(_config(), runs)["tasks"]["every"][0]
    assert (entry["a"], entry["b"], entry["seeds"]) == ("ssa", "softmax", list(range(10)))
    long = next(c for c in entry["cells"] if c["sweep"] == "length_sweep" and c["test_set"] == "balanced" and c["value"] == 200)
    assert long["higher"] == 10 and long["wilcoxon_p"] == pytest.approx(2 / 1024)
    assert "holm_p" not in long  # cells are descriptive: no family correction, no verdict
    tied = next(c for c in entry["cells"] if c["test_set"] == "standard")
    assert tied["ties"] == 10 and tied["wilcoxon_p"] == 1.0


def test_primary_endpoint_is_skipped_with_a_reason_when_its_arms_did_not_run():
    config = config_from_dict({"scoring": ["ssa", "ssmax"], "stats": {"primary": {"min_value": 8}}})
    runs = [r for r in ssa_better_at_large_sigma_worse_when_long() if r["scoring"] == "ssa"]
    assert "compares ssa with softmax" in paired_comparisons(config, runs)["primary"]["skipped"]


@pytest.mark.parametrize(
    "primary, message",
    [
        ({"min_value": 100}, "selects no cell"),
        ({"metric": "mse"}, "task 'every' has sweeps"),
        ({"test": "t"}, "test one of"),
        ({"treatment": "softmax"}, "both 'softmax'"),
    ],
)
def test_bad_primary_endpoints_are_refused(primary, message):
    with pytest.raises(ValueError, match=message):
        config_from_dict({"eval": {"sigmas": [1, 12]}, "stats": {"primary": primary}})


def test_mean_ci_still_describes_one_arm():
    ci = mean_ci([0.1, 0.2, 0.3])
    assert ci["low"] < 0.2 < ci["high"] and ci["n"] == 3
