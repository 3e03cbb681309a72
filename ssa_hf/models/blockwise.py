"""Memory-efficient attention (SSA or softmax) for CPU training and inference, as a torch custom op.

``blockwise_attention`` computes ``softmax(g(s))`` over the visible keys of each query row, with
``s = scale * q.k`` and ``g(s) = n * sign(s) * log(1 + b * |s|)`` (SSA) or ``g(s) = s`` (softmax), without ever
forming an [Lq, Lk] matrix per head: the forward saves only the output and the row logsumexp, the backward
recomputes each tile.  Masked keys get weight exactly 0, never a finite bias; a query row without a visible key
returns 0 and receives zero gradients.

Two custom ops (``torch.library``) carry the computation, so that ``torch.compile(fullgraph=True)`` and
``torch.export`` see one opaque node per direction instead of tracing the kernel:

* ``ssa_hf::attention_forward_v2(query, key, value, b, n, mask, causal, scale, block_q, block_k) -> (out, lse, res)``
* ``ssa_hf::attention_backward_v2(grad_out, query, key, value, out, lse, res, b, n, mask, causal, scale, block_q,
  block_k, need_bn) -> (dq, dk, dv, db, dn)``

``res`` is, for bfloat16, what rounding the output to bf16 dropped (``output_residual``: int8, one byte per output
element), which the backward's ``delta = rowsum(out * grad_out)`` adds back; empty for other dtypes.  The names carry
the schema's version (v2: with ``res``): checkpoints carry copies of this file, a process may import several, and
torch.library lets the last registration of a name replace the op for every copy that holds it, so copies with
another schema (``ssa_hf::attention_forward -> (out, lse)`` before 2026-12-05) must not share the name.

Their implementation runs the fused C++ kernel of native.py (float32, bfloat16 and float16 read and written in
their own dtype, with fp32 tile products, statistics and accumulation; no float32 copy of an input) or, for float64, on other devices, with non-finite inputs or where the kernel cannot be built, the same
math in torch ops in float64, one block of query rows at a time (``_torch_forward`` / ``_torch_backward``: the
plain statement of what the kernel computes, and the float64 oracle of its tests).

This file imports only torch, the standard library and its sibling native.py: it is copied next to saved
checkpoints as remote code.
"""

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from .native import load_kernels, native_enabled, set_native_enabled
from .parameters import checked_flag

__all__ = ["blockwise_attention", "run_blockwise", "inference_runner", "set_native_enabled", "native_enabled",
           "SUPPORTED_SCORING"]

SUPPORTED_SCORING = ("ssa", "softmax")

_NEG_INF = float("-inf")
_POS_INF = float("inf")
# default tiles (measured on 2 cores, L = 2048, D = 64: see docs/performance.md): query rows per work item
# (all query heads of a key/value head together, so G heads share each key tile) and keys per tile
BLOCK_Q = 256
BLOCK_K = 256
# largest |g| bound per row for which the fused forward uses the bound as a fixed row offset (one pass per tile,
# no running maximum): exp(-2 * 40) is still a normal float32; above it the online maximum runs
_STATIC_BOUND_MAX = 40.0
# calls of fewer tile-product flops run on the calling thread, without a parallel region (a small model's decoding
# step: microseconds of work, where a region costs more than it saves, and a scheduler slice on a busy machine)
_SERIAL_FLOPS = float(1 << 20)
# query rows per step of the torch path (its memory is block * Lk scores per head)
_TORCH_BLOCK = 128


def _compute_dtype(dtype):
    """float64 stays float64; everything else (fp32, fp16, bf16) is computed in float32."""
    return torch.float64 if dtype is torch.float64 else torch.float32


_REDUCED = (torch.bfloat16, torch.float16)


def _out_dtype(dtype):
    """The forward op's output dtype: the input's for bfloat16 and float16 (the fused kernel reads and writes them
    itself, with fp32 accumulation), else the compute dtype.  The row logsumexp is always in the compute dtype."""
    return dtype if dtype in _REDUCED else _compute_dtype(dtype)


# ----------------------------------------------------------------------------------------------------------
# The torch path: the same math in torch ops, query block by query block
# ----------------------------------------------------------------------------------------------------------


