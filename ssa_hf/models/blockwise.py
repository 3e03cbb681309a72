"""Memory-efficient blockwise attention (SSA or softmax) for CPU training.

A FlashAttention-style kernel written in plain PyTorch:

* queries and keys are processed in tiles (``block_size`` x ``block_size``), all batch x head pairs of a tile
  in one batched matmul; fully masked tiles (causal or boolean mask) are skipped;
* the forward keeps an online row maximum / row sum and saves only the output and the row logsumexp
  (memory linear in the sequence length, never a [L, L] matrix per head);
* the backward recomputes every tile and returns gradients for query, key, value and the per-head SSA
  parameters ``b`` and ``n``;
* the small per-tile elementwise functions are fused with ``torch.compile`` (lazily, on first use, for
  full tiles only, so only a handful of static graphs are compiled); ``SSA_HF_BLOCKWISE_COMPILE=0`` or
  ``set_blockwise_compile(False)`` runs exactly the same code eagerly.

SSA weights are ``softmax(g(s))`` with ``s = scale * q.k`` and ``g(s) = n * sign(s) * log1p(b * |s|)``.
Masked positions get weight exactly 0 (g = -inf), never a finite bias; a query row with no visible key
returns 0 and receives zero gradients.

This file imports only torch and the standard library: it is copied next to saved checkpoints as remote code.
"""

import math
import os
import warnings

import torch

__all__ = ["blockwise_attention", "set_blockwise_compile", "blockwise_compile_enabled", "SUPPORTED_SCORING"]

SUPPORTED_SCORING = ("ssa", "softmax")

_NEG_INF = float("-inf")

# None: follow the environment variable SSA_HF_BLOCKWISE_COMPILE (default on); True/False: forced.
_COMPILE_OVERRIDE = None
_COMPILE_BROKEN = False
_COMPILED = {}


def set_blockwise_compile(enabled):
    """Force torch.compile of the per-tile functions on (True) or off (False); None follows the environment."""
    global _COMPILE_OVERRIDE
    _COMPILE_OVERRIDE = None if enabled is None else bool(enabled)


def blockwise_compile_enabled():
    """Whether the per-tile elementwise functions are compiled (SSA_HF_BLOCKWISE_COMPILE, default 1)."""
    if _COMPILE_BROKEN:
        return False
    if _COMPILE_OVERRIDE is not None:
        return _COMPILE_OVERRIDE
    return os.environ.get("SSA_HF_BLOCKWISE_COMPILE", "1").strip().lower() not in ("0", "false", "no", "off", "")


# ----------------------------------------------------------------------------------------------------------
# Per-tile elementwise functions.  Shapes (5-D views of the batched tile matmuls):
#   s, dp:        [B, Hkv, R, G, C]   raw q.k (unscaled) / dO.v for R query positions, G heads per kv head, C keys
#   b, n:         [1, Hkv, 1, G, 1]   per-head SSA parameters (None for softmax)
#   mask:         bool, broadcastable to s (True = attend), or None
#   m, l, lse, delta: [B, Hkv, R, G]
# ----------------------------------------------------------------------------------------------------------


def _score(s, b, n, scale):
    """g(scale * s); for softmax (b is None) just scale * s."""
    x = s * scale
    if b is None:
        return x
    return torch.copysign(n * torch.log1p(b * x.abs()), x)


def _fwd_tile(s, b, n, mask, m_prev, l_prev, scale):
    """One online-softmax step over g, in place: s (raw scores) is overwritten with p = exp(g - m_new).

    Returns m_new, l_new and alpha = exp(m_prev - m_new) (the factor for the running output)."""
    if mask is None:
        s_hi = s.amax(-1)
        s_lo = s.amin(-1)
    else:
        s_hi = s.masked_fill(~mask, _NEG_INF).amax(-1)
        s_lo = s.masked_fill(~mask, float("inf")).amin(-1)
    # g is monotone in s, so the row maximum of g is g at one of the extreme scores; this avoids evaluating
    # log1p twice per score.  A row with no visible key in the tile gives s_hi = -inf, s_lo = +inf.
    if b is None:
        m_tile = s_hi * scale
    else:
        b4, n4 = b.squeeze(-1), n.squeeze(-1)
        m_tile = torch.maximum(_score(s_hi, b4, n4, scale), _score(s_lo, b4, n4, scale))
        if mask is not None:
            m_tile = torch.where(s_hi == _NEG_INF, _NEG_INF, m_tile)
    m_new = torch.maximum(m_prev, m_tile)
    m_safe = torch.where(m_new == _NEG_INF, 0.0, m_new)
    g = _score(s, b, n, scale)
    if mask is not None:
        g = g.masked_fill(~mask, _NEG_INF)
    p = torch.exp(g - m_safe.unsqueeze(-1))
    alpha = torch.exp(m_prev - m_safe)
    l_new = l_prev * alpha + p.sum(-1)
    s.copy_(p)
    return m_new, l_new, alpha


