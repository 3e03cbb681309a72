"""Scoring settings and parameters (ssa_hf/models/settings.py): initial values, shapes, constraints, buffers,
validation naming the field."""

import math

import pytest
import torch

from ssa_hf.models.settings import ScoringParameters, resolve_settings, validate_settings


@pytest.mark.parametrize("parametrization", ["softplus", "exp"])
@pytest.mark.parametrize("granularity", ["head", "layer"])
def test_parameters_initial_values_and_shapes(parametrization, granularity):
    options = dict(scoring_granularity=granularity, scoring_parametrization=parametrization, ssa_b_init=0.8, ssa_n_init=2.0)
    params = ScoringParameters("ssa", 4, **options)()
    assert params["b"].shape == (4,) and params["n"].shape == (4,)
    torch.testing.assert_close(params["b"], torch.full((4,), 0.8))
    torch.testing.assert_close(params["n"], torch.full((4,), 2.0))
    trainable = sum(p.numel() for p in ScoringParameters("ssa", 4, **options).parameters())
    assert trainable == (8 if granularity == "head" else 2)


def test_softplus_keeps_b_positive_and_n_at_least_one_under_adversarial_updates():
    module = ScoringParameters("ssa", 2, ssa_n_init=1.0)
    with torch.no_grad():
        for p in module.parameters():
            p.fill_(-50.0)  # what a diverging optimiser could do
    values = module()
    assert (values["b"] > 0).all() and (values["n"] >= 1).all()
    # a learnable n initialised at exactly 1 starts just above it, with a finite raw value
    fresh = ScoringParameters("ssa", 2, ssa_n_init=1.0)()
    assert ((fresh["n"] > 1) & (fresh["n"] < 1.01)).all()


def test_fixed_parameters_are_buffers():
    module = ScoringParameters("ssa", 2, ssa_learn_b=False, ssa_learn_n=False, ssa_b_init=0.8, ssa_n_init=1.5)
    assert list(module.parameters()) == []
    assert set(module.state_dict()) == {"params.b.value", "params.n.value"}


@pytest.mark.parametrize(
    "field,value",
    [("ssa_b_init", 0.0), ("ssa_b_init", -1.0), ("ssa_n_init", 0.5), ("ssa_b_init", math.nan), ("scoring_granularity", "token"),
     ("scoring_parametrization", "sigmoid"), ("temperature_init", 0.0), ("entmax_alpha_init", 2.5),
     ("cosformer_length", 0.0)],
)
def test_invalid_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        validate_settings(resolve_settings(**{field: value}))


def test_unknown_scoring_function():
    with pytest.raises(ValueError, match="Unknown scoring function 'bogus'"):
        ScoringParameters("bogus", 2)


def test_linear_attention_parameters():
    """CosFormer's length scale m is fixed (a buffer, from cosformer_length); linear attention has no parameter."""
    module = ScoringParameters("cosformer", 4, cosformer_length=32)
    assert module()["m"].tolist() == [32.0] * 4
    assert list(module.parameters()) == [], "m is fixed (a buffer)"
    assert dict(ScoringParameters("linear", 4)()) == {}


def test_parameter_problems_never_reads_stale_values():
    """parameter_problems reuses the values of the last forward (a training step's attention call computes them
    with their graph, then checks them) only while their tensors are unchanged: an in-place edit (optimizer
    step), a new tensor (load) or new storage (`module.to(dtype)`, no version bump) is seen at once."""
    module = ScoringParameters("ssa", 2, ssa_n_init=1.5)
    module()
    assert module.parameter_problems() == []
    with torch.no_grad():
        module.params["b"].raw.fill_(float("nan"))  # in place: version bump
    assert module.parameter_problems() == ["b: not finite, got [nan, nan]"]
    module.params["b"].raw = torch.nn.Parameter(torch.zeros(2))  # a new tensor, as a load that assigns does
    module()
    module.params["n"].raw.data = torch.full((2,), float("inf"))  # new storage, same version
    assert module.parameter_problems() == ["n: not finite, got [inf, inf]"]
    fixed = ScoringParameters("ssa", 2, ssa_learn_b=False, ssa_b_init=0.8)
    fixed()
    fixed.params["b"].value.data = torch.zeros(2)
    assert fixed.parameter_problems() == ["b: must be > 0.0, got [0.0, 0.0]"]
