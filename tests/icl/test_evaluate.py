"""Metrics, baselines, confidence intervals and evaluation grids of the ICL experiments."""

import math

import pytest
import torch

from ssa_hf.icl.config import EvalConfig
from ssa_hf.icl.evaluate import (
    cell_prompts,
    evaluate_task,
    in_distribution_check,
    least_squares_baseline,
    linear_metrics,
    majority_baseline,
    quantifier_metrics,
    zero_baseline,
)
from ssa_hf.icl.stats import mean_ci, separated, t_cdf, t_quantile
from ssa_hf.icl.tasks import Prompts, sample_standard


def test_quantifier_metrics_hand_made():
    labels = torch.tensor([[1.0, -1, -1, -1, -1], [1, 1, 1, 1, -1], [-1, -1, -1, -1, -1]])
    outputs = torch.tensor([
        [2.0, -1, 0.5, -3, -1],  # wrong at position 3 only (before position 4: not a sequence error)
        [1.0, 1, 1, 1, 0.0],     # right everywhere (0 counts as -1)
        [-1.0, -1, -1, -1, 4],   # wrong at position 5
    ])
    m = quantifier_metrics(outputs, labels, from_position=4)
    assert m["sequence_error"] == pytest.approx(1 / 3)
    assert m["individual_error"] == pytest.approx(2 / 15)
    assert m["per_position"] == pytest.approx([0, 0, 1 / 3, 0, 1 / 3])
    assert quantifier_metrics(outputs, labels, from_position=3)["sequence_error"] == pytest.approx(2 / 3)


def test_metrics_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="prompts, points"):
        quantifier_metrics(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="prompts, points"):
        linear_metrics(torch.zeros(3), torch.zeros(3))


def test_linear_metrics_hand_made():
    labels = torch.tensor([[1.0, 2, 3, 4, 5]])
    outputs = torch.tensor([[0.0, 0, 0, 2, 8]])
    m = linear_metrics(outputs, labels, from_position=4)
    assert m["mse"] == pytest.approx((4 + 9) / 2)
    assert m["per_position"] == pytest.approx([1, 4, 9, 4, 9])


def test_majority_baseline_hand_made():
    ys = torch.tensor([[1.0, -1, 1], [1, -1, -1], [-1, 1, -1], [1, 1, 1]])
    p = Prompts("every", torch.zeros_like(ys), ys)
    # position 2 is a tie: -1
    assert majority_baseline(p)[0].tolist() == [1.0, -1.0, -1.0]


def test_every_majority_baseline_individual_error_about_five_percent():
    """Always answering the majority (-1 from position 2 on) under N(0, 1) at 21 points: ~1/21 individual error."""
    p = sample_standard("every", 20000, 21, 1.0, torch.Generator().manual_seed(0))
    m = quantifier_metrics(majority_baseline(p), p.ys)
    # expected: (1/2 + sum_{i>=2} 2^-i) / 21 = (1 - 2^-21) / 21 = 4.76%
    assert m["individual_error"] == pytest.approx(1 / 21, abs=0.003)
    # any wrong prediction from position 4 on <=> the first 4 inputs positive: 1/16
    assert m["sequence_error"] == pytest.approx(1 / 16, abs=0.006)


def test_linear_baselines():
    p = sample_standard("linear", 64, 8, 2.0, torch.Generator().manual_seed(0), sigma_ab=3.0)
    exact = linear_metrics(least_squares_baseline(p), p.ys)
    assert exact["mse"] < 1e-8  # noise-free lines: exact from 2 points seen
    zero = linear_metrics(zero_baseline(p), p.ys)["mse"]
    expected = float((p.ys[:, 3:] ** 2).mean())
    assert zero == pytest.approx(expected, rel=1e-5)


def test_cells_are_shared_and_distinct():
    cfg = EvalConfig(batches=1, batch_size=4)
    a = cell_prompts("every", False, 2.0, 6, cfg)
    assert torch.equal(a.xs, cell_prompts("every", False, 2.0, 6, cfg).xs)
    assert not torch.equal(a.xs, cell_prompts("every", False, 3.0, 6, cfg).xs)
    assert not torch.equal(a.xs, cell_prompts("every", False, 2.0, 6, EvalConfig(batches=1, batch_size=4, seed=7)).xs)


