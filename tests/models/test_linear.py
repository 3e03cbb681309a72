"""Linear attention and CosFormer (ssa_hf/models/linear.py) against the float64 oracle (tests/models/oracle.py):
values, gradients and weights over every mask form, the chunked causal loop, the mask structure and the refusals.
Inside the models they run through the shared runners of test_modeling.py; mixtures are in test_mixture.py."""

import pytest
import torch

from ssa_hf.models.attention import scored_attention
from ssa_hf.models.linear import LINEAR_ATTENTIONS, LinearMask, linear_mask
from ssa_hf.models.settings import ScoringParameters

from . import oracle
from .inputs import padding, qkv
from .tiny import FAMILIES_UNDER_TEST, tiny_config

NAMES = list(LINEAR_ATTENTIONS)
M = torch.tensor([75.0, 90.0, 120.0, 300.0], dtype=torch.float64)  # CosFormer length scales, one per head


def causal(q_len, kv_len, offset):
    return torch.arange(kv_len)[None, :] <= torch.arange(q_len)[:, None] + offset


# (name, q_len, kv_len, how the mask is given, offset of the query positions)
MASK_CASES = {
    # a key-padding mask, bidirectional (an encoder)
    "bidirectional": (9, 9, "padding", 0),
    # the full [B, 1, L, L] boolean mask transformers builds for a padded causal batch
    "causal-full-mask": (9, 9, "full", 0),
    # chunked prefill with a KV cache: the queries are the last 4 of 11 positions (bottom-right causal)
    "kv-cache": (4, 11, "full", 7),
    # one decoding step: a [B, 1, 1, Lk] mask
    "decode": (1, 11, "padding", 10),
    # functional is_causal (top-left, as F.scaled_dot_product_attention) with Lq < Lk and key padding
    "is-causal-top-left": (5, 9, "is_causal+padding", 0),
    # ... with more queries than keys: the last queries see every key
    "is-causal-more-queries": (9, 5, "is_causal+padding", 0),
    # no mask, longer than one chunk (64) of the causal loop
    "is-causal-long": (70, 70, "is_causal", 0),
}


def case_inputs(case, dtype=torch.float64, grad=False):
    q_len, kv_len, kind, offset = MASK_CASES[case]
    q, k, v = [t.requires_grad_(grad) for t in qkv(q_len=q_len, kv_len=kv_len, dtype=dtype)]
    keep = padding(2, kv_len) if "padding" in kind or kind == "full" else torch.ones(2, kv_len, dtype=torch.bool)
    is_causal = kind.startswith("is_causal")
    if kind == "full":
        attn_mask = (causal(q_len, kv_len, offset)[None] & keep[:, None, :])[:, None]
    elif "padding" in kind:
        attn_mask = keep[:, None, None, :]
    else:
        attn_mask = None
    causal_part = kind == "full" or is_causal
    dense = keep[:, None, None, :] & (causal(q_len, kv_len, offset) if causal_part else torch.ones(q_len, kv_len, dtype=torch.bool))
    positions = torch.arange(q_len) + offset
    return (q, k, v), dict(attn_mask=attn_mask, is_causal=is_causal), dense, positions


def params_for(name, dtype=torch.float64):
    return {"m": M.to(dtype)} if name == "cosformer" else {}


@pytest.mark.parametrize("case", list(MASK_CASES))
@pytest.mark.parametrize("name", NAMES)
def test_values_and_gradients_match_float64_reference(name, case):
    spec = LINEAR_ATTENTIONS[name]
    (q, k, v), kwargs, dense, positions = case_inputs(case, grad=True)
    params = params_for(name)
    out, weights = scored_attention(q, k, v, name, params, enable_gqa=True, return_weights=True, **kwargs)
    fast = scored_attention(q, k, v, name, params, enable_gqa=True, **kwargs)  # the linear-time path
    # the causal loop in chunks of 3 (several chunks, a running state across them)
    structure = linear_mask(kwargs["attn_mask"], q.shape[2], k.shape[2], kwargs["is_causal"])
    chunked = spec.attend(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), params, structure, chunk=3)
    ref_inputs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    ref_out, ref_weights = oracle.linear_attention(*ref_inputs, name, params, dense, positions)
    # the entry's own float64 reference (linear.py) is the oracle's formula
    own_out, own_weights = spec.reference_attention(q.detach(), k.detach(), v.detach(), params, dense, positions)
    torch.testing.assert_close(own_out, ref_out.detach(), atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(own_weights, ref_weights.detach(), atol=1e-12, rtol=1e-10)
    for got in (out, fast, chunked):
        torch.testing.assert_close(got, ref_out, atol=1e-10, rtol=1e-9)
    torch.testing.assert_close(weights, ref_weights, atol=1e-12, rtol=1e-9)
    assert (weights[~dense.expand_as(weights)] == 0).all(), "masked keys get exactly zero weight"
    upstream = torch.randn_like(ref_out)
    want = torch.autograd.grad(ref_out, ref_inputs, upstream)
    for got in (fast, chunked, out):
        grads = torch.autograd.grad(got, (q, k, v), upstream)
        for label, a, e in zip("qkv", grads, want):
            torch.testing.assert_close(a, e, atol=1e-9, rtol=1e-8, msg=lambda m: f"grad {label}: {m}")


@pytest.mark.parametrize("name", NAMES)
def test_float32_and_half_inputs_close_to_reference(name):
    (q, k, v), kwargs, dense, positions = case_inputs("causal-full-mask")
    ref, _ = oracle.linear_attention(q, k, v, name, params_for(name), dense, positions)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 5e-2)):
        out = scored_attention(q.to(dtype), k.to(dtype), v.to(dtype), name, params_for(name, torch.float32), enable_gqa=True, **kwargs)
        assert out.dtype == dtype and torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_gradcheck_causal_chunked():
    q, k, v = [t.requires_grad_(True) for t in qkv(batch=1, heads=2, kv_heads=2, q_len=7, kv_len=7, dim=3)]
    structure = LinearMask(torch.tensor([[False, True, True, True, True, True, True]]), 0)
    for spec in LINEAR_ATTENTIONS.values():
        params = {"m": torch.tensor([9.0, 30.0], dtype=torch.float64)}
        assert torch.autograd.gradcheck(lambda q, k, v: spec.attend(q, k, v, params, structure, chunk=3), (q, k, v))