def _g(x, b, n, ssa):
    """SSA's g(x) = n sgn(x) log(1 + b|x|) of scaled scores x (b, n broadcast to x), or x itself for softmax.  (n
    multiplies after the sign is taken: a learned `raw` n may be negative, and copysign would drop its sign.)"""
    return torch.copysign(torch.log1p(b * x.abs()), x) * n if ssa else x


def _visible(mask, causal, i0, i1, Lk, B, Hkv, G, device):
    """bool [B|1, Hkv|1, G|1, R, Lk] of the query rows [i0, i1), or None when every key is visible."""
    keep = None
    if mask is not None:
        m = mask[:, :, i0:i1] if mask.shape[2] > 1 else mask
        mb, mh = m.shape[0], m.shape[1]
        m = m.expand(mb, mh, i1 - i0, Lk)
        keep = m.unsqueeze(1) if mh == 1 else m.reshape(mb, Hkv, G, i1 - i0, Lk)
    if causal:
        rows = torch.arange(i0, i1, device=device).view(-1, 1)
        tri = torch.arange(Lk, device=device).view(1, -1) <= rows
        keep = tri if keep is None else keep & tri
    return keep


def _block_weights(q, k, b5, n5, keep, scale, ssa, lse=None):
    """Scores and weights of one query block: q [B, Hkv, G, R, D], k [B, Hkv, 1, Lk, D] -> x (scaled scores),
    g, P = exp(g - lse) (with lse None: the row softmax) and the row logsumexp (+inf for rows with no key)."""
    x = torch.matmul(q, k.transpose(-1, -2)) * scale
    g = _g(x, b5, n5, ssa)
    if keep is not None:
        g = g.masked_fill(~keep, _NEG_INF)
    if lse is None:
        lse = torch.logsumexp(g, dim=-1)
        lse = torch.where(lse == _NEG_INF, _POS_INF, lse)  # no visible key: no weight anywhere
    p = torch.exp(g - lse.unsqueeze(-1))
    return x, g, p, lse


def _grouped(query, key, value, b, n, ssa):
    """Views for grouped-query heads: q [B, Hkv, G, Lq, D], k/v [B, Hkv, 1, Lk, D], b/n [1, Hkv, G, 1, 1], all in
    float64: with large n, g spans tens of nats and float32's rounding of g - lse alone moves the b and n
    gradients by ~10% (the fused kernel keeps that offset as a float pair instead)."""
    B, H, Lq, D = query.shape
    Hkv = key.shape[1]
    G = H // Hkv
    cd = torch.float64
    q = query.to(cd).reshape(B, Hkv, G, Lq, D)
    k = key.to(cd).unsqueeze(2)
    v = value.to(cd).unsqueeze(2)
    b5 = b.to(cd).reshape(1, Hkv, G, 1, 1) if ssa else None
    n5 = n.to(cd).reshape(1, Hkv, G, 1, 1) if ssa else None
    return q, k, v, b5, n5, G


class _Layout(NamedTuple):
    """What the torch path needs besides the tensors: which keys each query sees, the score scale, SSA or softmax."""

    mask: Optional[Tensor]
    causal: bool
    scale: float
    ssa: bool


def _bf16_ulp(rounded: Tensor) -> Tensor:
    """The float32 ulp of each bf16 element, from its exponent field e: 2^(max(e, 8) - 134) (coarser than the true
    ulp below 2^-119), as the kernel's bf16_ulp."""
    e = (rounded.view(torch.int16).to(torch.int32) >> 7) & 0xFF
    return torch.exp2((e.clamp(min=8) - 134).to(torch.float32))


def output_residual(exact: Tensor, rounded: Tensor) -> Tensor:
    """What rounding the output to bf16 dropped, in 1/256ths of each element's bf16 ulp, as int8 (8 more mantissa
    bits); an empty int8 tensor for other dtypes.  Without it the backward's delta = rowsum(out * grad_out) reads
    the bf16 output alone, and SSA's score gradient multiplies that error by up to n * b (dq's largest error
    measured 1.8x SDPA's own bf16 error; softmax multiplies it by 1)."""
    if rounded.dtype != torch.bfloat16:
        return rounded.new_empty((0,), dtype=torch.int8)
    r = torch.nan_to_num((exact.float() - rounded.float()) * 256 / _bf16_ulp(rounded), 0.0, 127.0, -128.0)
    return r.round_().clamp_(-128, 127).to(torch.int8)


