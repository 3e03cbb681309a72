"""Memory-efficient blockwise attention (SSA or softmax) for CPU training.

A FlashAttention-style kernel: PyTorch for the matrix products and the loop over tiles, a small C kernel for
the elementwise work on each tile:

* queries and keys are processed in tiles of ``block_size`` positions; the (batch, key/value head) pairs are
  split into groups so that one batched matmul holds about ``_TILE_ELEMS`` scores (small enough to stay in
  cache, large enough to amortise Python and threading overheads); tiles that a causal or boolean mask hides
  completely are skipped, fully visible tiles run without a mask;
* the forward saves only the output and the row logsumexp (memory linear in the sequence length: no [L, L]
  matrix per head is ever formed, only one tile of a few MB at a time);
* the backward recomputes every tile and returns gradients for query, key, value and the per-head SSA
  parameters ``b`` and ``n``;
* the per-tile elementwise work between the matrix products (g, mask, exp, row sums; in the backward P, dS and
  the per-row dn terms) is one pass over each tile of scores, done in place by the C kernels of native.py
  (compiled once per machine; float32) or, for float64 or without a C compiler, by the same math in torch ops
  (``_TorchTiles``, also the readable statement of what the C code computes).

SSA weights are ``softmax(g(s))`` with ``s = scale * q.k`` and ``g(s) = n * sign(s) * log(1 + b * |s|)``.
Masked positions get weight exactly 0, never a finite bias; a query row with no visible key returns 0 and
receives zero gradients.

Inference on small problems (no gradient, B*H*Lq*Lk <= _DIRECT_MAX_SCORES, e.g. decoding steps) skips the
tiling: one [Lq, Lk] block per head in a few eager ops, grouped-query heads as a batched matmul.

Row maximum.  For SSA, |g(s)| <= |n| * log(1 + b * scale * |q| * max|k|) (Cauchy-Schwarz), a bound that is
known before any score is computed.  When it is small enough that exp(g - bound) cannot underflow
(bound <= 40 for every row, i.e. any sane model), the forward uses it as a fixed row offset: one pass per
tile, no running maximum and no rescaling of the partial output.  Otherwise (and for softmax when its bound
is large) the forward falls back to the classic online maximum.  Either way the saved logsumexp is exact.

This file imports only torch, the standard library and its sibling native.py: it is copied next to saved
checkpoints as remote code.
"""

import math

import torch

from .native import load_native_tiles, native_enabled, set_native_enabled

__all__ = ["blockwise_attention", "set_native_enabled", "native_enabled", "SUPPORTED_SCORING"]

SUPPORTED_SCORING = ("ssa", "softmax")

_NEG_INF = float("-inf")
_POS_INF = float("inf")
# largest row bound for the fixed-offset forward: exp(-2 * 40) is still a normal float32
_STATIC_BOUND_MAX = 40.0
# inference problems up to this many scores (B*H*Lq*Lk) skip tiling (see _direct_forward)
_DIRECT_MAX_SCORES = 1 << 20
# scores per tile call (all heads of a group together); see _head_groups
_TILE_ELEMS = 1 << 18


# ----------------------------------------------------------------------------------------------------------
# Per-tile elementwise functions.  Shapes (5-D views of the batched tile matmuls):
#   s, dp:              [B, Hkv, R, G, C]  raw q.k (unscaled) / dO.v for R query positions, G query heads per
#                                          key/value head, C keys
#   b, n:               [1, Hkv, 1, G, 1]  per-head SSA parameters (ignored for softmax)
#   mask:               bool, broadcastable to s (True = attend); absent when the tile is fully visible
#   bound, m, l, lse, delta: [B, Hkv, R, G]
# ----------------------------------------------------------------------------------------------------------


def _g(x, b, n, ssa):
    """SSA's g(x) = n sgn(x) log(1 + b|x|) of scaled scores x (b, n broadcast to x), or x itself for softmax."""
    return torch.copysign(n * torch.log(1.0 + b * x.abs()), x) if ssa else x


def _fwd_static(s, b, n, bound, l_prev, mask, scale, ssa):
    """P = exp(g - bound) (0 where masked) and the running row sums l_prev + sum(P)."""
    p = torch.exp(_g(s * scale, b, n, ssa) - bound.unsqueeze(-1))
    if mask is not None:
        p = torch.where(mask, p, 0.0)
    return p, l_prev + p.sum(-1)