def _bwd_tile(s, dp, lse, delta, b, n, mask, scale, need_bn):
    """Recompute one tile in place: s (raw scores) becomes P, dp (dO.V^T) becomes dS, the gradient with respect
    to the raw scores (scale included).  Returns the per-head partial sums of dL/dn and dL/db (or None)."""
    x = s * scale
    if b is None:
        g = x
    else:
        a = x.abs()
        ba = b * a
        lg = torch.log1p(ba)
        g = torch.copysign(n * lg, x)
    if mask is not None:
        g = g.masked_fill(~mask, _NEG_INF)
    p = torch.exp(g - lse.unsqueeze(-1))
    dg = p * (dp - delta.unsqueeze(-1))
    dn = db = None
    if b is None:
        ds = dg * scale
    else:
        inv = 1.0 / (1.0 + ba)
        ds = dg * (n * b * scale) * inv
        if need_bn:
            # dg/dn = sign(x) log1p(b|x|);  dg/db = n sign(x) |x| / (1 + b|x|) = n x / (1 + b|x|)
            dn = (dg * torch.copysign(lg, x)).sum(dim=(0, 2, 4))
            db = (dg * x * inv).sum(dim=(0, 2, 4)) * n.reshape(n.shape[1], n.shape[3])
    s.copy_(p)
    dp.copy_(ds)
    return dn, db


_EAGER = {"fwd": _fwd_tile, "bwd": _bwd_tile}


def _tile_fn(name, use_compile):
    if not use_compile or not blockwise_compile_enabled():
        return _EAGER[name]
    fn = _COMPILED.get(name)
    if fn is None:
        fn = torch.compile(_EAGER[name], dynamic=False, fullgraph=True)
        _COMPILED[name] = fn
    return fn


def _call_tile(name, use_compile, *args):
    global _COMPILE_BROKEN
    fn = _tile_fn(name, use_compile)
    if fn is _EAGER[name]:
        return fn(*args)
    try:
        return fn(*args)
    except Exception as exc:  # e.g. no C++ compiler available: fall back to eager, once, loudly
        _COMPILE_BROKEN = True
        warnings.warn(f"blockwise_attention: torch.compile of the tile function failed ({exc!r}); running eagerly.")
        return _EAGER[name](*args)


# ----------------------------------------------------------------------------------------------------------
# Tiling helpers
# ----------------------------------------------------------------------------------------------------------


def _tile_mask(mask5, causal, i0, i1, j0, j1):
    """Mask for the tile (bool, broadcastable to [B, Hkv, R, G, C]) or None if fully visible; False if empty."""
    tile = None
    if causal:  # top-left aligned: query i sees keys j <= i
        if j0 > i1 - 1:
            return False
        if j1 - 1 > i0:
            rows = torch.arange(i0, i1, device=mask5.device if mask5 is not None else "cpu")
            cols = torch.arange(j0, j1, device=rows.device)
            tile = (cols.unsqueeze(0) <= rows.unsqueeze(1)).view(1, 1, i1 - i0, 1, j1 - j0)
    if mask5 is not None:
        mt = mask5[:, :, i0:i1, :, j0:j1]
        if tile is not None:
            mt = mt & tile.to(mt.device)
        if not bool(mt.any()):
            return False
        if bool(mt.all()):
            return None
        return mt.contiguous()
    return tile


def _tiles(length, size):
    return [(start, min(start + size, length)) for start in range(0, length, size)]