def refined_output(rounded: Tensor, residual: Tensor) -> Tensor:
    """The output as the backward's delta reads it: the bf16 output plus its residual (float32), or the output
    itself where there is no residual."""
    if residual.numel() == 0:
        return rounded
    return rounded.float() + residual.float() * (_bf16_ulp(rounded) / 256)


def _torch_forward(query, key, value, b, n, layout: _Layout):
    mask, causal, scale, ssa = layout
    B, H, Lq, _ = query.shape
    Hkv, Lk, Dv = key.shape[1], key.shape[2], value.shape[3]
    q, k, v, b5, n5, G = _grouped(query, key, value, b, n, ssa)
    out = q.new_empty((B, Hkv, G, Lq, Dv))
    lse = q.new_empty((B, Hkv, G, Lq))
    for i0 in range(0, Lq, _TORCH_BLOCK):
        i1 = min(i0 + _TORCH_BLOCK, Lq)
        keep = _visible(mask, causal, i0, i1, Lk, B, Hkv, G, query.device)
        _, _, p, lse_i = _block_weights(q[:, :, :, i0:i1], k, b5, n5, keep, scale, ssa)
        out[:, :, :, i0:i1] = torch.matmul(p, v)
        lse[:, :, :, i0:i1] = lse_i
    cd = _compute_dtype(query.dtype)
    return out.view(B, H, Lq, Dv).to(cd), lse.view(B, H, Lq).to(cd)


def _torch_backward(grad_out, query, key, value, out, lse, residual, b, n, layout: _Layout, need_bn):
    mask, causal, scale, ssa = layout
    B, H, Lq, D = query.shape
    Hkv, Lk = key.shape[1], key.shape[2]
    q, k, v, b5, n5, G = _grouped(query, key, value, b, n, ssa)
    cd = q.dtype
    do = grad_out.to(cd).reshape(B, Hkv, G, Lq, -1)
    o = refined_output(out, residual).to(cd).reshape(B, Hkv, G, Lq, -1)
    lse5 = lse.to(cd).reshape(B, Hkv, G, Lq)
    dq = torch.empty_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    db = torch.zeros((1, Hkv, G, 1, 1), dtype=torch.float64, device=q.device) if need_bn else None
    dn = torch.zeros_like(db) if need_bn else None
    for i0 in range(0, Lq, _TORCH_BLOCK):
        i1 = min(i0 + _TORCH_BLOCK, Lq)
        keep = _visible(mask, causal, i0, i1, Lk, B, Hkv, G, query.device)
        qi, doi = q[:, :, :, i0:i1], do[:, :, :, i0:i1]
        x, g, p, _ = _block_weights(qi, k, b5, n5, keep, scale, ssa, lse5[:, :, :, i0:i1])
        p = torch.where(torch.isnan(p) & (lse5[:, :, :, i0:i1] == _POS_INF).unsqueeze(-1), 0.0, p)
        dv += torch.matmul(p.transpose(-1, -2), doi).sum(2, keepdim=True)
        delta = (doi * o[:, :, :, i0:i1]).sum(-1, keepdim=True)
        dg = p * (torch.matmul(doi, v.transpose(-1, -2)) - delta)
        if ssa:
            y = 1.0 + b5 * x.abs()
            ds = dg * (n5 * b5 * scale / y)
            if need_bn:
                # dg/dn = g / n and dg/db = n x / (1 + b|x|) (masked entries have dg = 0, g = -inf: skip them)
                visible = dg != 0
                dn += torch.where(visible, dg * g, 0.0).to(torch.float64).sum(dim=(0, 3, 4), keepdim=True) / n5
                db += (dg * n5 * x / y).to(torch.float64).sum(dim=(0, 3, 4), keepdim=True)
        else:
            ds = dg * scale
        dq[:, :, :, i0:i1] = torch.matmul(ds, k)
        dk += torch.matmul(ds.transpose(-1, -2), qi).sum(2, keepdim=True)
    if need_bn:
        db, dn = db.reshape(H), dn.reshape(H)
    return dq.reshape(B, H, Lq, D), dk.squeeze(2), dv.squeeze(2), db, dn


# ----------------------------------------------------------------------------------------------------------
# The custom ops
# ----------------------------------------------------------------------------------------------------------


_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _use_native(query):
    """Whether the kernel can take a call on `query`: a CPU tensor in a dtype it reads (float64 runs in torch)."""
    return query.is_cpu and query.dtype in _KERNEL_DTYPES


