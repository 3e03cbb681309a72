"""Every scoring function (ssa_hf/models/scoring.py) against the float64 oracle (tests/models/oracle.py); SSA's
gradients."""

import pytest
import torch

from ssa_hf.models.linear import LINEAR_ATTENTIONS
from ssa_hf.models.scoring import ALL_SCORING_FUNCTIONS, SCORING_FUNCTIONS, get_scoring_function

from . import oracle

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
    reference = oracle.scoring_weights(name, scores, mask, _params(spec))
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
    torch.testing.assert_close(full.double(), oracle.scoring_weights(name, scores, None, _params(spec)), atol=2e-5 * 20, rtol=1e-4)


@pytest.mark.parametrize("name", list(SCORING_FUNCTIONS))
def test_declared_reference_agrees_with_the_oracle(name):
    """Each entry's own float64 `reference` (the one an extension declares) is the formula of the oracle."""
    spec = SCORING_FUNCTIONS[name]
    scores = torch.randn(2, HEADS, 5, 9, dtype=torch.float64) * 3
    mask = _mask(scores.shape)
    torch.testing.assert_close(spec.reference(scores, mask, _params(spec)), oracle.scoring_weights(name, scores, mask, _params(spec)),
                               atol=1e-9, rtol=1e-7)


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


def test_registry_holds_rowwise_and_linear_entries():
    assert not set(LINEAR_ATTENTIONS) & set(SCORING_FUNCTIONS)
    assert set(ALL_SCORING_FUNCTIONS) == set(SCORING_FUNCTIONS) | set(LINEAR_ATTENTIONS)
    assert all(ALL_SCORING_FUNCTIONS[n].kind == "rowwise" for n in SCORING_FUNCTIONS)
    assert all(get_scoring_function(n).kind == "linear" for n in LINEAR_ATTENTIONS)
    with pytest.raises(ValueError, match="Unknown scoring function 'bogus'"):
        get_scoring_function("bogus")
