"""The float64 oracle of the model tests: attention written from its definitions, plainly and materialised.

Independent of the code under test (it imports nothing from ssa_hf): each scoring function is its formula over the
keys a query may attend to, linear attention and CosFormer are their feature products, and `attention` puts a
scoring function between q k^T and v. Everything is differentiable (torch.where, no in-place writes), so tests
compare gradients too. Conventions: masks are boolean (True = may attend), broadcastable to [B, H, Lq, Lk];
`is_causal` is top-left aligned as in F.scaled_dot_product_attention; a query with no key gets all-zero weights
and a zero output; per-head parameters are [H] tensors (or scalars, or one value for every head).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

LINEAR_EPS = 1e-6  # the denominator's eps of linear attention and CosFormer: w = a / (sum a + eps)
SOFTPICK_EPS = 1e-6


def per_head(value, like: Tensor) -> Tensor:
    """A parameter as a float64 [H, 1, 1] (or scalar) tensor that broadcasts over [..., H, Lq, Lk]."""
    value = torch.as_tensor(value, dtype=torch.float64)
    return value.reshape(-1, 1, 1) if value.dim() and value.numel() > 1 else value.reshape(())


def allowed_keys(shape, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
    """[B, H, Lq, Lk] booleans: the keys each query may attend to."""
    q_len, kv_len = shape[-2], shape[-1]
    allowed = torch.ones(shape, dtype=torch.bool)
    if is_causal:
        allowed = allowed & torch.ones(q_len, kv_len, dtype=torch.bool).tril()
    if attn_mask is not None:
        allowed = allowed & attn_mask.cpu().bool()
    return allowed


def _softmax(x: Tensor, allowed: Tensor) -> Tensor:
    x = torch.where(allowed, x, torch.full_like(x, -math.inf))
    top = x.amax(-1, keepdim=True)
    e = torch.where(allowed, torch.exp(x - torch.where(torch.isfinite(top), top, torch.zeros_like(top))), torch.zeros_like(x))
    return e / e.sum(-1, keepdim=True).clamp_min(1e-300)


def _normalise(f: Tensor, allowed: Tensor) -> Tensor:
    f = torch.where(allowed, f, torch.zeros_like(f))
    return f / f.sum(-1, keepdim=True).clamp_min(1e-300)


def _entmax(x: Tensor, allowed: Tensor, alpha: Tensor) -> Tensor:
    """alpha-entmax: p = [(alpha - 1) x - tau]_+^(1 / (alpha - 1)), tau such that sum p = 1 (bisection; alpha = 2
    is sparsemax, the Euclidean projection onto the simplex)."""
    z = torch.where(allowed, (alpha - 1) * x, torch.full_like(x, -math.inf))
    top = torch.where(allowed.any(-1, keepdim=True), z.amax(-1, keepdim=True), torch.zeros_like(z[..., :1]))
    lo, hi = top - 1.0, top.clone()  # at tau = max - 1 the sum is >= 1, at tau = max it is 0
    power = 1.0 / (alpha - 1)
    for _ in range(200):
        tau = (lo + hi) / 2
        total = (z - tau).clamp_min(0).pow(power).sum(-1, keepdim=True)
        lo, hi = torch.where(total > 1, tau, lo), torch.where(total > 1, hi, tau)
    p = torch.where(allowed, (z - (lo + hi) / 2).clamp_min(0).pow(power), torch.zeros_like(z))
    return p / p.sum(-1, keepdim=True).clamp_min(1e-300)


def scoring_weights(name: str, scores: Tensor, allowed: Tensor | None = None, params: dict | None = None) -> Tensor:
    """The weights of scoring function `name` over scores [B, H, Lq, Lk], in float64; masked entries exactly 0."""
    x = scores.double()
    allowed = torch.ones_like(x, dtype=torch.bool) if allowed is None else allowed.expand_as(x)
    x_safe = torch.where(allowed, x, torch.zeros_like(x))  # no inf/nan from masked entries, in values or gradients
    p = {key: per_head(value, x) for key, value in (params or {}).items()}
    zero = torch.zeros_like(x)
    if name == "softmax":
        return _softmax(x, allowed)
    if name == "ssa":  # (1 + b|x|)^(sgn(x) n) / sum
        return _normalise(torch.pow(1 + p["b"] * x_safe.abs(), torch.sign(x_safe) * p["n"]), allowed)
    if name == "temperature":
        return _softmax(x / p["t"], allowed)
    if name == "ssmax":  # softmax(s log(N) x), N = the keys this row attends to
        keys = allowed.sum(-1, keepdim=True).clamp_min(1).double()
        return _softmax(p["s"] * torch.log(keys) * x, allowed)
    if name == "softmax1":  # e^x / (1 + sum e^x), shifted by max(0, max x) so that float64 holds it
        top = torch.where(allowed, x, torch.full_like(x, -math.inf)).amax(-1, keepdim=True).clamp_min(0)
        e = torch.where(allowed, torch.exp(x_safe - top), zero)
        return e / (torch.exp(-top) + e.sum(-1, keepdim=True))
    if name == "sigmoid":  # sigmoid(x - log n), n the sequence length (or the fixed `length`)
        length = p.get("length", torch.tensor(float(x.shape[-1]), dtype=torch.float64))
        return torch.where(allowed, 1 / (1 + torch.exp(-(x_safe - torch.log(length)))), zero)
    if name == "softpick":  # relu(e^x - 1) / (sum |e^x - 1| + eps), numerator and denominator times e^-m
        top = torch.where(allowed, x, torch.full_like(x, -math.inf)).amax(-1, keepdim=True).clamp_min(0)
        c = torch.where(allowed, torch.exp(x_safe - top) - torch.exp(-top), zero)
        return c.clamp_min(0) / (c.abs().sum(-1, keepdim=True) + SOFTPICK_EPS * torch.exp(-top))
    if name == "sa_softmax":
        return x_safe * _softmax(x, allowed)
    if name == "sparsemax":
        return _entmax(x, allowed, torch.tensor(2.0, dtype=torch.float64))
    if name == "entmax15":
        return _entmax(x, allowed, torch.tensor(1.5, dtype=torch.float64))
    if name == "entmax_alpha":
        return _entmax(x, allowed, p["alpha"])
    raise KeyError(f"the oracle has no formula for {name!r}: add it here")


def expand_kv(t: Tensor, heads: int) -> Tensor:
    """Key/value heads repeated to the query heads (grouped-query attention)."""
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def attention(q, k, v, scoring="ssa", params=None, attn_mask=None, is_causal=False, scale=None):
    """(out, weights) in float64: weights = scoring(scale q k^T) over the allowed keys, out = weights v."""
    q, k, v = q.double(), expand_kv(k.double(), q.shape[1]), expand_kv(v.double(), q.shape[1])
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = scale * q @ k.transpose(-1, -2)
    weights = scoring_weights(scoring, scores, allowed_keys(scores.shape, attn_mask, is_causal), params)
    return weights @ v, weights


def linear_attention(q, k, v, name, params=None, allowed=None, query_positions=None):
    """(out, weights) of `linear` (phi = elu + 1) or `cosformer` (phi = relu, times cos(pi/2 (i - j) / m)) in
    float64: a_ij = phi(q_i) . phi(k_j) r(i, j) over the allowed keys, w = a / (sum a + eps). No score scale.
    Query positions default to the last Lq of the Lk key positions."""
    q, k, v = q.double(), expand_kv(k.double(), q.shape[1]), expand_kv(v.double(), q.shape[1])
    q_len, kv_len = q.shape[2], k.shape[2]
    if name == "linear":
        phi = lambda x: torch.nn.functional.elu(x) + 1  # noqa: E731
    elif name == "cosformer":
        phi = lambda x: x.clamp_min(0)  # noqa: E731
    else:
        raise KeyError(f"the oracle has no linear attention named {name!r}")
    a = phi(q) @ phi(k).transpose(-1, -2)
    if name == "cosformer":
        positions = torch.arange(q_len) + (kv_len - q_len) if query_positions is None else query_positions
        distance = (positions[:, None] - torch.arange(kv_len)[None, :]).double()
        a = a * torch.cos(math.pi / 2 * distance / per_head(params["m"], a))
    allowed = allowed_keys(a.shape, allowed)
    a = torch.where(allowed, a, torch.zeros_like(a))
    weights = a / (a.sum(-1, keepdim=True) + LINEAR_EPS)
    return weights @ v, weights