def _fwd_online(s, b, n, m_prev, l_prev, mask, scale, ssa):
    """One online-softmax step over g, P = exp(g - m_new) written over s; returns m_new, l_new, alpha."""
    if mask is None:
        s_hi = s.amax(-1)
        s_lo = s.amin(-1)
    else:
        s_hi = torch.where(mask, s, _NEG_INF).amax(-1)
        s_lo = torch.where(mask, s, _POS_INF).amin(-1)
    # g is monotone in s, so the row maximum of g is g at one of the extreme scores (one log per score, not
    # two).  A row with no visible key in this tile has s_hi = -inf.
    b4, n4 = b.squeeze(-1), n.squeeze(-1)
    g_hi, g_lo = _g(s_hi * scale, b4, n4, ssa), _g(s_lo * scale, b4, n4, ssa)
    m_tile = torch.where(s_hi == _NEG_INF, _NEG_INF, torch.maximum(g_hi, g_lo))
    m_new = torch.maximum(m_prev, m_tile)
    m_safe = torch.where(m_new == _NEG_INF, 0.0, m_new)
    p = torch.exp(_g(s * scale, b, n, ssa) - m_safe.unsqueeze(-1))
    if mask is not None:
        p = torch.where(mask, p, 0.0)
    alpha = torch.exp(m_prev - m_safe)
    l_new = l_prev * alpha + p.sum(-1)
    s.copy_(p)
    return m_new, l_new, alpha


def _bwd(s, dp, lse, delta, b, n, mask, scale, ssa, need_bn):
    """Recompute one tile: returns P, dS (gradient w.r.t. the raw q.k, scale included) and, with need_bn, the
    row sums of dL/dg * g ([B, Hkv, R, G]; dL/dn of a head is their sum over its rows divided by n).

    dL/db needs no reduction here: dL/db = sum(dS * s_raw) / b = sum_rows(q . dq) / b (see _run_backward)."""
    x = s * scale
    if ssa:
        y = 1.0 + b * x.abs()
        g = torch.copysign(n * torch.log(y), x)
    else:
        g = x
    p = torch.exp(g - lse.unsqueeze(-1))
    if mask is not None:
        p = torch.where(mask, p, 0.0)
    dg = p * (dp - delta.unsqueeze(-1))
    if not ssa:
        return p, dg * scale
    ds = dg * ((n * b * scale) / y)
    if not need_bn:
        return p, ds
    # dg/dn = sign(x) log(1 + b|x|) = g / n
    return p, ds, (dg * g).sum(-1)


class _TileMask:
    """The visible part of a tile that is neither fully hidden nor fully visible.

    ``tensor``: bool, broadcastable to [gb, gh, R, G, C], contiguous, of shape [1|gb, 1|gh, R, 1|G, C] (what the
    torch tiles use).  ``causal_offset``: set when the tile is exactly the causal pattern (key column c of query
    row r visible iff c <= r + causal_offset, no other mask): the native kernel then reads no mask at all."""

    __slots__ = ("tensor", "causal_offset")

    def __init__(self, tensor, causal_offset=None):
        self.tensor = tensor
        self.causal_offset = causal_offset


class _TorchTiles:
    """The per-tile elementwise work in torch ops (float64, and where the native kernels are unavailable).
    Same interface and results as _NativeTiles: m and l are updated in place, P (and dS) are returned."""

    def __init__(self, ssa, scale):
        self.ssa, self.scale = ssa, scale

    def fwd(self, s, s5, bg, ng, m, l, tm, static):
        mask = None if tm is None else tm.tensor
        if static:
            p, l_new = _fwd_static(s5, bg, ng, m, l, mask, self.scale, self.ssa)
            l.copy_(l_new)
            return p.view(s.shape), None
        m_new, l_new, alpha = _fwd_online(s5, bg, ng, m, l, mask, self.scale, self.ssa)
        m.copy_(m_new)
        l.copy_(l_new)
        return s, alpha

    def bwd(self, s, dp, s5, dp5, lse, delta, bg, ng, tm, dn):
        mask = None if tm is None else tm.tensor
        out = _bwd(s5, dp5, lse, delta, bg, ng, mask, self.scale, self.ssa, dn is not None)
        if dn is not None:
            dn += out[2]
        return out[0].view(s.shape), out[1].view(s.shape)