def test_linear_is_neither_softmax_nor_unweighted_and_cos_reweighting_matters():
    (q, k, v), kwargs, _, _ = case_inputs("causal-full-mask", dtype=torch.float32)
    softmax = scored_attention(q * 3, k * 3, v, "softmax", enable_gqa=True, **kwargs)
    linear = scored_attention(q * 3, k * 3, v, "linear", enable_gqa=True, **kwargs)
    assert (linear - softmax).abs().max() > 0.05
    near = scored_attention(q, k, v, "cosformer", {"m": 9.0}, enable_gqa=True, **kwargs)
    far = scored_attention(q, k, v, "cosformer", {"m": 1e6}, enable_gqa=True, **kwargs)  # cos ~ 1: plain ReLU features
    assert (near - far).abs().max() > 0.05
    # the functional default for m is the sequence length (the paper's choice)
    torch.testing.assert_close(scored_attention(q, k, v, "cosformer", enable_gqa=True, **kwargs),
                               scored_attention(q, k, v, "cosformer", {"m": 9.0}, enable_gqa=True, **kwargs))


def test_mask_structure_is_derived_from_boolean_masks():
    keep = padding(2, 11)
    full = (causal(4, 11, 7)[None] & keep[:, None, :])[:, None]
    structure = linear_mask(full, 4, 11)
    assert structure.causal_offset == 7 and torch.equal(structure.key_padding, keep)
    assert torch.equal(structure.dense(4, 11, "cpu"), full)
    per_head = full.expand(2, 3, 4, 11)  # identical in every head: accepted
    assert linear_mask(per_head, 4, 11).causal_offset == 7
    bidirectional = linear_mask(keep[:, None, None, :].expand(2, 1, 4, 11), 4, 11)
    assert bidirectional.causal_offset is None and torch.equal(bidirectional.key_padding, keep)
    assert linear_mask(keep[:, None, None, :], 4, 11, is_causal=True).causal_offset == 0
    assert linear_mask(None, 4, 11) == LinearMask()


@pytest.mark.parametrize(
    "bad,match",
    [("window", "neither bidirectional nor causal"), ("random", "neither bidirectional nor causal"),
     ("heads", "differs between heads"), ("float", "boolean")],
)
def test_masks_linear_attention_cannot_honour_are_refused(bad, match):
    (q, k, v), _, _, _ = case_inputs("causal-full-mask", dtype=torch.float32)
    if bad == "window":  # sliding window: causal with a lower bound
        mask = causal(9, 9, 0) & ~causal(9, 9, -3)
    elif bad == "random":
        mask = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(0)) > 0.5
    elif bad == "heads":
        mask = torch.stack([causal(9, 9, 0), causal(9, 9, 0).T, causal(9, 9, 0), causal(9, 9, 0)])[None]
    else:
        mask = torch.zeros(9, 9)
    with pytest.raises(ValueError, match=match):
        scored_attention(q, k, v, "linear", attn_mask=mask, enable_gqa=True)


def test_cosformer_refuses_inputs_longer_than_its_length_scale():
    (q, k, v), kwargs, _, _ = case_inputs("causal-full-mask", dtype=torch.float32)
    with pytest.raises(ValueError, match="cosformer_length"):
        scored_attention(q, k, v, "cosformer", {"m": 5.0}, enable_gqa=True, **kwargs)


def test_entries_are_linear_and_have_no_rowwise_weights():
    assert set(NAMES) == {"linear", "cosformer"}
    for name in NAMES:
        assert LINEAR_ATTENTIONS[name].kind == "linear"
        with pytest.raises(ValueError, match="not a row-wise function"):
            LINEAR_ATTENTIONS[name].weights(torch.zeros(1, 1, 1, 2), None, {})


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_cosformer_length_defaults_to_the_models_context(family):
    config = tiny_config(family, attention_scoring="cosformer")
    assert ScoringParameters("cosformer", 2, config).initial_values() == {"m": config.max_position_embeddings}
    assert ScoringParameters("cosformer", 2, tiny_config(family, attention_scoring="cosformer", cosformer_length=512)).initial_values() == {"m": 512}