def _kernel_forward(query, key, value, b, n, mask, causal, scale, block_q, block_k, need_lse):
    """[out, lse, res] from the compiled kernel ([out] alone without need_lse; res: output_residual's for bf16,
    else empty), or None where it does not take the call:
    not on CPU, float64, the kernel off or not built, or a non-finite query or key element (the torch path
    propagates those as eager attention does).  bf16 and fp16 are read as they are: no float32 copies.  The op
    makes its inputs contiguous and b, n float32 itself (no-ops for a decoding step's tensors; this runs per layer
    per step, and each check here cost a fraction of a microsecond)."""
    ops = load_kernels() if _use_native(query) else None
    if ops is None:
        return None
    res = ops.forward(query, key, value, b, n, mask, causal, scale, block_q, block_k, need_lse, _STATIC_BOUND_MAX,
                      _SERIAL_FLOPS)
    return res or None


def _forward(query: Tensor, key: Tensor, value: Tensor, b: Tensor, n: Tensor, mask: Optional[Tensor],
             causal: bool, scale: float, block_q: int, block_k: int) -> tuple[Tensor, Tensor, Tensor]:
    """out [B, H, Lq, Dv] (in the output dtype), the row logsumexp of g [B, H, Lq] (+inf for rows without a
    visible key; float32, float64 for float64 inputs) and, for bf16, the output's residual (output_residual;
    else empty).  b, n: [H], or empty for softmax."""
    res = _kernel_forward(query, key, value, b, n, mask, causal, scale, block_q, block_k, True)
    if res is not None:
        return res[0], res[1], res[2]
    exact, lse = _torch_forward(query, key, value, b, n, _Layout(mask, causal, scale, b.numel() > 0))
    out = exact.to(_out_dtype(query.dtype))
    return out, lse, output_residual(exact, out)


attention_forward = torch.library.custom_op("ssa_hf::attention_forward_v2", _forward, mutates_args=())


@attention_forward.register_fake
def _(query, key, value, b, n, mask, causal, scale, block_q, block_k):
    cd = _compute_dtype(query.dtype)
    B, H, Lq, _ = query.shape
    out_dtype = _out_dtype(query.dtype)
    res_shape = (B, H, Lq, value.shape[3]) if out_dtype == torch.bfloat16 else (0,)
    return (query.new_empty((B, H, Lq, value.shape[3]), dtype=out_dtype), query.new_empty((B, H, Lq), dtype=cd),
            query.new_empty(res_shape, dtype=torch.int8))


