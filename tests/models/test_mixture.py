"""A mixture of scoring heads (ssa_hf/models/mixture.py): `attention_scoring` as one name per head, through the
functional API (each head group equals that function alone, parameters reach the right heads, refusals).
Mixtures inside the models run through the shared runners of test_modeling.py (SCORINGS "mixture" and
"mixture-linear") and test_checkpoint_loading.py."""

import pytest
import torch

from ssa_hf.models.attention import scored_attention

from .inputs import padding, qkv

MIXTURE = ["softmax", "ssa", "linear", "cosformer", "ssa", "softmax"]
MIXTURE_PARAMS = {"ssa": {"b": torch.tensor([0.5, 2.0]), "n": 1.5}, "cosformer": {"m": 40.0}}


@pytest.mark.parametrize("causal_mask", [False, True])
def test_functional_mixture_equals_each_head_group_alone(causal_mask):
    q, k, v = [t.requires_grad_(True) for t in qkv(heads=6, kv_heads=3, q_len=8, kv_len=8, dtype=torch.float32)]
    mask = padding(2, 8)[:, None, None, :]
    out, weights = scored_attention(q, k, v, MIXTURE, MIXTURE_PARAMS, attn_mask=mask, is_causal=causal_mask,
                                    enable_gqa=True, return_weights=True)
    plain = scored_attention(q, k, v, MIXTURE, MIXTURE_PARAMS, attn_mask=mask, is_causal=causal_mask, enable_gqa=True)
    torch.testing.assert_close(plain, out)
    kv_index = torch.arange(6) // 2
    for name in dict.fromkeys(MIXTURE):
        heads = torch.tensor([h for h, n in enumerate(MIXTURE) if n == name])
        alone, alone_w = scored_attention(q[:, heads], k[:, kv_index[heads]], v[:, kv_index[heads]], name,
                                          MIXTURE_PARAMS.get(name), attn_mask=mask, is_causal=causal_mask, return_weights=True)
        torch.testing.assert_close(out[:, heads], alone, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(weights[:, heads], alone_w, atol=1e-6, rtol=1e-5)
    # SSA's per-head b reaches the right heads: swapping the two SSA heads' b values changes their outputs
    swapped = {**MIXTURE_PARAMS, "ssa": {"b": torch.tensor([2.0, 0.5]), "n": 1.5}}
    other = scored_attention(q, k, v, MIXTURE, swapped, attn_mask=mask, is_causal=causal_mask, enable_gqa=True)
    assert (other[:, [1, 4]] - plain[:, [1, 4]]).abs().max() > 1e-3
    torch.testing.assert_close(other[:, [0, 2, 3, 5]], plain[:, [0, 2, 3, 5]])
    plain.square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))
    # a [H]-shaped parameter tensor is indexed by the heads of each name
    full_b = {**MIXTURE_PARAMS, "ssa": {"b": torch.tensor([9.0, 0.5, 9.0, 9.0, 2.0, 9.0]), "n": 1.5}}
    torch.testing.assert_close(scored_attention(q, k, v, MIXTURE, full_b, attn_mask=mask, is_causal=causal_mask, enable_gqa=True), plain)


@pytest.mark.parametrize(
    "scoring,params,backend,error,match",
    [
        (MIXTURE, {"b": 1.0, "n": 1.5}, None, ValueError, "params maps each scoring name"),
        (MIXTURE[:5], MIXTURE_PARAMS, None, ValueError, "one scoring name per query head"),
        (["softmax"] * 5 + ["nope"], {}, None, ValueError, "Unknown scoring function 'nope'"),
        (MIXTURE, MIXTURE_PARAMS, "blockwise", NotImplementedError, "cannot run scoring 'linear'"),
        (["ssa"] * 6, {}, None, ValueError, "missing"),
    ],
)
def test_functional_mixture_refusals(scoring, params, backend, error, match):
    q, k, v = qkv(heads=6, kv_heads=3, q_len=5, kv_len=5, dtype=torch.float32)
    with pytest.raises(error, match=match):
        scored_attention(q, k, v, scoring, params, enable_gqa=True, backend=backend)
