"""The custom attention op ``ssa_hf::attention_forward_v2`` (blockwise.py) in standard operators, for runtimes that
cannot call ssa-hf's kernel:

* `aten_attention_forward`: the op's forward in ATen operators, a decomposition for
  ``ExportedProgram.run_decompositions(decomposition_table())``: the program (a ``.pt2``, an AOTInductor package)
  then holds no ssa-hf op and runs where ssa-hf is not installed.
* `onnx_attention_forward`: its ONNX translation (onnxscript: MatMul, Abs, Log, Sign, Mul, Where, Softmax), for
  ``torch.onnx.export(..., dynamo=True, custom_translation_table=onnx_translation_table())``, or for every ONNX
  export of the process (transformers' ``OnnxExporter`` included) after ``register_onnx_translation()``.

Both compute what the op computes, with the whole [Lq, Lk] score matrix of each head (an exported graph is run for
inference on a sequence at a time): weights ``softmax(g(s))`` over the visible keys of each query row, ``s = scale
q.k``, ``g(s) = n sgn(s) log(1 + b|s|)`` for SSA (``g(s) = s`` for softmax, where b and n are empty), masked keys
weight exactly 0 (never a finite bias: SSA is not shift invariant), a row without a visible key 0 and its
logsumexp +inf; scores in float32 (float64 for float64 inputs), the output in the input's dtype for bf16 and fp16.

Imports only torch and its sibling blockwise.py (when the table is asked for); onnxscript is optional and imported
only by `onnx_translation_table`.
"""

from __future__ import annotations

import torch

__all__ = ["aten_attention_forward", "decomposition_table", "onnx_translation_table", "register_onnx_translation"]

_REDUCED = (torch.bfloat16, torch.float16)


def aten_attention_forward(query, key, value, b, n, mask, causal, scale, block_q, block_k):
    """(out [B, H, Lq, Dv], lse [B, H, Lq], res) as the op returns them (``res``: the bf16 output's rounding
    residual, else empty), from ATen operators; block sizes are the kernel's and change nothing here."""
    from .blockwise import output_residual

    B, H, Lq, D = query.shape
    Hkv, Lk = key.shape[1], key.shape[2]
    cd = torch.float64 if query.dtype == torch.float64 else torch.float32
    # grouped-query heads: the G query heads of a key/value head are rows of one [G * Lq, D] block
    q = query.to(cd).reshape(B, Hkv, -1, D)
    x = torch.matmul(q, key.to(cd).transpose(-1, -2)).reshape(B, H, Lq, Lk) * scale
    g = x
    if b.shape[0] > 0:  # SSA (b and n are [H]; softmax passes them empty)
        b4, n4 = b.to(cd).reshape(1, H, 1, 1), n.to(cd).reshape(1, H, 1, 1)
        g = torch.sign(x) * torch.log1p(b4 * x.abs()) * n4
    keep = None if mask is None else mask
    if causal:
        tri = torch.arange(Lk, device=query.device).view(1, Lk) <= torch.arange(Lq, device=query.device).view(Lq, 1)
        keep = tri if keep is None else keep & tri
    if keep is not None:
        g = g.masked_fill(~keep, float("-inf"))
    top = g.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # rows without a visible key
    e = torch.exp(g - top)
    total = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(total > 0, total, torch.ones_like(total))
    out = torch.matmul(p.reshape(B, Hkv, -1, Lk), value.to(cd)).reshape(B, H, Lq, value.shape[3])
    lse = torch.where(total > 0, top + torch.log(total), float("inf")).squeeze(-1)
    rounded = out.to(query.dtype) if query.dtype in _REDUCED else out
    return rounded, lse, output_residual(out, rounded)


def decomposition_table() -> dict:
    """{the op's OpOverload: `aten_attention_forward`}, for ``ExportedProgram.run_decompositions``."""
    from .blockwise import attention_forward  # noqa: F401  (defines the op)

    return {torch.ops.ssa_hf.attention_forward_v2.default: aten_attention_forward}


