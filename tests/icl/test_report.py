"""The report states the primary endpoint first and the verdict in words, including where SSA is worse."""

from ssa_hf.icl.config import config_from_dict
from ssa_hf.icl.report import paired_table, primary_section, secondary_section, verdict_lines
from ssa_hf.icl.stats import paired_comparisons

from .fixtures import fake_run, ssa_better_at_large_sigma_worse_when_long


def _paired(runs, seeds=10, scoring=("softmax", "ssa")):
    config = config_from_dict({"scoring": list(scoring), "seeds": list(range(seeds)),
                               "eval": {"sigmas": [1, 12, 29], "lengths": [10, 200]},
                               "stats": {"primary": {"min_value": 12}, "bootstrap_resamples": 1000}})
    return paired_comparisons(config, runs)


def test_verdict_names_the_gain_and_the_reversal():
    paired = _paired(ssa_better_at_large_sigma_worse_when_long())
    primary = "\n".join(primary_section(paired))
    assert "ssa has the lower (better) sequence error" in primary and "Wilcoxon signed-rank p = 0.002" in primary
    assert "ssa lower in 10 of 10 seeds" in primary and "95% paired t interval" in primary
    (line,) = verdict_lines(paired)
    assert "ssa lower than softmax on the balanced set at sigma 12, sigma 29" in line
    assert "**ssa higher (worse) than softmax** on the balanced set at 200 points" in line
    table = paired_table(paired["tasks"]["every"][0])
    assert "Holm" not in table and "Wilcoxon p (nominal)" in table  # per cell: descriptive, no verdict words


def test_no_difference_is_said_plainly_and_small_samples_are_flagged():
    runs = [r for r in ssa_better_at_large_sigma_worse_when_long() if r["seed"] < 3]
    primary = "\n".join(primary_section(_paired(runs, seeds=3)))
    assert "**no difference shown at alpha = 0.05" in primary
    assert "with 3 seeds no exact test can reach p < 0.05 at all" in primary
    # identical arms: every cell tied
    same = [fake_run(s, k, [0.1, 0.2, 0.3], [0.1, 0.1]) for s in ("softmax", "ssa") for k in range(10)]
    (line,) = verdict_lines(_paired(same))
    assert "no cell differs at nominal p < 0.05" in line


def test_worse_primary_endpoint_is_called_worse():
    runs = [fake_run(s, k, [0.0, 0.1 + (0.3 + k / 100 if s == "ssa" else 0), 0.2], [0.0, 0.0])
            for s in ("softmax", "ssa") for k in range(10)]
    assert "**ssa is worse than softmax" in "\n".join(primary_section(_paired(runs)))


def test_seen_seeds_make_the_primary_exploratory_and_secondaries_carry_no_verdict():
    config = config_from_dict({"scoring": ["softmax", "ssa"], "seeds": list(range(10)),
                               "eval": {"sigmas": [1, 12, 29], "lengths": [10, 200]},
                               "stats": {"primary": {"min_value": 12}, "seen_seeds": [0, 1, 2],
                                         "secondary": [{"sweep": "length_sweep", "min_value": 200}],
                                         "bootstrap_resamples": 1000}})
    paired = paired_comparisons(config, ssa_better_at_large_sigma_worse_when_long())
    primary = "\n".join(primary_section(paired))
    assert paired["primary"]["exploratory"] and "**Exploratory, not confirmatory:**" in primary
    assert "Verdict on the primary endpoint" not in primary
    (line,) = secondary_section(paired)
    assert "points >= 200" in line and "ssa lower in 0 of 10 seeds, higher in 10" in line
    assert "reproduced" not in line and "Verdict" not in line


def test_a_significant_test_with_a_t_interval_across_zero_reads_no_difference():
    # 9 small gains and one large loss: the signed-rank test rejects, the mean (and its t interval) does not agree
    runs = [fake_run(s, k, [0.0, 0.3 + (-0.01 * (k + 1) if k < 13 else 0.6) * (s == "ssa"), 0.2], [0.0, 0.0])
            for s in ("softmax", "ssa") for k in range(14)]
    result = _paired(runs, seeds=14)["primary"]
    assert result["wilcoxon_p"] < 0.05 and result["t_low"] < 0 < result["t_high"]
    assert result["direction"] == "none" and not result["significant"]


def test_skipped_primary_says_why():
    runs = [r for r in ssa_better_at_large_sigma_worse_when_long() if r["scoring"] == "ssa"]
    config = config_from_dict({"scoring": ["ssa"], "stats": {"primary": {"min_value": 8}}})
    text = "\n".join(primary_section(paired_comparisons(config, runs)))
    assert text.startswith("Not evaluated: the declared primary endpoint compares ssa with softmax")


def test_comparisons_with_softmax_come_first():
    from ssa_hf.icl.config import StatsConfig

    assert StatsConfig().pairs(["softmax", "ssa", "temperature"]) == [("ssa", "softmax"), ("ssa", "temperature"), ("temperature", "softmax")]
    assert StatsConfig(comparisons=[["softmax", "ssa"]]).pairs(["softmax", "ssa"]) == [("softmax", "ssa")]