class _NativeTiles:
    """The per-tile elementwise work in the compiled C kernels of native.py (float32): P over s, dS over dP."""

    def __init__(self, kernels, ssa, scale):
        self.k, self.ssa, self.scale = kernels, ssa, scale

    @staticmethod
    def _mask(tm):
        if tm is None:
            return None, None
        if tm.causal_offset is not None:
            return tm.causal_offset, None
        return None, tm.tensor

    def _params(self, bg, ng):
        if not self.ssa:
            return None, None
        return bg.reshape(-1), ng.reshape(-1)  # [1, gh, 1, G, 1] slices of contiguous [1, Hkv, 1, G, 1]

    def fwd(self, s, s5, bg, ng, m, l, tm, static):
        causal_offset, mask = self._mask(tm)
        b, n = self._params(bg, ng)
        alpha = None if static else torch.empty_like(l)
        self.k.fwd(s, bg.shape[1], bg.shape[3], b, n, self.scale, causal_offset, mask, not static, m, l, alpha)
        return s, alpha

    def bwd(self, s, dp, s5, dp5, lse, delta, bg, ng, tm, dn):
        causal_offset, mask = self._mask(tm)
        b, n = self._params(bg, ng)
        self.k.bwd(s, dp, bg.shape[1], bg.shape[3], b, n, self.scale, causal_offset, mask, lse, delta, dn)
        return s, dp


def _tile_ops(dtype, ssa, scale, finite=True):
    """Native kernels for float32 where they are available, torch ops otherwise.  `finite`: every score of the
    call is finite (the native kernels assume it; inf/NaN inputs go through torch ops and propagate as there)."""
    if dtype == torch.float32 and finite:
        kernels = load_native_tiles()
        if kernels is not None:
            return _NativeTiles(kernels, ssa, scale)
    return _TorchTiles(ssa, scale)


# ----------------------------------------------------------------------------------------------------------
# Tiling
# ----------------------------------------------------------------------------------------------------------


def _tiles(length, size):
    return [(start, min(start + size, length)) for start in range(0, length, size)]


class _Masks:
    """Per-call tile masks: causal (top-left aligned: query i sees keys j <= i) AND the boolean attn_mask."""

    def __init__(self, mask5, causal, device):
        self.mask5 = mask5
        self.causal = causal
        self.device = device
        self._cache = {}

    def tile(self, i0, i1, j0, j1, b0, b1, h0, h1):
        """Returns False (nothing visible), None (all visible) or a _TileMask for the tile of the
        (batch, key/value head) group [b0, b1) x [h0, h1)."""
        causal = self._causal(i0, i1, j0, j1)
        if causal is False or self.mask5 is None:
            return causal
        m5 = self.mask5
        mb = slice(b0, b1) if m5.shape[0] > 1 else slice(0, 1)
        mh = slice(h0, h1) if m5.shape[1] > 1 else slice(0, 1)
        mt = m5[mb, mh, i0:i1, :, j0:j1]
        if causal is not None:
            mt = mt & causal.tensor
        if not bool(mt.any()):
            return False
        if bool(mt.all()):
            return None
        return _TileMask(mt.contiguous())

    def _causal(self, i0, i1, j0, j1):
        if not self.causal:
            return None
        if j0 > i1 - 1:
            return False
        if j1 - 1 <= i0:
            return None
        key = (i0, i1, j0, j1)
        hit = self._cache.get(key)
        if hit is None:
            rows = torch.arange(i0, i1, device=self.device)
            cols = torch.arange(j0, j1, device=self.device)
            tensor = (cols.unsqueeze(0) <= rows.unsqueeze(1)).view(1, 1, i1 - i0, 1, j1 - j0)
            hit = self._cache[key] = _TileMask(tensor, causal_offset=i0 - j0)
        return hit