def _translation():
    """The ONNX translation function (onnxscript imported here: it is an optional dependency)."""
    import numpy as np
    import onnx_ir as ir
    from onnxscript import opset18 as op

    def const(values, dtype=np.int64):
        return op.Constant(value=ir.tensor(np.asarray(values, dtype=dtype)))

    def onnx_attention_forward(query, key, value, b, n, mask=None, causal: bool = False, scale: float = 1.0,
                               block_q: int = 256, block_k: int = 256):
        heads, kv_heads = query.shape[1], key.shape[1]
        if not isinstance(heads, int) or not isinstance(kv_heads, int):
            raise ValueError("ssa_hf attention: the ONNX translation needs a static number of heads")
        dtype = query.dtype
        reduced = dtype in (ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
        cd = ir.DataType.FLOAT if reduced else dtype
        if reduced:
            query, key, value = (op.Cast(t, to=cd) for t in (query, key, value))
        grouped, per_head = const([0, kv_heads, -1, 0]), const([0, heads, -1, 0])  # Reshape's 0 keeps that dim
        q = op.Reshape(query, grouped)
        x = op.Reshape(op.MatMul(q, op.Transpose(key, perm=[0, 1, 3, 2])), per_head)
        x = op.Mul(x, op.CastLike(const(scale, np.float64), x))
        g = x
        if b.shape[0] != 0:  # SSA: g = n sgn(x) log(1 + b|x|)
            b4 = op.Reshape(op.CastLike(b, x), const([1, -1, 1, 1]))
            n4 = op.Reshape(op.CastLike(n, x), const([1, -1, 1, 1]))
            one = op.CastLike(const(1.0, np.float64), x)
            g = op.Mul(op.Mul(op.Sign(x), op.Log(op.Add(one, op.Mul(b4, op.Abs(x))))), n4)
        keep = None if mask is None else mask
        if causal:
            length_q = op.Squeeze(op.Shape(query, start=2, end=3))
            length_k = op.Squeeze(op.Shape(key, start=2, end=3))
            zero, step = const(0), const(1)
            rows = op.Unsqueeze(op.Range(zero, length_q, step), const([1]))
            cols = op.Unsqueeze(op.Range(zero, length_k, step), const([0]))
            tri = op.LessOrEqual(cols, rows)
            keep = tri if keep is None else op.And(keep, tri)
        if keep is not None:
            g = op.Where(keep, g, op.CastLike(const(float("-inf"), np.float64), g))
        p = op.Softmax(g, axis=-1)
        lse = op.ReduceLogSumExp(g, const([-1]), keepdims=0)
        if keep is not None:  # a row without a visible key: Softmax gives NaN there, the op 0 (and lse +inf)
            empty = op.IsInf(op.ReduceMax(g, const([-1]), keepdims=1), detect_positive=0)
            p = op.Where(empty, op.CastLike(const(0.0, np.float64), p), p)
            lse = op.Where(op.IsInf(lse, detect_positive=0), op.CastLike(const(float("inf"), np.float64), lse), lse)
        out = op.Reshape(op.MatMul(op.Reshape(p, grouped), value), per_head)
        if reduced:
            out = op.Cast(out, to=dtype)
        # the residual only feeds the backward, which no exported inference graph holds: empty (zeros for bf16)
        res_shape = op.Shape(out) if dtype == ir.DataType.BFLOAT16 else const([0])
        res = op.ConstantOfShape(res_shape, value=ir.tensor(np.zeros(1, dtype=np.int8)))
        return out, lse, res

    return onnx_attention_forward


_REGISTERED = []  # the translation, once it is in onnxscript's registry


def register_onnx_translation() -> None:
    """Add the translation to onnxscript's registry of torch ops (idempotent), which every
    ``torch.onnx.export(..., dynamo=True)`` reads: exporters that take no translation table of ours (transformers'
    ``OnnxExporter``, a plain ``torch.onnx.export``) then translate the op too."""
    if _REGISTERED:
        return
    from onnxscript.function_libs.torch_lib.registration import torch_op

    from .blockwise import attention_forward  # noqa: F401  (defines the op the registry looks up)

    _REGISTERED.append(torch_op("ssa_hf::attention_forward_v2", trace_only=True)(_translation()))


def onnx_translation_table() -> dict:
    """{the op's OpOverload: its ONNX translation}, the ``custom_translation_table`` of ``torch.onnx.export``
    (needs onnxscript: ``pip install "ssa-hf[export]"``)."""
    from .blockwise import attention_forward  # noqa: F401  (defines the op)

    return {torch.ops.ssa_hf.attention_forward_v2.default: _translation()}
