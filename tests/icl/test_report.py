"""The report states the primary endpoint first and the verdict in words, including where SSA is worse."""

from ssa_hf.icl.config import config_from_dict
from ssa_hf.icl.report import paired_table, primary_section, verdict_lines
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
    assert "ssa lower in 10 of 10 seeds" in primary
    (line,) = verdict_lines(paired)
    assert "ssa better than softmax on the balanced set at sigma 12, sigma 29" in line
    assert "**ssa worse than softmax** on the balanced set at 200 points" in line
    assert "After Holm's correction over the 10 cell tests of `every`: 3 of these hold" in line
    table = paired_table(paired["tasks"]["every"][0])
    assert "**ssa worse** (holds after Holm)" in table and "ssa better (holds after Holm)" in table


def test_no_difference_is_said_plainly_and_small_samples_are_flagged():
    runs = [r for r in ssa_better_at_large_sigma_worse_when_long() if r["seed"] < 3]
    primary = "\n".join(primary_section(_paired(runs, seeds=3)))
    assert "**no difference shown** (p >= 0.05)" in primary
    assert "with 3 seeds no exact test can reach p < 0.05 at all" in primary
    # identical arms: every cell tied
    same = [fake_run(s, k, [0.1, 0.2, 0.3], [0.1, 0.1]) for s in ("softmax", "ssa") for k in range(10)]
    (line,) = verdict_lines(_paired(same))
    assert "No cell differs at p < 0.05" in line


def test_worse_primary_endpoint_is_called_worse():
    runs = [fake_run(s, k, [0.0, 0.1 + (0.3 + k / 100 if s == "ssa" else 0), 0.2], [0.0, 0.0])
            for s in ("softmax", "ssa") for k in range(10)]
    assert "**ssa is worse than softmax**" in "\n".join(primary_section(_paired(runs)))


def test_skipped_primary_says_why():
    runs = [r for r in ssa_better_at_large_sigma_worse_when_long() if r["scoring"] == "ssa"]
    config = config_from_dict({"scoring": ["ssa"], "stats": {"primary": {"min_value": 8}}})
    text = "\n".join(primary_section(paired_comparisons(config, runs)))
    assert text.startswith("Not evaluated: the declared primary endpoint compares ssa with softmax")


def test_says_when_no_cell_can_survive_holm():
    runs = [r for r in ssa_better_at_large_sigma_worse_when_long() if r["seed"] < 7]
    (line,) = verdict_lines(_paired(runs, seeds=7))
    assert "**ssa worse than softmax** on the balanced set at 200 points (p = 0.016)" in line
    assert "none of these holds (with 7 seeds the smallest possible p is 0.016, so no cell can hold over 10 tests)" in line


def test_comparisons_with_softmax_come_first():
    from ssa_hf.icl.config import StatsConfig

    assert StatsConfig().pairs(["softmax", "ssa", "temperature"]) == [("ssa", "softmax"), ("ssa", "temperature"), ("temperature", "softmax")]
    assert StatsConfig(comparisons=[["softmax", "ssa"]]).pairs(["softmax", "ssa"]) == [("softmax", "ssa")]