def _row_bound(q, k, b5, n5, scale, B, Hkv, G, ssa):
    """Upper bound of |g| per query row, [B, Hkv, Lq, G] (see the module docstring)."""
    N, LqG, _ = q.shape
    qn = torch.linalg.vector_norm(q, dim=-1).view(B, Hkv, LqG // G, G)
    kmax = torch.linalg.vector_norm(k, dim=-1).amax(-1).view(B, Hkv, 1, 1)
    x = qn * (kmax * abs(scale))
    if not ssa:
        return x
    return n5.squeeze(-1).abs() * torch.log1p(b5.squeeze(-1) * x)


def _divisor_at_most(n, limit):
    limit = max(1, min(n, limit))
    while n % limit:
        limit -= 1
    return limit


def _head_groups(B, Hkv, G, bq, bk):
    """Split the B*Hkv (batch, key/value head) pairs into rectangular groups, each a contiguous range of the
    flattened index, so that one tile of a group holds about _TILE_ELEMS scores.  Small per-call problems keep
    the batched matmuls' operands in cache (measured: 2 x [256 x 256] runs ~1.5x faster than 32 x [128 x 128])."""
    want = max(1, _TILE_ELEMS // max(1, G * bq * bk))
    if want >= Hkv:
        gb, gh = _divisor_at_most(B, want // Hkv), Hkv
    else:
        gb, gh = 1, _divisor_at_most(Hkv, want)
    return [(b0, b0 + gb, h0, h0 + gh) for b0 in range(0, B, gb) for h0 in range(0, Hkv, gh)]


def _run_forward(q, k, v, b5, n5, masks, scale, bq, bk, B, Hkv, G, need_lse, ssa):
    """q: [N, Lq*G, D] with rows ordered (position, group head); k, v: [N, Lk, D].  Returns o, lse (or None) and
    whether every score was finite (the backward picks its tile code from it)."""
    N, LqG, _ = q.shape
    Lq = LqG // G
    Lk = k.shape[1]
    Dv = v.shape[-1]
    o = q.new_empty((N, LqG, Dv))
    lse = q.new_empty((N, LqG)) if need_lse else None
    lse4 = lse.view(B, Hkv, Lq, G) if need_lse else None
    bound = _row_bound(q, k, b5, n5, scale, B, Hkv, G, ssa)
    finite = bool(torch.isfinite(bound).all())  # |score| <= bound: every score is finite
    static = finite and float(bound.max()) <= _STATIC_BOUND_MAX
    ops = _tile_ops(q.dtype, ssa, scale, finite)
    qtiles, ktiles = _tiles(Lq, bq), _tiles(Lk, bk)
    for b0, b1, h0, h1 in _head_groups(B, Hkv, G, bq, bk):
        gb, gh = b1 - b0, h1 - h0
        n0, nn = b0 * Hkv + h0, (b1 - b0) * (h1 - h0)
        qg = q[n0:n0 + nn]
        kgt = k[n0:n0 + nn].transpose(1, 2)
        kts = [kgt[:, :, j0:j1] for j0, j1 in ktiles]
        vs = [v[n0:n0 + nn, j0:j1] for j0, j1 in ktiles]
        bg, ng = b5[:, h0:h1], n5[:, h0:h1]
        sbuf = q.new_empty((nn, bq * G, bk))
        sbuf5 = sbuf.view(gb, gh, bq, G, bk)
        for i0, i1 in qtiles:
            R = i1 - i0
            rows = slice(i0 * G, i1 * G)
            qi = qg[:, rows]
            acc = None
            l = q.new_zeros((gb, gh, R, G))
            if static:
                m = bound[b0:b1, h0:h1, i0:i1].contiguous()
            else:
                m = q.new_full((gb, gh, R, G), _NEG_INF)
            for jt, (j0, j1) in enumerate(ktiles):
                mt = masks.tile(i0, i1, j0, j1, b0, b1, h0, h1)
                if mt is False:
                    continue
                C = j1 - j0
                if R == bq and C == bk:
                    s, s5 = sbuf, sbuf5
                else:
                    s = q.new_empty((nn, R * G, C))
                    s5 = s.view(gb, gh, R, G, C)
                torch.bmm(qi, kts[jt], out=s)
                p, alpha = ops.fwd(s, s5, bg, ng, m, l, mt, static)
                if alpha is not None and acc is not None:
                    acc.mul_(alpha.view(nn, R * G, 1))
                if acc is None:
                    acc = torch.bmm(p, vs[jt])
                else:
                    acc.baddbmm_(p, vs[jt])
            empty = l == 0
            if acc is None:
                o[n0:n0 + nn, rows] = 0.0
            else:
                l_safe = torch.where(empty, 1.0, l)
                torch.div(acc, l_safe.view(nn, R * G, 1), out=o[n0:n0 + nn, rows])
            if need_lse:
                if static:
                    lse4[b0:b1, h0:h1, i0:i1] = torch.where(empty, _POS_INF, m + torch.log(l))
                else:
                    m_fin = torch.where(m == _NEG_INF, 0.0, m)
                    lse4[b0:b1, h0:h1, i0:i1] = torch.where(empty, _POS_INF, m_fin + torch.log(l))
    return o, lse, finite


def _run_backward(q, k, v, o, lse, do, b5, n5, masks, scale, bq, bk, B, Hkv, G, need_bn, ssa, finite):
    """Gradients of one call; `finite`: the forward found every score finite (see _tile_ops)."""
    N, LqG, D = q.shape
    Lq = LqG // G
    Lk = k.shape[1]
    Dv = v.shape[-1]
    qtiles, ktiles = _tiles(Lq, bq), _tiles(Lk, bk)
    delta = q.new_empty((N, LqG))
    for i0, i1 in qtiles:  # rowsum(dO * O), tile by tile: no [N, L, D] temporary
        rows = slice(i0 * G, i1 * G)
        torch.sum(do[:, rows] * o[:, rows], dim=-1, out=delta[:, rows])
    delta4 = delta.view(B, Hkv, Lq, G)
    lse4 = lse.view(B, Hkv, Lq, G)
    dq = q.new_empty((N, LqG, D))
    dk = q.new_empty((N, Lk, D))
    dv = q.new_empty((N, Lk, Dv))
    need_bn = bool(need_bn and ssa)
    dn_rows = q.new_zeros((B, Hkv, Lq, G)) if need_bn else None
    ops = _tile_ops(q.dtype, ssa, scale, finite)
    for b0, b1, h0, h1 in _head_groups(B, Hkv, G, bq, bk):
        gb, gh = b1 - b0, h1 - h0
        n0, nn = b0 * Hkv + h0, (b1 - b0) * (h1 - h0)
        qg, dog = q[n0:n0 + nn], do[n0:n0 + nn]
        kg, vg = k[n0:n0 + nn], v[n0:n0 + nn]
        bg, ng = b5[:, h0:h1], n5[:, h0:h1]
        # per query tile: operands and (contiguous) row arrays, sliced once
        qis = [qg[:, i0 * G:i1 * G] for i0, i1 in qtiles]
        dois = [dog[:, i0 * G:i1 * G] for i0, i1 in qtiles]
        lses = [lse4[b0:b1, h0:h1, i0:i1].contiguous() for i0, i1 in qtiles]
        deltas = [delta4[b0:b1, h0:h1, i0:i1].contiguous() for i0, i1 in qtiles]
        dns = [q.new_zeros((gb, gh, i1 - i0, G)) for i0, i1 in qtiles] if need_bn else None
        dqs = [None] * len(qtiles)
        sbuf = q.new_empty((nn, bq * G, bk))
        dpbuf = q.new_empty((nn, bq * G, bk))
        sbuf5 = sbuf.view(gb, gh, bq, G, bk)
        dpbuf5 = dpbuf.view(gb, gh, bq, G, bk)
        for j0, j1 in ktiles:
            C = j1 - j0
            kj = kg[:, j0:j1]
            kjt = kj.transpose(1, 2)
            vjt = vg[:, j0:j1].transpose(1, 2)
            dk_j = dv_j = None
            for t, (i0, i1) in enumerate(qtiles):
                mt = masks.tile(i0, i1, j0, j1, b0, b1, h0, h1)
                if mt is False:
                    continue
                R = i1 - i0
                if R == bq and C == bk:
                    s, dp, s5, dp5 = sbuf, dpbuf, sbuf5, dpbuf5
                else:
                    s = q.new_empty((nn, R * G, C))
                    dp = q.new_empty((nn, R * G, C))
                    s5, dp5 = s.view(gb, gh, R, G, C), dp.view(gb, gh, R, G, C)
                qi, doi = qis[t], dois[t]
                torch.bmm(qi, kjt, out=s)
                torch.bmm(doi, vjt, out=dp)
                p, ds = ops.bwd(s, dp, s5, dp5, lses[t], deltas[t], bg, ng, mt, dns[t] if need_bn else None)
                if dv_j is None:
                    dv_j = torch.bmm(p.transpose(1, 2), doi)
                    dk_j = torch.bmm(ds.transpose(1, 2), qi)
                else:
                    dv_j.baddbmm_(p.transpose(1, 2), doi)
                    dk_j.baddbmm_(ds.transpose(1, 2), qi)
                if dqs[t] is None:
                    dqs[t] = torch.bmm(ds, kj)
                else:
                    dqs[t].baddbmm_(ds, kj)
            if dv_j is None:
                dk[n0:n0 + nn, j0:j1] = 0.0
                dv[n0:n0 + nn, j0:j1] = 0.0
            else:
                dk[n0:n0 + nn, j0:j1] = dk_j
                dv[n0:n0 + nn, j0:j1] = dv_j
        for t, (i0, i1) in enumerate(qtiles):
            dq[n0:n0 + nn, i0 * G:i1 * G] = 0.0 if dqs[t] is None else dqs[t]
            if need_bn:
                dn_rows[b0:b1, h0:h1, i0:i1] = dns[t]
    dn = db = None
    if need_bn:
        # per-head sums in float64 (the per-row terms are float32 sums over at most Lk terms)
        n2 = n5.reshape(Hkv, G).to(torch.float64)
        b2 = b5.reshape(Hkv, G).to(torch.float64)
        dn = dn_rows.to(torch.float64).sum(dim=(0, 2)) / n2
        # sum(dS * s_raw) over a head's tiles equals sum over its rows of q . dq, since dq = dS k and s_raw = q k
        qdq = torch.empty((N, LqG), dtype=q.dtype, device=q.device)
        for i0, i1 in qtiles:  # tile by tile: no [N, L, D] temporary
            rows = slice(i0 * G, i1 * G)
            torch.sum(q[:, rows] * dq[:, rows], dim=-1, out=qdq[:, rows])
        db = qdq.view(B, Hkv, Lq, G).to(torch.float64).sum(dim=(0, 2)) / b2
    return dq, dk, dv, dn, db


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


def _prepare(query, key, value, b, n, B, Hkv, G):
    cd = _compute_dtype(query.dtype)
    q = _to_rows(query, B, Hkv, G, cd)
    k = key.to(cd).contiguous().view(B * Hkv, key.shape[2], key.shape[3])
    v = value.to(cd).contiguous().view(B * Hkv, value.shape[2], value.shape[3])
    ones = torch.ones((1, Hkv, 1, G, 1), dtype=cd, device=query.device) if b is None or n is None else None
    b5 = ones if b is None else b.to(cd).reshape(1, Hkv, 1, G, 1).contiguous()  # the native kernels read raw memory
    n5 = ones if n is None else n.to(cd).reshape(1, Hkv, 1, G, 1).contiguous()
    return q, k, v, b5, n5


class _BlockwiseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, b, n, mask5, causal, scale, bq, bk, ssa):
        B, H = query.shape[:2]
        Hkv = key.shape[1]
        G = H // Hkv
        q, k, v, b5, n5 = _prepare(query, key, value, b, n, B, Hkv, G)
        with torch.no_grad():
            masks = _Masks(mask5, causal, query.device)
            o, lse, finite = _run_forward(q, k, v, b5, n5, masks, scale, bq, bk, B, Hkv, G, True, ssa)
        ctx.save_for_backward(q, k, v, o, lse, b5, n5, mask5)
        ctx.meta = (causal, scale, bq, bk, B, Hkv, G, ssa, finite, query.dtype, key.dtype, value.dtype, key.shape,
                    value.shape, None if b is None else b.dtype, None if n is None else n.dtype)
        return _from_rows(o, B, Hkv, G, query.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, o, lse, b5, n5, mask5 = ctx.saved_tensors
        causal, scale, bq, bk, B, Hkv, G, ssa, finite, qdt, kdt, vdt, kshape, vshape, bdt, ndt = ctx.meta
        need_bn = ssa and (ctx.needs_input_grad[3] or ctx.needs_input_grad[4])
        do = _to_rows(grad_out, B, Hkv, G, q.dtype)
        masks = _Masks(mask5, causal, q.device)
        dq, dk, dv, dn, db = _run_backward(q, k, v, o, lse, do, b5, n5, masks, scale, bq, bk, B, Hkv, G, need_bn,
                                           ssa, finite)
        dq = _from_rows(dq, B, Hkv, G, qdt)
        dk = dk.view(kshape).to(kdt)
        dv = dv.view(vshape).to(vdt)
        gb = gn = None
        if need_bn:
            gn = dn.reshape(-1).to(ndt) if ctx.needs_input_grad[4] else None
            gb = db.reshape(-1).to(bdt) if ctx.needs_input_grad[3] else None
        return dq, dk, dv, gb, gn, None, None, None, None, None, None


def _direct_native(kernels, query, key, value, b, n, mask5, causal, scale, ssa):
    """_direct_forward on the native kernel: the [Lq*G, Lk] scores of each (batch, key/value head) as one tile,
    one pass that exponentiates, masks and sums them (online row maximum), and the product with the values.
    Returns None when a score is not finite (the caller then runs _direct_forward)."""
    B, H, Lq, D = query.shape
    Hkv, Lk = key.shape[1], key.shape[2]
    G = H // Hkv
    q, k, v, b5, n5 = _prepare(query, key, value, b, n, B, Hkv, G)
    s = torch.bmm(q, k.transpose(1, 2))  # [B*Hkv, Lq*G, Lk], rows ordered (position, group head)
    if not math.isfinite(float(s.sum())):  # one cheap reduction (a finite sum that overflows only costs speed)
        return None
    mask = None
    if mask5 is not None:
        mask = mask5 if mask5.is_contiguous() else mask5.contiguous()
    rows = s.shape[0] * s.shape[1]
    m = s.new_full((rows,), _NEG_INF)
    l = s.new_zeros((rows,))
    alpha = s.new_empty((rows,))
    kernels.fwd(s, Hkv, G, b5.reshape(-1) if ssa else None, n5.reshape(-1) if ssa else None, scale,
                0 if causal and mask is None else None, _causal_and(mask, causal, Lq, Lk), True, m, l, alpha)
    o = torch.bmm(s, v)
    # with the online maximum every row with a visible key has l >= 1; rows without one have o = 0 and l = 0
    o.div_(l.clamp_min_(1.0).view(o.shape[0], o.shape[1], 1))
    return _from_rows(o, B, Hkv, G, query.dtype)


def _decode_native(kernels, query, key, value, b, n, mask5, scale):
    """One query position (a decoding step) on the native decode kernel: scores, SSA/softmax weights and the
    weighted sum of the values in one pass over the cache per (batch, key/value head).  Kept lean: at short
    caches the Python around the kernel is a good part of the cost."""
    B, H, _, D = query.shape
    Hkv, Lk, Dv = key.shape[1], key.shape[2], value.shape[3]
    G = H // Hkv
    f32 = torch.float32
    q = query.reshape(B * Hkv, G, D).to(f32).contiguous()
    k = key.reshape(B * Hkv, Lk, D).to(f32).contiguous()
    v = value.reshape(B * Hkv, Lk, Dv).to(f32).contiguous()
    out = torch.empty((B, H, 1, Dv), dtype=f32, device=query.device)
    work = torch.empty((B * Hkv, G, Lk), dtype=f32, device=query.device)
    kernels.decode(q, k, v, out, work, Hkv, b, n, scale, None if mask5 is None else mask5.contiguous())
    return out.to(query.dtype)


def _causal_and(mask5, causal, Lq, Lk):
    """The 5-D bool mask AND the top-left causal pattern (None when there is no explicit mask)."""
    if mask5 is None:
        return None
    if not causal:
        return mask5
    tri = torch.ones(Lq, Lk, dtype=torch.bool, device=mask5.device).tril().view(1, 1, Lq, 1, Lk)
    return (mask5 & tri).contiguous()


def _direct_forward(query, key, value, b, n, attn_mask, causal, scale, ssa):
    """Inference on a small problem (decoding steps, short prompts): the whole [Lq, Lk] score block per head in
    a few eager ops, grouped-query heads as a batched matmul (no copies of key/value).  Same math and masking
    rules as the tiled path: weights exactly 0 where masked, rows without a visible key return 0."""
    B, H, Lq, D = query.shape
    Hkv, Lk = key.shape[1], key.shape[2]
    G = H // Hkv
    cd = _compute_dtype(query.dtype)
    q = query.to(cd).reshape(B, Hkv, G * Lq, D)
    x = torch.matmul(q, key.to(cd).transpose(-1, -2))  # [B, Hkv, G*Lq, Lk]
    x.mul_(scale)
    if ssa:
        b5 = b.to(cd).reshape(1, Hkv, G, 1, 1)
        n5 = n.to(cd).reshape(1, Hkv, G, 1, 1)
        x5 = x.view(B, Hkv, G, Lq, Lk)
        g = torch.log1p(x5.abs().mul_(b5)).mul_(n5).copysign_(x5).view(B, Hkv, G * Lq, Lk)
    else:
        g = x
    keep = None
    if attn_mask is not None:
        m = attn_mask
        while m.dim() < 4:
            m = m.unsqueeze(0)
        if m.shape[1] == 1:
            keep = m.expand(m.shape[0], 1, Lq, Lk).unsqueeze(2)  # [b, 1, 1, Lq, Lk]
        else:
            keep = m.expand(m.shape[0], H, Lq, Lk).reshape(m.shape[0], Hkv, G, Lq, Lk)
    if causal:
        tri = torch.ones(Lq, Lk, dtype=torch.bool, device=query.device).tril()
        keep = tri if keep is None else keep & tri
    if keep is not None:
        g = g.view(B, Hkv, G, Lq, Lk).masked_fill(~keep, _NEG_INF).view(B, Hkv, G * Lq, Lk)
    w = torch.softmax(g, dim=-1)
    if keep is not None:  # rows without a visible key: 0, not NaN (NaN from NaN inputs stays NaN)
        w = w.view(B, Hkv, G, Lq, Lk).masked_fill(~keep.any(-1, keepdim=True), 0.0).view(B, Hkv, G * Lq, Lk)
    out = torch.matmul(w, value.to(cd))  # [B, Hkv, G*Lq, Dv]
    return out.view(B, H, Lq, value.shape[-1]).to(query.dtype)


# ----------------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------------


def _as_head_param(x, H, name, like):
    if x is None:
        raise ValueError(f"blockwise_attention: scoring='ssa' needs `{name}`")
    dtype = _compute_dtype(like.dtype)
    if not torch.is_tensor(x):
        return torch.full((H,), float(x), dtype=dtype, device=like.device)
    if x.dtype != dtype or x.device != like.device:
        x = x.to(device=like.device, dtype=dtype)
    if x.numel() == 1:
        return x.reshape(1).expand(H).contiguous()  # contiguous: the native kernels read raw memory
    if x.numel() != H:
        raise ValueError(f"blockwise_attention: `{name}` must have one value per head ({H}), got shape {tuple(x.shape)}")
    return x.reshape(H).contiguous()


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
    if mb not in (1, B) or mh not in (1, H) or m.shape[2] not in (1, Lq) or m.shape[3] not in (1, Lk):
        raise ValueError(f"blockwise_attention: attn_mask of shape {tuple(attn_mask.shape)} is not broadcastable "
                         f"to {(B, H, Lq, Lk)}")
    m = m.expand(mb, mh, Lq, Lk)
    if mh == 1:
        return m.unsqueeze(3)  # [mb, 1, Lq, 1, Lk]
    G = H // Hkv
    return m.reshape(mb, Hkv, G, Lq, Lk).permute(0, 1, 3, 2, 4)


def blockwise_attention(query, key, value, b=None, n=None, attn_mask=None, is_causal=False, scale=None,
                        scoring="ssa", block_size=None):
    """Memory-efficient attention with SSA (``softmax(g(s))``) or softmax scoring.

    Args:
        query: [B, H, Lq, D]; key: [B, Hkv, Lk, D]; value: [B, Hkv, Lk, Dv], with H % Hkv == 0 (grouped-query
            attention is handled natively; key/value gradients are summed over each group).
        b, n: SSA parameters, float tensors of shape [H] (or one value) or python floats; gradients are returned
            when they require grad.  Ignored for ``scoring="softmax"``.
        attn_mask: None or bool tensor broadcastable to [B, H, Lq, Lk], True = attend.
        is_causal: top-left aligned causal mask as in ``F.scaled_dot_product_attention`` (query i sees keys
            j <= i); combined with ``attn_mask`` by AND when both are given.  Prefer it to an explicit causal
            mask: fully hidden tiles are then skipped without reading a mask.
        scale: score scale, default 1/sqrt(D).
        scoring: "ssa" or "softmax".
        block_size: tile size, an int (queries and keys) or a pair (query tile, key tile).  Default: 128 up to
            1024 keys, 256 beyond (measured on a 2-core CPU: larger tiles run the matmuls faster, smaller ones
            waste less of the diagonal tiles of a causal mask).

    Returns [B, H, Lq, Dv] in the query dtype (computed in float32; float64 inputs in float64).  Rows without
    any visible key are 0.
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
    if block_size is None:
        block_size = 128 if Lk <= 1024 else 256
    if isinstance(block_size, (tuple, list)):
        bq, bk = (int(x) for x in block_size)
    else:
        bq = bk = int(block_size)
    if bq < 1 or bk < 1:
        raise ValueError("blockwise_attention: block_size must be positive")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    scale = float(scale)
    ssa = scoring == "ssa"
    if ssa:
        b = _as_head_param(b, H, "b", query)
        n = _as_head_param(n, H, "n", query)
    else:
        b = n = None
    mask5 = None
    if attn_mask is not None:
        mask5 = _mask_to_5d(attn_mask.to(query.device), B, H, Hkv, Lq, Lk)
    if Lq == 0 or Lk == 0:
        return query.new_zeros((B, H, Lq, value.shape[-1]))
    bq, bk = min(bq, Lq), min(bk, Lk)
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (query, key, value, b, n))
    if needs_grad:
        return _BlockwiseAttention.apply(query, key, value, b, n, mask5, bool(is_causal), scale, bq, bk, ssa)
    with torch.no_grad():
        G = H // Hkv
        kernels = load_native_tiles() if _compute_dtype(query.dtype) == torch.float32 else None
        if kernels is not None and Lq == 1 and not is_causal:
            return _decode_native(kernels, query, key, value, b, n, mask5, scale)
        if B * H * Lq * Lk <= _DIRECT_MAX_SCORES:
            out = None
            if kernels is not None:
                out = _direct_native(kernels, query, key, value, b, n, mask5, bool(is_causal), scale, ssa)
            if out is None:
                out = _direct_forward(query, key, value, b, n, attn_mask, bool(is_causal), scale, ssa)
            return out
        q, k, v, b5, n5 = _prepare(query, key, value, b, n, B, Hkv, G)
        masks = _Masks(mask5, bool(is_causal), query.device)
        o, _, _ = _run_forward(q, k, v, b5, n5, masks, scale, bq, bk, B, Hkv, G, False, ssa)
        return _from_rows(o, B, Hkv, G, query.dtype)