def _backward_kernel(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, lse: Tensor,
                     residual: Tensor, b: Tensor, n: Tensor, mask: Optional[Tensor], causal: bool, scale: float,
                     block_q: int, block_k: int, need_bn: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients of query, key, value (in their dtypes) and, with need_bn (SSA), of b and n ([H], else empty)."""
    ssa = b.numel() > 0
    need_bn = need_bn and ssa
    ops = load_kernels() if _use_native(query) else None
    res = None
    if ops is not None:  # the op makes its inputs contiguous and in the dtypes it reads
        res = ops.backward(grad_out, query, key, value, out, lse, residual, b, n, mask, causal, scale, block_q, block_k,
                           need_bn, _SERIAL_FLOPS)
    if res:
        dq, dk, dv, dn, db = res
    else:
        dq, dk, dv, db, dn = _torch_backward(grad_out, query, key, value, out, lse, residual, b, n,
                                             _Layout(mask, causal, scale, ssa), need_bn)
    # contiguous, as the fake implementation says (whatever the strides of the inputs)
    return (dq.to(query.dtype).contiguous(), dk.to(key.dtype).contiguous(), dv.to(value.dtype).contiguous(),
            db.to(b.dtype) if need_bn else b.new_empty((0,)), dn.to(n.dtype) if need_bn else n.new_empty((0,)))


attention_backward = torch.library.custom_op("ssa_hf::attention_backward_v2", _backward_kernel, mutates_args=())


@attention_backward.register_fake
def _(grad_out, query, key, value, out, lse, residual, b, n, mask, causal, scale, block_q, block_k, need_bn):
    shape = b.shape if need_bn and b.numel() > 0 else (0,)
    return (query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape),
            b.new_empty(shape), n.new_empty(shape))


def _setup_context(ctx, inputs, output):
    query, key, value, b, n, mask, causal, scale, block_q, block_k = inputs
    out, lse, residual = output
    ctx.save_for_backward(query, key, value, out, lse, residual, b, n, mask)
    # lse and the residual take no gradient: without this autograd hands the backward zero tensors of their shapes
    # (the residual's: one more output-sized allocation at the backward's peak)
    ctx.set_materialize_grads(False)
    ctx.meta = (causal, scale, block_q, block_k)


DOUBLE_BACKWARD_ERROR = (
    "second derivatives (double backward, e.g. torch.autograd.grad(..., create_graph=True) then grad again, or "
    "gradgradcheck) through the blockwise attention kernel are not implemented; use the eager backend for them: "
    'attn_implementation="ssa_eager" for a model, backend="eager" for scored_attention / ssa_attention')


class _FirstOrderBackward(torch.autograd.Function):
    """The kernel's backward as a node of the graph that a create_graph backward builds: its inputs are the
    attention's own inputs, so differentiating the gradients again reaches this node, which raises (without it the
    gradients would have no history, and torch.autograd.grad(..., allow_unused=True) would answer None)."""

    @staticmethod
    def forward(ctx, backward, meta, grad_out, query, key, value, out, lse, residual, b, n, mask):
        return backward(grad_out, query, key, value, out, lse, residual, b, n, mask, *meta)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(DOUBLE_BACKWARD_ERROR)


def _gradients(ctx, grad_out, backward):
    if grad_out is None:  # nothing reached the output (gradients are not materialised)
        return (None,) * 10
    query, key, value, out, lse, residual, b, n, mask = ctx.saved_tensors
    causal, scale, block_q, block_k = ctx.meta
    need_b, need_n = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
    meta = (causal, scale, block_q, block_k, need_b or need_n)
    if torch.is_grad_enabled() and not torch.compiler.is_compiling() and any(
            t.requires_grad for t in (grad_out, query, key, value, b, n)):  # create_graph=True
        dq, dk, dv, db, dn = _FirstOrderBackward.apply(backward, meta, grad_out, query, key, value, out, lse, residual,
                                                       b, n, mask)
    else:
        dq, dk, dv, db, dn = backward(grad_out, query, key, value, out, lse, residual, b, n, mask, *meta)
    return dq, dk, dv, db if need_b else None, dn if need_n else None, None, None, None, None, None


def _backward(ctx, grad_out, grad_lse, grad_residual):
    return _gradients(ctx, grad_out, attention_backward)


attention_forward.register_autograd(_backward, setup_context=_setup_context)


class _EagerAttention(torch.autograd.Function):
    """The custom op's forward and backward for eager autograd, without the op: torch.library's dispatch and its
    autograd wrapper cost ~0.4 ms a layer call (fwd + bwd), as long as the kernels themselves take on a small
    model's short sequences.  Same functions, same saved tensors; torch.compile, torch.export and tensor subclasses
    keep the op (run_blockwise chooses)."""

    # forward(ctx, ...) rather than a separate setup_context: that form binds the inputs through inspect.signature
    # on every call (~70 us here) and would buy torch.func support, which the op's own autograd lacks as well
    @staticmethod
    def forward(ctx, query, key, value, b, n, mask, causal, scale, block_q, block_k):
        inputs = (query, key, value, b, n, mask, causal, scale, block_q, block_k)
        output = _forward(*inputs)
        _setup_context(ctx, inputs, output)
        ctx.mark_non_differentiable(output[1], output[2])
        return output

    @staticmethod
    def backward(ctx, grad_out, grad_lse, grad_residual):  # a second derivative raises (_FirstOrderBackward)
        return _gradients(ctx, grad_out, _backward_kernel)


# ----------------------------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------------------------


def _as_head_param(x, H, like, dtype=None):
    """A number or a tensor of one value or [H] values -> [H] in the compute dtype (`dtype`, default the query's),
    on the query's device."""
    dtype = _compute_dtype(like.dtype) if dtype is None else dtype
    if (type(x) is Tensor and x.dtype is dtype and x.shape == (H,)
            and (x.is_cpu and like.is_cpu or x.device == like.device)):
        return x  # already what the kernel takes (a model's per-head parameters)
    if not torch.is_tensor(x):
        return torch.full((H,), float(x), dtype=dtype, device=like.device)
    x = x.to(device=like.device, dtype=dtype)
    return x.reshape(1).expand(H) if x.numel() == 1 else x.reshape(H)


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
            mask: hidden tiles are then skipped without reading a mask.
        scale: score scale, default 1/sqrt(D).
        scoring: "ssa" or "softmax".
        block_size: tile sizes of the fused kernel, an int (query rows and keys) or a pair (query rows per work
            item, keys per tile); default (BLOCK_Q, BLOCK_K).  The query rows are an upper bound: the kernel takes
            fewer where a call has too few work items for its threads, and at most 128 in a bf16 forward on the
            bf16 ukernel; a causal backward takes tiles of at most 128 x 128 (each measured faster).

    Returns [B, H, Lq, Dv] in the query dtype (computed in float32; float64 inputs in float64).  Rows without
    any visible key are 0.

    This is the kernel's own public entry, which checks its arguments; the `blockwise` backend of
    `scored_attention` and the models calls `run_blockwise`, after the checks of that entry point.
    """
    if scoring not in SUPPORTED_SCORING:
        raise ValueError(f"blockwise_attention: unsupported scoring {scoring!r}; supported: {', '.join(SUPPORTED_SCORING)}")
    _check_shapes(query, key, value)
    is_causal = checked_flag("blockwise_attention: is_causal", is_causal)
    tiles = _tiles(block_size)
    if attn_mask is not None:
        _check_mask(attn_mask, query.shape[:3] + key.shape[2:3])
    if scoring == "ssa":
        for name, x in (("b", b), ("n", n)):
            if x is None:
                raise ValueError(f"blockwise_attention: scoring='ssa' needs `{name}`")
            if torch.is_tensor(x) and x.numel() not in (1, query.shape[1]):
                raise ValueError(f"blockwise_attention: `{name}` must have one value per head ({query.shape[1]}), "
                                 f"got shape {tuple(x.shape)}")
    else:
        b = n = None
    return run_blockwise(query, key, value, b, n, attn_mask, is_causal, scale, *tiles)


def _check_shapes(query, key, value) -> None:
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("blockwise_attention: query, key and value must be 4-D [batch, heads, length, dim]")
    B, H, _, D = query.shape
    Bk, Hkv, Lk, Dk = key.shape
    if Bk != B or value.shape[0] != B or value.shape[1] != Hkv or value.shape[2] != Lk or Dk != D:
        raise ValueError(f"blockwise_attention: incompatible shapes query {tuple(query.shape)}, key "
                         f"{tuple(key.shape)}, value {tuple(value.shape)}")
    if Hkv == 0 or H % Hkv != 0:
        raise ValueError(f"blockwise_attention: query heads ({H}) must be a multiple of key/value heads ({Hkv})")


def _tiles(block_size) -> tuple[int, int]:
    if block_size is None:
        bq, bk = BLOCK_Q, BLOCK_K
    elif isinstance(block_size, (tuple, list)):
        bq, bk = (int(x) for x in block_size)
    else:
        bq = bk = int(block_size)
    if bq < 1 or bk < 1:
        raise ValueError("blockwise_attention: block_size must be positive")
    return bq, bk


def _check_mask(attn_mask, full_shape) -> None:
    if attn_mask.dtype != torch.bool:
        raise ValueError(
            "blockwise_attention: attn_mask must be a bool tensor (True = attend); additive float masks are not "
            "supported because SSA is not shift invariant (masked keys must get weight exactly 0)")
    if attn_mask.dim() > 4:
        raise ValueError(f"blockwise_attention: attn_mask must have at most 4 dims, got {tuple(attn_mask.shape)}")
    shape = (1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)
    if any(size not in (1, full) for size, full in zip(shape, full_shape)):
        raise ValueError(f"blockwise_attention: attn_mask of shape {tuple(attn_mask.shape)} is not "
                         f"broadcastable to {tuple(full_shape)}")


def _autocast_inputs(query, key, value):
    """query, key and value as autocast gives them to SDPA, which is on its lower-precision list: each floating
    tensor but float64 in the autocast dtype (bf16 mixed precision then runs the bf16 kernel, not float32 with
    linear layers' bf16 values read beside it)."""
    dtype = torch.get_autocast_dtype(query.device.type)
    return tuple(x.to(dtype) if x.is_floating_point() and x.dtype != torch.float64 else x
                 for x in (query, key, value))


def run_blockwise(query, key, value, b, n, mask, is_causal, scale, block_q=BLOCK_Q, block_k=BLOCK_K):
    """The kernel on checked inputs (`blockwise_attention`'s or `scored_attention`'s checks): b and n None for
    softmax, else a number or [H] (or one-value) tensors; mask None or bool, broadcastable to [B, H, Lq, Lk].
    Under autocast the inputs are cast as autocast casts SDPA's (the torch path then still computes in float64,
    which autocast does not touch)."""
    if torch.is_autocast_enabled(query.device.type):
        query, key, value = _autocast_inputs(query, key, value)
    H = query.shape[1]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    dtype = _compute_dtype(query.dtype)
    if b is None:
        b = n = query.new_empty((0,), dtype=dtype)
    else:
        b, n = _as_head_param(b, H, query, dtype), _as_head_param(n, H, query, dtype)
    if mask is not None:
        mask = mask.to(query.device).reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        if mask.shape[3] > 1 and mask.stride(3) != 1:
            mask = mask.contiguous()
    # Eager calls skip the custom op's dispatch (tens of microseconds a call, as much as a small model's decoding
    # step spends in the kernel): without a gradient the forward runs as it is, with one through _EagerAttention.
    # torch.compile and torch.export go through the op, and so do tensor subclasses (fake tensors, DTensor), which
    # need its fake kernel.  (torch.func transforms run neither: the op's autograd has no functorch support either.)
    run = attention_forward
    if type(query) is Tensor and not torch.compiler.is_compiling():
        if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad
                                        or b.requires_grad or n.requires_grad):
            run = _EagerAttention.apply
        else:  # no gradient: no row logsumexp either
            res = _kernel_forward(query, key, value, b, n, mask, bool(is_causal), scale, block_q, block_k, False)
            if res is not None:  # in the query's dtype (the kernel takes float32, bf16 and fp16)
                return res[0]
            out = _torch_forward(query, key, value, b, n, _Layout(mask, bool(is_causal), scale, b.numel() > 0))[0]
            return out if out.dtype == query.dtype else out.to(query.dtype)
    out = run(query, key, value, b, n, mask, bool(is_causal), scale, block_q, block_k)[0]
    return out.to(query.dtype)


def inference_runner(b, n, block_q=BLOCK_Q, block_k=BLOCK_K):
    """``run(query, key, value, mask, is_causal, scale) -> out`` for one scoring group's b and n (None for
    softmax; else numbers, one-value or [H] tensors), bound once (a layer's state keeps it until its parameters
    change).  Eager calls that need no gradient, on CPU tensors in a kernel dtype, without a mask or with a 4-D
    boolean one the kernel reads as it is (a decoding step, a continuous-batching step), go straight to the
    compiled kernel: b and n converted once, no op dispatch, no lse; a small model's decoding step spent as long
    in those as in the kernel.  Anything else runs ``run_blockwise``."""
    prepared = {}  # heads -> (b, n) as the kernel reads them (float32 [H] on the CPU: only CPU calls take this way)
    grads = any(torch.is_tensor(t) and t.requires_grad for t in (b, n))

    def head_params(H, query):
        if b is None:
            empty = query.new_empty((0,), dtype=torch.float32)
            prepared[H] = (empty, empty)
        else:
            prepared[H] = tuple(_as_head_param(x, H, query).detach().to(torch.float32).contiguous() for x in (b, n))
        return prepared[H]

    def run(query, key, value, mask, is_causal, scale):
        if ((mask is None or type(mask) is Tensor and mask.dtype is torch.bool and mask.dim() == 4 and mask.is_cpu
             and (mask.shape[3] == 1 or mask.stride(3) == 1))
                and type(query) is Tensor and query.is_cpu and not torch.compiler.is_compiling()
                and not (torch.is_grad_enabled() and (grads or query.requires_grad or key.requires_grad
                                                      or value.requires_grad))
                and not torch.is_autocast_enabled("cpu")):  # run_blockwise casts as autocast would
            H = query.shape[1]
            hb, hn = prepared.get(H) or head_params(H, query)
            s = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
            res = _kernel_forward(query, key, value, hb, hn, mask, bool(is_causal), s, block_q, block_k, False)
            if res is not None:
                return res[0]
        return run_blockwise(query, key, value, b, n, mask, is_causal, scale, block_q, block_k)

    return run

