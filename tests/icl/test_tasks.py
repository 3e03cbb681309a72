"""Samplers and labels of the ICL tasks on hand-made sequences."""

import pytest
import torch

from ssa_hf.icl.tasks import (
    Curriculum,
    Prompts,
    probe_prompts,
    quantifier_labels,
    sample,
    sample_balanced,
    sample_standard,
)


@pytest.mark.parametrize(
    "task, xs, expected",
    [
        ("every", [0.5, 2.0, -0.1, 3.0, 1.0], [1, 1, -1, -1, -1]),
        ("every", [-1.0, 2.0, 3.0], [-1, -1, -1]),
        ("every", [0.1, 0.2, 0.3], [1, 1, 1]),
        ("every", [0.0, 1.0], [-1, -1]),  # 0 is not > 0
        ("some", [-0.5, -2.0, 0.1, -3.0, -1.0], [-1, -1, 1, 1, 1]),
        ("some", [1.0, -2.0, -3.0], [1, 1, 1]),
        ("some", [-0.1, -0.2, 0.0], [-1, -1, -1]),
    ],
)
def test_quantifier_labels_hand_made(task, xs, expected):
    labels = quantifier_labels(torch.tensor([xs]), task)
    assert labels.tolist() == [[float(v) for v in expected]]


def test_quantifier_labels_refuse_linear():
    with pytest.raises(ValueError, match="quantifier"):
        quantifier_labels(torch.zeros(1, 3), "linear")


def test_unknown_task_named():
    with pytest.raises(ValueError, match="unknown ICL task 'most'"):
        sample_standard("most", 2, 3)


@pytest.mark.parametrize("task", ["every", "some", "linear"])
def test_standard_sampler_is_seeded_and_labelled(task):
    a = sample_standard(task, 16, 9, 3.0, torch.Generator().manual_seed(5))
    b = sample_standard(task, 16, 9, 3.0, torch.Generator().manual_seed(5))
    c = sample_standard(task, 16, 9, 3.0, torch.Generator().manual_seed(6))
    assert torch.equal(a.xs, b.xs) and torch.equal(a.ys, b.ys)
    assert not torch.equal(a.xs, c.xs)
    assert a.xs.shape == a.ys.shape == (16, 9)
    if task == "linear":
        torch.testing.assert_close(a.ys, a.a[:, None] * a.xs + a.b[:, None])
    else:
        assert torch.equal(a.ys, quantifier_labels(a.xs, task))


def test_standard_sampler_scales():
    g = torch.Generator().manual_seed(0)
    p = sample_standard("linear", 4000, 50, 5.0, g, sigma_ab=3.0)
    assert abs(float(p.xs.std()) - 5.0) < 0.1
    assert abs(float(p.a.std()) - 3.0) < 0.2 and abs(float(p.b.std()) - 3.0) < 0.2


@pytest.mark.parametrize("task", ["every", "some"])
def test_balanced_first_counterexample_is_uniform(task):
    points, n = 7, 16000
    p = sample_balanced(task, n, points, 2.0, torch.Generator().manual_seed(1))
    counter = p.xs <= 0 if task == "every" else p.xs > 0
    has = counter.any(-1)
    first = torch.where(has, counter.float().argmax(-1), torch.full((n,), points))
    counts = torch.bincount(first, minlength=points + 1).float() / n
    # L + 1 equally likely cases: a counterexample at 1..L, or none
    torch.testing.assert_close(counts, torch.full((points + 1,), 1 / (points + 1)), atol=0.015, rtol=0)
    assert torch.equal(p.ys, quantifier_labels(p.xs, task))
    # after the first counterexample the signs are free (not all one sign)
    late = p.xs[first == 0][:, 1:]
    assert 0.4 < float((late > 0).float().mean()) < 0.6
    # magnitudes follow |N(0, sigma)|
    assert abs(float(p.xs.abs().mean()) - 2.0 * (2 / torch.pi) ** 0.5) < 0.05


def test_balanced_versus_standard_long_runs():
    """Under N(0, 1) `every` almost never stays true for 10 points; the balanced set has such runs in ~L/(L+1)/2."""
    g = torch.Generator().manual_seed(0)
    std = sample_standard("every", 4000, 21, 1.0, g)
    bal = sample_balanced("every", 4000, 21, 1.0, g)
    assert float((std.ys[:, 9] > 0).float().mean()) < 0.005
    assert float((bal.ys[:, 9] > 0).float().mean()) > 0.4


def test_balanced_refuses_linear():
    with pytest.raises(ValueError, match="balanced"):
        sample("linear", 2, 3, balanced=True)


def test_features_interleave_inputs_and_labels():
    p = Prompts("every", torch.tensor([[0.5, -1.0]]), torch.tensor([[1.0, -1.0]]))
    assert p.features().tolist() == [[[0.5, 0.0], [1.0, 1.0], [-1.0, 0.0], [-1.0, 1.0]]]


def test_probe_prompt():
    every, some = probe_prompts("every"), probe_prompts("some")
    assert every.xs.tolist() == [[1.0, -1.0, -2.0, 1000.0]]
    assert every.ys.tolist() == [[1.0, -1.0, -1.0, -1.0]]
    assert some.ys.tolist() == [[1.0, 1.0, 1.0, 1.0]]
    with pytest.raises(ValueError):
        probe_prompts("linear")


def test_curriculum():
    c = Curriculum(start=11, end=41, increment=2, interval=2000)
    assert [c.points(s) for s in (0, 1999, 2000, 4000, 29999, 30000, 10**6)] == [11, 11, 13, 15, 39, 41, 41]
    with pytest.raises(ValueError, match="start <= end"):
        Curriculum(start=20, end=10).validate()


@pytest.mark.parametrize("bad", [dict(batch=0, points=3), dict(batch=2, points=0), dict(batch=2, points=3, sigma=0.0)])
def test_sampler_refuses_bad_sizes(bad):
    with pytest.raises(ValueError):
        sample_standard("every", **bad)
