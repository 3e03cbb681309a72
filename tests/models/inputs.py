"""Attention inputs shared by the attention, backend, linear-attention and mixture tests."""

import torch

from ssa_hf.models.scoring import SCORING_FUNCTIONS

PARAMS = {"b": [0.5, 1.0, 2.0, 0.8, 1.2, 0.3, 1.7, 1.0], "n": [1.0, 1.5, 3.0, 2.0, 1.2, 1.0, 2.5, 1.5],
          "t": [0.5, 1.0, 2.0, 1.5, 0.7, 1.1, 0.9, 1.3], "s": [0.3] * 8, "alpha": [1.5] * 8}


def make_inputs(batch=2, heads=8, kv_heads=2, q_len=63, kv_len=63, dim=100, dtype=torch.float32, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, dim, generator=g, dtype=dtype) * 2
    k = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype) * 2
    v = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    # padding: batch 0 left-padded by 5 keys, batch 1 right-padded by 7 keys
    pad = torch.ones(batch, kv_len, dtype=torch.bool)
    pad[0, : min(5, kv_len - 1)] = False
    if batch > 1:
        pad[1, -min(7, kv_len - 1) :] = False
    mask = pad[:, None, None, :].expand(batch, 1, q_len, kv_len)
    return [t.requires_grad_(grad) for t in (q, k, v)], mask


def params_for(scoring, heads=8, grad=False):
    spec = SCORING_FUNCTIONS[scoring]
    return {name: torch.tensor(PARAMS[name][:heads], requires_grad=grad) for name in spec.parameter_names if name in PARAMS}


def qkv(batch=2, heads=4, kv_heads=2, q_len=9, kv_len=9, dim=6, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, dim, generator=g, dtype=dtype)
    k = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    v = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    return q, k, v


def padding(batch, kv_len):
    keep = torch.ones(batch, kv_len, dtype=torch.bool)
    keep[0, :2] = False  # left padding
    keep[1, -3:] = False  # right padding
    return keep
