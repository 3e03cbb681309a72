"""Every scoring function against its float64 reference; SSA's parametrisation and gradients."""

import math

import pytest
import torch

from ssa_hf.models.parameters import ConstrainedParameter
from ssa_hf.models.scoring import SCORING_FUNCTIONS
from ssa_hf.models.settings import ScoringParameters, resolve_settings, validate_settings

HEADS = 3
PARAMS = {
    "b": torch.tensor([0.5, 1.0, 2.0]),
    "n": torch.tensor([1.0, 1.5, 3.0]),
    "t": torch.tensor([0.5, 1.0, 2.0]),
    "s": torch.tensor([0.3, 0.5, 1.0]),
    "alpha": torch.tensor([1.2, 1.5, 1.9]),
}


def _params(spec):
    return {k: PARAMS[k] for k in spec.parameter_names if k in PARAMS}


def _mask(shape):
    mask = torch.rand(shape[0], 1, shape[2], shape[3]) > 0.3
    mask[0, 0, 1] = False  # a fully masked row
    mask[1, 0, 2] = False
    mask[1, 0, 2, 0] = True  # a row with a single key
    return mask


@pytest.mark.parametrize("name", list(SCORING_FUNCTIONS))
@pytest.mark.parametrize("magnitude", [3.0, 1e4])
def test_matches_float64_reference(name, magnitude):
    spec = SCORING_FUNCTIONS[name]
    scores = torch.randn(2, HEADS, 5, 9, dtype=torch.float64) * magnitude
    mask = _mask(scores.shape)
    weights = spec.weights(scores.float(), mask, _params(spec))
    reference = spec.reference(scores, mask, _params(spec))
    assert torch.isfinite(weights).all()
    # float32 against float64: absolute tolerance on weights in [0, 1] (sa_softmax is scaled by x)
    scale = scores.abs().amax().item() if name == "sa_softmax" else 1.0
    torch.testing.assert_close(weights.double(), reference, atol=2e-5 * scale, rtol=1e-4)
    full = mask.expand_as(weights)
    assert (weights[~full] == 0).all(), "masked entries must be exactly zero"
    assert (weights[0, :, 1] == 0).all(), "a fully masked row must be all zeros"
    if spec.normalised:
        sums = weights.sum(-1)[full.any(-1)]
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(SCORING_FUNCTIONS))
def test_no_mask_and_half_precision(name):
    spec = SCORING_FUNCTIONS[name]
    scores = torch.randn(1, HEADS, 4, 6) * 20
    full = spec.weights(scores, None, _params(spec))
    torch.testing.assert_close(full.double(), spec.reference(scores.double(), None, _params(spec)), atol=2e-5 * 20, rtol=1e-4)


def test_ssa_large_scores_differ_from_softmax():
    # the check that catches a silent fallback to softmax: at large scores the two are far apart
    scores = torch.tensor([[[[2.0, 1.5, 2.5, 30.0]]]])
    ssa = SCORING_FUNCTIONS["ssa"].weights(scores, None, {"b": torch.ones(1), "n": torch.full((1,), 1.5)})
    softmax = SCORING_FUNCTIONS["softmax"].weights(scores, None, {})
    assert softmax[..., 3] > 0.999999
    assert ssa[..., 3] < 0.95
    assert (ssa - softmax).abs().max() > 0.04


def test_ssa_literal_power_overflows_in_half_but_stable_form_does_not():
    scores = torch.tensor([[[[100.0, 50.0, -20.0]]]], dtype=torch.float16)
    literal = torch.pow(1 + scores.abs(), torch.sign(scores) * 3.0)
    assert not torch.isfinite(literal / literal.sum()).all()
    weights = SCORING_FUNCTIONS["ssa"].weights(scores.float(), None, {"b": torch.ones(1), "n": torch.full((1,), 3.0)})
    assert torch.isfinite(weights).all()


def test_ssa_gradients_for_b_and_n_match_closed_form():
    scores = torch.randn(1, 2, 3, 5, dtype=torch.float64) * 4
    b = torch.tensor([0.7, 1.3], dtype=torch.float64, requires_grad=True)
    n = torch.tensor([1.2, 2.0], dtype=torch.float64, requires_grad=True)
    weights = SCORING_FUNCTIONS["ssa"].weights(scores, None, {"b": b, "n": n})
    upstream = torch.randn_like(weights)
    (weights * upstream).sum().backward()
    # closed form: dL/dg = w * (u - sum w u); dg/dn = sgn(s) log1p(b|s|); dg/db = n sgn(s) |s| / (1 + b|s|)
    dg = weights * (upstream - (weights * upstream).sum(-1, keepdim=True))
    bb, nn_ = b.detach().view(-1, 1, 1), n.detach().view(-1, 1, 1)
    dn = (dg * torch.sign(scores) * torch.log1p(bb * scores.abs())).sum((0, 2, 3))
    db = (dg * nn_ * torch.sign(scores) * scores.abs() / (1 + bb * scores.abs())).sum((0, 2, 3))
    torch.testing.assert_close(n.grad, dn)
    torch.testing.assert_close(b.grad, db)


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
     ("scoring_parametrization", "sigmoid"), ("temperature_init", 0.0), ("entmax_alpha_init", 2.5)],
)
def test_invalid_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        validate_settings(resolve_settings(**{field: value}))


def test_unknown_scoring_function():
    with pytest.raises(ValueError, match="Unknown scoring function 'bogus'"):
        ScoringParameters("bogus", 2)


def test_constrained_parameter_reset_restores_init():
    p = ConstrainedParameter(2.0, 3, 3, True, "softplus", floor=1.0)
    with torch.no_grad():
        p.raw.fill_(5.0)
    p.reset(2.0)
    torch.testing.assert_close(p(), torch.full((3,), 2.0))