def _run_forward(q, k, v, b5, n5, mask5, causal, scale, bq, bk, B, Hkv, G, need_lse):
    N, LqG, _ = q.shape
    Lq = LqG // G
    Lk = k.shape[1]
    Dv = v.shape[-1]
    o = q.new_empty((N, LqG, Dv))
    lse = q.new_empty((N, LqG)) if need_lse else None
    kt = k.transpose(1, 2)
    sbuf = q.new_empty((N, bq * G, bk))  # one score tile, reused (bmm output, then P in place)
    for i0, i1 in _tiles(Lq, bq):
        R = i1 - i0
        qi = q[:, i0 * G:i1 * G]
        m = q.new_full((B, Hkv, R, G), _NEG_INF)
        l = q.new_zeros((B, Hkv, R, G))
        acc = q.new_zeros((N, R * G, Dv))
        first = True
        for j0, j1 in _tiles(Lk, bk):
            mt = _tile_mask(mask5, causal, i0, i1, j0, j1)
            if mt is False:
                continue
            C = j1 - j0
            full = R == bq and C == bk
            s = sbuf if full else q.new_empty((N, R * G, C))
            torch.bmm(qi, kt[:, :, j0:j1], out=s)
            m, l, alpha = _call_tile("fwd", full, s.view(B, Hkv, R, G, C), b5, n5, mt, m, l, scale)
            if not first:
                acc.mul_(alpha.view(N, R * G, 1))
            first = False
            acc.baddbmm_(s, v[:, j0:j1])
        empty = l == 0
        l_safe = torch.where(empty, 1.0, l)
        torch.div(acc, l_safe.view(N, R * G, 1), out=o[:, i0 * G:i1 * G])
        if need_lse:
            lse[:, i0 * G:i1 * G] = torch.where(empty, float("inf"), m + torch.log(l_safe)).view(N, R * G)
    return o, lse


def _run_backward(q, k, v, o, lse, do, b5, n5, mask5, causal, scale, bq, bk, B, Hkv, G, need_bn):
    N, LqG, D = q.shape
    Lq = LqG // G
    Lk = k.shape[1]
    Dv = v.shape[-1]
    delta = (do * o).sum(-1)
    qtiles = _tiles(Lq, bq)
    dq_t = q.new_zeros((len(qtiles), N, bq * G, D))  # tile-major so that every tile accumulates in place
    dk = q.new_empty((N, Lk, D))
    dv = q.new_empty((N, Lk, Dv))
    sbuf = q.new_empty((N, bq * G, bk))
    dpbuf = q.new_empty((N, bq * G, bk))
    dn_acc = db_acc = None
    if need_bn:
        dn_acc = torch.zeros((Hkv, G), dtype=torch.float64, device=q.device)
        db_acc = torch.zeros((Hkv, G), dtype=torch.float64, device=q.device)
    for j0, j1 in _tiles(Lk, bk):
        C = j1 - j0
        kj = k[:, j0:j1]
        kjt = kj.transpose(1, 2)
        vjt = v[:, j0:j1].transpose(1, 2)
        dk_j = q.new_zeros((N, C, D))
        dv_j = q.new_zeros((N, C, Dv))
        for t, (i0, i1) in enumerate(qtiles):
            mt = _tile_mask(mask5, causal, i0, i1, j0, j1)
            if mt is False:
                continue
            R = i1 - i0
            rows = slice(i0 * G, i1 * G)
            qi = q[:, rows]
            doi = do[:, rows]
            full = R == bq and C == bk
            s = sbuf if full else q.new_empty((N, R * G, C))
            dp = dpbuf if full else q.new_empty((N, R * G, C))
            torch.bmm(qi, kjt, out=s)
            torch.bmm(doi, vjt, out=dp)
            dn, db = _call_tile(
                "bwd", full, s.view(B, Hkv, R, G, C), dp.view(B, Hkv, R, G, C),
                lse[:, rows].view(B, Hkv, R, G), delta[:, rows].view(B, Hkv, R, G), b5, n5, mt, scale, need_bn)
            # s now holds P and dp holds dS
            dv_j.baddbmm_(s.transpose(1, 2), doi)
            dk_j.baddbmm_(dp.transpose(1, 2), qi)
            if R == bq:
                dq_t[t].baddbmm_(dp, kj)
            else:
                dq_t[t, :, :R * G] += torch.bmm(dp, kj)
            if need_bn:
                dn_acc += dn
                db_acc += db
        dk[:, j0:j1] = dk_j
        dv[:, j0:j1] = dv_j
    dq = dq_t.transpose(0, 1).reshape(N, len(qtiles) * bq * G, D)[:, :LqG]
    return dq, dk, dv, dn_acc, db_acc


# ----------------------------------------------------------------------------------------------------------
# autograd.Function
# ----------------------------------------------------------------------------------------------------------