def test_evaluate_task_with_an_oracle_and_with_the_baseline():
    cfg = EvalConfig(sigmas=[1, 5], lengths=[6, 9], batches=1, batch_size=32)
    oracle = evaluate_task("some", lambda p: p.ys * 3.0, cfg, length=7)
    for sweep in ("sigma_sweep", "length_sweep"):
        for test_set in ("standard", "balanced"):
            assert all(c["sequence_error"] == 0 and c["individual_error"] == 0 for c in oracle[sweep][test_set])
    assert oracle["sigma_sweep"]["length"] == 7 and oracle["length_sweep"]["values"] == [6, 9]
    assert in_distribution_check(oracle, cfg)["passed"]
    base = evaluate_task("some", majority_baseline, cfg, length=7)
    check = in_distribution_check(base, cfg)
    assert not check["passed"] and check["balanced_sequence_error"] > 0.5
    # the per-position curve has one entry per point
    assert len(base["length_sweep"]["balanced"][1]["per_position"]) == 9


def test_evaluate_linear_grid():
    cfg = EvalConfig(linear_sigmas_x=[1, 4], linear_sigmas_ab=[1, 2, 3], batches=1, batch_size=16)
    zero = evaluate_task("linear", zero_baseline, cfg, length=6)["grid"]
    assert len(zero["mse"]) == 2 and len(zero["mse"][0]) == 3
    # E[(a x + b)^2] = sigma_ab^2 (sigma_x^2 + 1): grows along both axes
    assert zero["mse"][1][2] > zero["mse"][0][0]


@pytest.mark.parametrize("df, expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)])
def test_t_quantile_table_values(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)


def test_t_distribution_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 5, 8):
        for t in (-3.0, -0.4, 0.0, 1.1, 6.0):
            assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-12)
        assert t_quantile(0.9, df) == pytest.approx(stats.t.ppf(0.9, df), rel=1e-9)


def test_mean_ci():
    ci = mean_ci([0.1, 0.2, 0.3, 0.4, 0.5])
    half = 2.7764451 * math.sqrt(0.025) / math.sqrt(5)
    assert ci["mean"] == pytest.approx(0.3) and ci["high"] - 0.3 == pytest.approx(half, rel=1e-6)
    assert mean_ci([0.0, 0.0, 0.5], bounds=(0, 1))["low"] == 0.0
    single = mean_ci([0.2])
    assert single["low"] is None and single["n"] == 1
    assert separated(mean_ci([0.0, 0.01, 0.02]), mean_ci([0.5, 0.51, 0.52])) == -1
    assert separated(mean_ci([0.0, 0.5, 1.0]), mean_ci([0.4, 0.5, 0.6])) == 0
    with pytest.raises(ValueError):
        mean_ci([])


def test_linear_paper_protocol_applies_each_function_to_the_same_inputs():
    from ssa_hf.icl.evaluate import linear_paper_prompts, zero_baseline

    cfg = EvalConfig(batch_size=8, linear_protocol="paper", linear_points=9, linear_functions=5,
                     linear_sigmas_x=[1, 10], linear_sigmas_ab=[2])
    prompts = linear_paper_prompts(10, 2, cfg)
    assert prompts.xs.shape == (40, 9)
    blocks = prompts.xs.reshape(5, 8, 9)
    assert torch.equal(blocks[0], blocks[4]), "every function sees the same 8 x-sequences"
    assert torch.equal(prompts.a.reshape(5, 8), prompts.a.reshape(5, 8)[:, :1].expand(5, 8)), "one (a, b) per block of 8"
    torch.testing.assert_close(prompts.ys, prompts.a[:, None] * prompts.xs + prompts.b[:, None])
    assert torch.equal(linear_paper_prompts(10, 2, cfg).xs, prompts.xs)  # the same prompts for every model
    # the grid is scored at 9 points on 5 x 8 prompts; the zero baseline's MSE there is the mean of y^2, positions >= 4
    result = evaluate_task("linear", zero_baseline, cfg, length=41)
    grid = result["grid"]
    assert (grid["length"], grid["protocol"], grid["prompts_per_cell"]) == (9, "paper", 40)
    expected = float((prompts.ys.double()[:, 3:] ** 2).mean())
    assert grid["mse"][1][0] == pytest.approx(expected)