def _compute_dtype(dtype):
    """float64 stays float64; everything else (fp32, fp16, bf16) is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _to_rows(x, B, Hkv, G, dtype):
    """[B, H, L, D] -> contiguous [B*Hkv, L*G, D] in dtype with rows ordered (position, group head)."""
    _, H, L, D = x.shape
    if G == 1:
        return x.to(dtype).contiguous().view(B * H, L, D)
    out = torch.empty((B, Hkv, L, G, D), dtype=dtype, device=x.device)
    out.copy_(x.view(B, Hkv, G, L, D).permute(0, 1, 3, 2, 4))
    return out.view(B * Hkv, L * G, D)


def _from_rows(x, B, Hkv, G, dtype):
    """Inverse of _to_rows: [B*Hkv, L*G, D] -> [B, H, L, D] in dtype."""
    N, LG, D = x.shape
    L = LG // G
    if G == 1:
        return x.view(B, Hkv, L, D).to(dtype)
    return x.view(B, Hkv, L, G, D).permute(0, 1, 3, 2, 4).reshape(B, Hkv * G, L, D).to(dtype)


class _BlockwiseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, b, n, mask5, causal, scale, bq, bk):
        B, H, Lq, D = query.shape
        Hkv = key.shape[1]
        G = H // Hkv
        cd = _compute_dtype(query.dtype)
        q = _to_rows(query, B, Hkv, G, cd)
        k = key.to(cd).contiguous().view(B * Hkv, key.shape[2], D)
        v = value.to(cd).contiguous().view(B * Hkv, value.shape[2], value.shape[3])
        b5 = None if b is None else b.to(cd).reshape(1, Hkv, 1, G, 1)
        n5 = None if n is None else n.to(cd).reshape(1, Hkv, 1, G, 1)
        with torch.no_grad():
            o, lse = _run_forward(q, k, v, b5, n5, mask5, causal, scale, bq, bk, B, Hkv, G, True)
        ctx.save_for_backward(q, k, v, o, lse, b5, n5, mask5)
        ctx.meta = (causal, scale, bq, bk, B, Hkv, G, query.dtype, key.dtype, value.dtype, key.shape, value.shape,
                    b.dtype if b is not None else None, n.dtype if n is not None else None)
        return _from_rows(o, B, Hkv, G, query.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, o, lse, b5, n5, mask5 = ctx.saved_tensors
        causal, scale, bq, bk, B, Hkv, G, qdt, kdt, vdt, kshape, vshape, bdt, ndt = ctx.meta
        need_bn = b5 is not None and (ctx.needs_input_grad[3] or ctx.needs_input_grad[4])
        do = _to_rows(grad_out, B, Hkv, G, q.dtype)
        dq, dk, dv, dn, db = _run_backward(q, k, v, o, lse, do, b5, n5, mask5, causal, scale, bq, bk, B, Hkv, G,
                                           need_bn)
        dq = _from_rows(dq, B, Hkv, G, qdt)
        dk = dk.view(kshape).to(kdt)
        dv = dv.view(vshape).to(vdt)
        gb = gn = None
        if need_bn:
            gn = dn.reshape(-1).to(ndt) if ctx.needs_input_grad[4] else None
            gb = db.reshape(-1).to(bdt) if ctx.needs_input_grad[3] else None
        return dq, dk, dv, gb, gn, None, None, None, None, None


# ----------------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------------


def _as_head_param(x, H, name, like):
    if x is None:
        raise ValueError(f"blockwise_attention: scoring='ssa' needs `{name}`")
    dtype = _compute_dtype(like.dtype)
    if not torch.is_tensor(x):
        return torch.full((H,), float(x), dtype=dtype, device=like.device)
    x = x.to(device=like.device, dtype=dtype)
    if x.numel() == 1:
        return x.reshape(1).expand(H)
    if x.numel() != H:
        raise ValueError(f"blockwise_attention: `{name}` must have one value per head ({H}), got shape {tuple(x.shape)}")
    return x.reshape(H)


def _mask_to_5d(attn_mask, B, H, Hkv, Lq, Lk):
    """bool mask broadcastable to [B, H, Lq, Lk] -> view [B|1, Hkv|1, Lq, G|1, Lk]."""
    if attn_mask.dtype != torch.bool:
        raise ValueError(
            "blockwise_attention: attn_mask must be a bool tensor (True = attend); additive float masks are not "
            "supported because SSA is not shift invariant (masked keys must get weight exactly 0)")
    m = attn_mask
    while m.dim() < 4:
        m = m.unsqueeze(0)
    if m.dim() != 4:
        raise ValueError(f"blockwise_attention: attn_mask must have at most 4 dims, got {tuple(attn_mask.shape)}")
    mb, mh = m.shape[0], m.shape[1]
    try:
        m = m.expand(mb, mh, Lq, Lk)
    except RuntimeError as exc:
        raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} is not broadcastable to "
                         f"{(B, H, Lq, Lk)}") from exc
    if mb not in (1, B) or mh not in (1, H):
        raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} is not broadcastable to {(B, H, Lq, Lk)}")
    if mh == 1:
        return m.unsqueeze(3)  # [mb, 1, Lq, 1, Lk]
    G = H // Hkv
    return m.reshape(mb, Hkv, G, Lq, Lk).permute(0, 1, 3, 2, 4)


def blockwise_attention(query, key, value, b=None, n=None, attn_mask=None, is_causal=False, scale=None,
                        scoring="ssa", block_size=128):
    """Memory-efficient attention with SSA (``softmax(g(s))``) or softmax scoring.

    Args:
        query: [B, H, Lq, D]; key: [B, Hkv, Lk, D]; value: [B, Hkv, Lk, Dv], with H % Hkv == 0 (grouped-query
            attention is handled natively; key/value gradients are summed over each group).
        b, n: SSA parameters, float tensors of shape [H] (or one value) or python floats; gradients are returned
            when they require grad.  Ignored for ``scoring="softmax"``.
        attn_mask: None or bool tensor broadcastable to [B, H, Lq, Lk], True = attend.
        is_causal: top-left aligned causal mask as in ``F.scaled_dot_product_attention`` (query i sees keys
            j <= i); combined with ``attn_mask`` by AND when both are given.
        scale: score scale, default 1/sqrt(D).
        scoring: "ssa" or "softmax".
        block_size: tile size for queries and keys.

    Returns [B, H, Lq, Dv] in the query dtype (computed in float32, float64 for float64 inputs).  Rows without any visible key are 0.
    """
    if scoring not in SUPPORTED_SCORING:
        raise ValueError(f"blockwise_attention: unsupported scoring {scoring!r}; supported: {', '.join(SUPPORTED_SCORING)}")
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("blockwise_attention: query, key and value must be 4-D [batch, heads, length, dim]")
    B, H, Lq, D = query.shape
    Bk, Hkv, Lk, Dk = key.shape
    if Bk != B or value.shape[0] != B or value.shape[1] != Hkv or value.shape[2] != Lk or Dk != D:
        raise ValueError(f"blockwise_attention: incompatible shapes query {tuple(query.shape)}, key "
                         f"{tuple(key.shape)}, value {tuple(value.shape)}")
    if Hkv == 0 or H % Hkv != 0:
        raise ValueError(f"blockwise_attention: query heads ({H}) must be a multiple of key/value heads ({Hkv})")
    block_size = int(block_size)
    if block_size < 1:
        raise ValueError("blockwise_attention: block_size must be positive")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    scale = float(scale)
    if scoring == "ssa":
        b = _as_head_param(b, H, "b", query)
        n = _as_head_param(n, H, "n", query)
    else:
        b = n = None
    mask5 = None
    if attn_mask is not None:
        mask5 = _mask_to_5d(attn_mask.to(query.device), B, H, Hkv, Lq, Lk)
    bq = min(block_size, max(Lq, 1))
    bk = min(block_size, max(Lk, 1))
    if Lq == 0 or Lk == 0:
        return query.new_zeros((B, H, Lq, value.shape[-1]))
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (query, key, value, b, n))
    if needs_grad:
        return _BlockwiseAttention.apply(query, key, value, b, n, mask5, bool(is_causal), scale, bq, bk)
    with torch.no_grad():
        G = H // Hkv
        cd = _compute_dtype(query.dtype)
        q = _to_rows(query, B, Hkv, G, cd)
        k = key.to(cd).contiguous().view(B * Hkv, Lk, D)
        v = value.to(cd).contiguous().view(B * Hkv, Lk, value.shape[-1])
        b5 = None if b is None else b.reshape(1, Hkv, 1, G, 1)
        n5 = None if n is None else n.reshape(1, Hkv, 1, G, 1)
        o, _ = _run_forward(q, k, v, b5, n5, mask5, bool(is_causal), scale, bq, bk, B, Hkv, G, False)
        return _from_rows(o, B, Hkv, G, query.dtype)
