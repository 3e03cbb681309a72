"""Attention with a selectable scoring function: the functional API and the transformers registrations.

- `scored_attention(query, key, value, scoring=..., params=...)`: like `F.scaled_dot_product_attention`, with the
  softmax replaced by any entry of the scoring registry; `ssa_attention(query, key, value, b, n)` is its SSA form.
- Backends (`BACKENDS`): `eager` (materialised weights, every scoring function), `flex` (FlexAttention
  score_mod: softmax-family functions; forward only on CPU), `blockwise` (memory-efficient tiles with
  recomputation in backward: softmax and SSA). Each states what it can run and refuses the rest with an
  error that names the alternative. Nothing falls back to softmax.
- Linear attention and CosFormer (`linear.py`, not row-wise functions of the scores) run on `eager`, in linear
  time; their weights are materialised only when asked for (`return_weights`, `output_attentions`) or for
  attention dropout. `scoring` may also be a list with one name per head (a mixture of scoring heads).
- transformers: `register_with_transformers()` adds the attention implementations `ssa_auto`, `ssa_eager`,
  `ssa_flex` and `ssa_blockwise` to `AttentionInterface`, each with a boolean mask function in
  `AttentionMaskInterface` (without one, transformers passes no mask at all to a new implementation). They read
  the scoring function and its parameters from the attention module (`module.scoring`, a `ScoringParameters`).

Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .linear import LinearMask, linear_mask, run_linear
from .scoring import ScoringFunction, ScoringModule, ScoringParameters, get_scoring_function

logger = logging.getLogger("ssa_hf")

BACKEND_NAMES = ("eager", "flex", "blockwise")
# attn_implementation names registered with transformers -> backend (None: chosen per call)
IMPLEMENTATIONS = {"ssa_auto": None, "ssa_eager": "eager", "ssa_flex": "flex", "ssa_blockwise": "blockwise"}
DEFAULT_IMPLEMENTATION = "ssa_auto"
# on CUDA, below this many scores per head the eager backend is as fast as FlexAttention and needs no
# compilation (nor a recompilation per new length while decoding); on CPU the blockwise kernel wins at every size
_SMALL_PROBLEM = 256 * 256

_logged: set = set()


def _log_once(scoring: str, backend: str, device: torch.device, reason: str) -> None:
    if torch.compiler.is_compiling():  # logging inside a compiled region would break the graph
        return
    key = (scoring, backend, device.type)
    if key not in _logged:
        _logged.add(key)
        logger.info("ssa-hf attention: scoring=%s runs on backend=%s (%s; %s)", scoring, backend, device.type, reason)


# --------------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backend:
    name: str
    # returns None when the backend can run the request, else the reason it cannot (shown to the user)
    refuses: Callable[[ScoringFunction, bool, torch.device, float], str | None]
    run: Callable[..., tuple[Tensor, Tensor | None]]


def _expand_kv(tensor: Tensor, heads: int) -> Tensor:
    groups = heads // tensor.shape[1]
    return tensor if groups == 1 else tensor.repeat_interleave(groups, dim=1)


def _eager_refuses(spec, needs_grad, device, dropout):
    return None


def _is_linear(spec) -> bool:
    return getattr(spec, "kind", "rowwise") == "linear"


def _eager_run(query, key, value, spec, params, mask, scale, dropout, training, need_weights=True):
    if _is_linear(spec):
        # linear attention: linear time, weights materialised only when asked for (or for attention dropout)
        return run_linear(query, key, value, spec, params, mask, dropout, training, need_weights)
    heads = query.shape[1]
    key, value = _expand_kv(key, heads), _expand_kv(value, heads)
    # scores and weights in float32 for half inputs: SSA's logits must not be formed in fp16 (float64 stays float64)
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    scores = torch.matmul(query.to(compute), key.to(compute).transpose(-1, -2)) * scale
    weights = spec.weights(scores, mask, params)
    if dropout > 0.0 and training:
        weights = F.dropout(weights, p=dropout, training=True)
    out = torch.matmul(weights.to(value.dtype), value)
    return out, weights


def _flex_refuses(spec, needs_grad, device, dropout):
    from .flex import flex_available

    if not flex_available():
        return "this torch has no FlexAttention"
    if _is_linear(spec):
        return f"{spec.name!r} is linear attention, which runs in linear time on backend 'eager'"
    if spec.logits is None:
        return f"{spec.name!r} is not a modification of softmax scores (flex runs: softmax, temperature, ssa, ssmax, softmax1)"
    if needs_grad and device.type == "cpu":
        return "FlexAttention on CPU is forward-only (inference); for training on CPU use backend 'blockwise' or 'eager'"
    if dropout > 0.0:
        return "FlexAttention has no attention dropout; use backend 'eager' or set the attention dropout to 0"
    return None


def _flex_run(query, key, value, spec, params, mask, scale, dropout, training, need_weights=False, is_causal=False):
    from .flex import flex_scored_attention

    return flex_scored_attention(query, key, value, spec, params, mask, scale, is_causal=is_causal), None


BLOCKWISE_SCORING = ("softmax", "ssa")


def _blockwise_refuses(spec, needs_grad, device, dropout):
    try:
        from . import blockwise  # noqa: F401
    except ImportError:
        return "the blockwise kernel is not available in this installation"
    if _is_linear(spec):
        return f"{spec.name!r} is linear attention, which runs in linear time on backend 'eager'"
    if spec.name not in BLOCKWISE_SCORING:
        return f"the blockwise kernel runs only {BLOCKWISE_SCORING}, not {spec.name!r}; use backend 'eager' (or 'flex' for inference)"
    if dropout > 0.0:
        return "the blockwise kernel has no attention dropout; use backend 'eager' or set the attention dropout to 0"
    return None


def _blockwise_run(query, key, value, spec, params, mask, scale, dropout, training, need_weights=False, is_causal=False):
    from .blockwise import blockwise_attention

    out = blockwise_attention(
        query, key, value, b=params.get("b"), n=params.get("n"), attn_mask=mask, is_causal=is_causal, scale=scale,
        scoring=spec.name,
    )
    return out, None


BACKENDS: dict[str, Backend] = {
    "eager": Backend("eager", _eager_refuses, _eager_run),
    "flex": Backend("flex", _flex_refuses, _flex_run),
    "blockwise": Backend("blockwise", _blockwise_refuses, _blockwise_run),
}


def choose_backend(spec: ScoringFunction, device: torch.device, needs_grad: bool, dropout: float, q_len: int, kv_len: int, need_weights: bool = False) -> tuple[str, str]:
    """The backend `backend=None` uses, and why."""
    if need_weights:
        return "eager", "attention weights requested"
    if _is_linear(spec):
        return "eager", "linear attention (linear-time form)"
    if device.type == "cpu" and BACKENDS["blockwise"].refuses(spec, needs_grad, device, dropout) is None:
        return "blockwise", "fused CPU kernel"
    if q_len * kv_len <= _SMALL_PROBLEM:
        return "eager", "small problem"
    if device.type == "cuda" and BACKENDS["flex"].refuses(spec, needs_grad, device, dropout) is None:
        return "flex", "CUDA FlexAttention"
    return "eager", "the only backend that runs this request"


def supported_backends(scoring: str | list[str], device: str | torch.device = "cpu", needs_grad: bool = True) -> list[str]:
    """The backends that can run `scoring` (for a mixture, a list of names: the backends that run every member)."""
    names = [scoring] if isinstance(scoring, str) else list(dict.fromkeys(scoring))
    specs = [get_scoring_function(name) for name in names]
    device = torch.device(device)
    return [name for name, b in BACKENDS.items() if all(b.refuses(spec, needs_grad, device, 0.0) is None for spec in specs)]


# --------------------------------------------------------------------------------------------------
# Functional API
# --------------------------------------------------------------------------------------------------


def _causal_mask(q_len: int, kv_len: int, device) -> Tensor:
    # top-left aligned as in F.scaled_dot_product_attention: query i attends keys j <= i
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril()


# dtypes the kernels compute in (half inputs are scored in float32); float8, integer, bool and complex are refused
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_inputs(query, key, value, attn_mask, scale, dropout_p) -> None:
    """The checks of the public entry: every backend may assume what passes here."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor [batch, heads, length, head_dim], got {type(tensor).__name__}")
        if tensor.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                f"{name} has dtype {tensor.dtype}, which attention does not support; pass float16, bfloat16, float32 "
                f"or float64 (e.g. {name}.to(torch.bfloat16))"
            )
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(
            f"query, key and value must have one dtype, got {query.dtype}, {key.dtype} and {value.dtype}; "
            f"convert them with .to(query.dtype)"
        )
    if not query.device == key.device == value.device:
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, {key.device} and {value.device}; "
            f"move them with .to(query.device)"
        )
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise TypeError(f"attn_mask must be a boolean torch.Tensor or None, got {type(attn_mask).__name__}")
        if attn_mask.device != query.device:
            raise ValueError(f"attn_mask is on {attn_mask.device} and query on {query.device}; move it with .to(query.device)")
    if scale is not None and not (_is_real(scale) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0 (or None for 1/sqrt(head_dim)), got {scale!r}")
    if not (_is_real(dropout_p) and 0.0 <= dropout_p < 1.0):
        raise ValueError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _as_head_tensor(value, heads: int, name: str, device, positive: bool) -> Tensor:
    if isinstance(value, Tensor):
        tensor = value
        if tensor.dtype == torch.bool or tensor.is_complex():
            raise TypeError(f"{name} must be a real number or a float tensor of shape [num_heads={heads}], got dtype {tensor.dtype}")
    elif _is_real(value):
        tensor = torch.tensor(float(value))
    else:
        raise TypeError(f"{name} must be a real number or a float tensor of shape [num_heads={heads}], got {value!r}")
    if not tensor.is_floating_point():
        tensor = tensor.float()
    tensor = tensor.to(device)
    if tensor.dim() > 1 or tensor.numel() not in (1, heads):
        raise ValueError(f"{name} must be a scalar or a tensor of shape [num_heads={heads}], got shape {tuple(tensor.shape)}")
    if not torch.compiler.is_compiling():
        detached = tensor.detach()
        if not torch.isfinite(detached).all():
            raise ValueError(f"{name} must be finite, got {detached.tolist()}")
        if positive and (detached <= 0).any():
            raise ValueError(f"{name} must be > 0, got {detached.tolist()}")
    return tensor.reshape(-1).expand(heads)


def scored_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    scoring: str | list[str] = "ssa",
    params: dict | None = None,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    backend: str | None = None,
    dropout_p: float = 0.0,
    return_weights: bool = False,
):
    """Attention with the scoring function `scoring` in place of softmax.

    Args:
        query: [B, H, Lq, D]; key, value: [B, Hkv, Lk, D] (Hkv < H only with `enable_gqa=True`, H % Hkv == 0).
        scoring: a name of `ALL_SCORING_FUNCTIONS` (the row-wise `SCORING_FUNCTIONS`, or the linear-attention
            mechanisms "linear" and "cosformer"), or a list with one name per query head (a mixture of scoring
            heads: each group of heads runs on its own, on `backend` or the best backend for it).
        params: the function's parameters, each a float or a tensor of shape [H] (e.g. {"b": 1.0, "n": 1.5}).
            CosFormer's length scale "m" defaults to max(Lq, Lk) (the paper's choice). For a mixture, a dict
            from scoring name to that name's parameters, e.g. {"ssa": {"b": 1.0, "n": 1.5}}, each value a float,
            a tensor with one value per head of that name (in head order) or a tensor of shape [H].
        attn_mask: boolean, broadcastable to [B, H, Lq, Lk], True = attend. Additive float masks are refused:
            most of these functions are not shift-invariant, so a finite bias would leak weight.
        is_causal: top-left aligned causal mask, as in `F.scaled_dot_product_attention` (combined with attn_mask).
        scale: score scale, default 1/sqrt(D).
        backend: "eager", "flex", "blockwise" or None (chosen for the device and for whether gradients are needed).
        return_weights: also return the attention weights (eager backend only).
    Returns:
        [B, H, Lq, D] in the dtype of `value` (and the weights [B, H, Lq, Lk] with `return_weights`).
    """
    _check_inputs(query, key, value, attn_mask, scale, dropout_p)
    if not isinstance(scoring, str):
        return _mixed_scored_attention(
            query, key, value, scoring, params, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
            enable_gqa=enable_gqa, backend=backend, dropout_p=dropout_p, return_weights=return_weights,
        )
    spec = get_scoring_function(scoring)
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("query, key and value must be 4-D [batch, heads, length, head_dim]")
    batch, heads, q_len, head_dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    if key.shape != value.shape[:3] + (key.shape[3],) or key.shape[:3] != value.shape[:3]:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must agree in batch, heads and length")
    if key.shape[0] != batch:
        raise ValueError(f"query has batch size {batch} and key {key.shape[0]}: give them the same batch size")
    if kv_heads != heads and not (enable_gqa and heads % kv_heads == 0):
        raise ValueError(f"query has {heads} heads and key {kv_heads}: pass enable_gqa=True (and H % Hkv == 0)")
    if key.shape[-1] != head_dim:
        raise ValueError(f"query and key head dims differ: {head_dim} vs {key.shape[-1]}")
    params = dict(params or {})
    if _is_linear(spec):
        params = {**spec.default_params(q_len, kv_len), **params}
    missing = [p for p in spec.parameters if p not in params]
    if missing:
        raise ValueError(f"scoring {spec.name!r} needs parameters {list(spec.parameters)}; missing {missing}")
    params = {
        name: _as_head_tensor(params[name], heads, name, query.device, positive=True) for name in spec.parameters
    }
    mask = None
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool:
            raise ValueError(
                "attn_mask must be boolean (True = attend). Additive float masks are not accepted: scoring functions "
                "other than softmax are not shift-invariant, so a large negative bias does not give zero weight."
            )
        mask = attn_mask
        while mask.dim() < 4:
            mask = mask.unsqueeze(0)
        target = (batch, heads, q_len, kv_len)
        if mask.dim() > 4 or any(m not in (1, t) for m, t in zip(mask.shape, target)):
            raise ValueError(
                f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to [batch, heads, q_len, kv_len] = "
                f"{list(target)}; give it shape [q_len, kv_len], [batch, 1, q_len, kv_len] or {list(target)}"
            )
    if _is_linear(spec):
        # causal structure + key padding, never materialised as [Lq, Lk] (refuses other mask patterns)
        mask = linear_mask(mask, q_len, kv_len, is_causal)
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    needs_grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (query, key, value, *params.values())
    )
    if return_weights and backend not in (None, "eager"):
        raise ValueError(f"return_weights needs backend 'eager' (backend {backend!r} never materialises the weights)")
    if backend is None:
        backend, reason = choose_backend(spec, query.device, needs_grad, dropout_p, q_len, kv_len, return_weights)
    elif backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; choose from {BACKEND_NAMES} or None")
    else:
        reason = "requested"
        refusal = BACKENDS[backend].refuses(spec, needs_grad, query.device, dropout_p)
        if refusal:
            raise NotImplementedError(f"Backend {backend!r} cannot run scoring {spec.name!r} here: {refusal}.")
    _log_once(spec.name, backend, query.device, reason)
    if backend == "blockwise" and is_causal:
        # the kernel skips hidden tiles from `is_causal` alone; no [Lq, Lk] mask is built or read
        out, weights = _blockwise_run(query, key, value, spec, params, mask, scale, dropout_p, False, is_causal=True)
    elif backend == "flex" and is_causal and mask is None:
        # a causal mask_mod and a cached block mask instead of a dense [Lq, Lk] mask
        out, weights = _flex_run(query, key, value, spec, params, None, scale, dropout_p, False, is_causal=True)
    else:
        if is_causal and not _is_linear(spec):  # the other backends read causal structure from a dense mask
            causal = _causal_mask(q_len, kv_len, query.device)[None, None]
            mask = causal if mask is None else mask & causal
        out, weights = BACKENDS[backend].run(
            query, key, value, spec, params, mask, scale, dropout_p, dropout_p > 0, need_weights=return_weights
        )
    return (out, weights) if return_weights else out


def _mixed_scored_attention(query, key, value, scoring, params, attn_mask, is_causal, scale, enable_gqa, backend, dropout_p, return_weights):
    """`scored_attention` with one scoring name per query head: each group of heads runs as its own call."""
    names = list(scoring)
    if query.dim() != 4 or key.dim() != 4:
        raise ValueError("query, key and value must be 4-D [batch, heads, length, head_dim]")
    heads, kv_heads = query.shape[1], key.shape[1]
    if len(names) != heads or not all(isinstance(n, str) for n in names):
        raise ValueError(f"scoring: a list needs one scoring name per query head ({heads}), got {names!r}")
    if kv_heads != heads and not (enable_gqa and heads % kv_heads == 0):
        raise ValueError(f"query has {heads} heads and key {kv_heads}: pass enable_gqa=True (and H % Hkv == 0)")
    order = list(dict.fromkeys(names))
    for name in order:
        get_scoring_function(name)  # unknown names fail here, before any work
    params = dict(params or {})
    unknown = [k for k in params if k not in order or not isinstance(params[k], dict)]
    if unknown:
        raise ValueError(
            f"params: for a mixture of scoring heads, params maps each scoring name of the mixture to a dict of its "
            f"parameters, e.g. {{'ssa': {{'b': 1.0, 'n': 1.5}}}}; got entries {unknown} (mixture: {order})"
        )
    if attn_mask is not None and attn_mask.dim() == 4 and attn_mask.shape[1] not in (1, heads):
        raise ValueError(f"attn_mask has {attn_mask.shape[1]} heads; it must have 1 or {heads}")
    per_kv = heads // kv_heads
    out, weights = None, None
    for name in order:
        index_list = [h for h, n in enumerate(names) if n == name]
        index = torch.tensor(index_list, dtype=torch.long, device=query.device)
        group_params = {}
        for pname, pvalue in params.get(name, {}).items():
            if isinstance(pvalue, Tensor) and pvalue.dim() == 1 and pvalue.numel() == heads != len(index_list):
                pvalue = pvalue[index.to(pvalue.device)]
            group_params[pname] = pvalue
        group_mask = attn_mask
        if attn_mask is not None and attn_mask.dim() == 4 and attn_mask.shape[1] == heads > 1:
            group_mask = attn_mask[:, index.to(attn_mask.device)]
        kv_index = index // per_kv
        result = scored_attention(
            query[:, index], key[:, kv_index], value[:, kv_index], name, group_params, attn_mask=group_mask,
            is_causal=is_causal, scale=scale, backend=backend, dropout_p=dropout_p, return_weights=return_weights,
        )
        group_out, group_weights = result if return_weights else (result, None)
        if out is None:
            out = group_out.new_zeros(query.shape[:3] + (group_out.shape[-1],))
        out = out.index_copy(1, index, group_out)
        if group_weights is not None:
            if weights is None:
                weights = group_weights.new_zeros(query.shape[:3] + (key.shape[2],))
            weights = weights.index_copy(1, index, group_weights.to(weights.dtype))
    return (out, weights) if return_weights else out


def ssa_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    b,
    n,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    backend: str | None = None,
) -> Tensor:
    """Scaled Signed Averaging attention, a drop-in for `F.scaled_dot_product_attention`.

    weights = softmax(n * sgn(s) * log1p(b |s|)) with s = scale * q.k; `b` (> 0) and `n` are floats or per-head
    tensors of shape [H] (gradients flow to them when they require grad). See `scored_attention` for the rest.
    """
    return scored_attention(
        query, key, value, "ssa", {"b": b, "n": n}, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
        enable_gqa=enable_gqa, backend=backend,
    )


# --------------------------------------------------------------------------------------------------
# transformers integration
# --------------------------------------------------------------------------------------------------


def _module_scoring(module) -> ScoringModule:
    scoring = getattr(module, "scoring", None)
    if not isinstance(scoring, ScoringModule):
        raise ValueError(
            f"attn_implementation 'ssa_*' needs an attention module that carries ssa-hf scoring parameters "
            f"(`module.scoring`); {type(module).__name__} has none. Use an ssa-hf model class (SSALlama*, SSABert*) "
            f"or convert a checkpoint with `ssa-hf convert`."
        )
    return scoring


def _keep_mask(additive: Tensor) -> Tensor:
    """A boolean mask from a float one given to the model as a custom 4-D mask (transformers passes those as they
    are): 0 = attend, -inf or the dtype's minimum = masked. Any other bias cannot be applied exactly to a scoring
    function that is not shift-invariant, so it is refused."""
    masked = additive <= torch.finfo(additive.dtype).min / 2
    if not ((additive == 0) | masked).all():
        raise ValueError(
            "ssa-hf attention received a float attention mask with values other than 0 (attend) and -inf or the "
            "dtype's minimum (masked). Scoring functions other than softmax are not shift-invariant, so a finite bias "
            "cannot be applied as masking: pass a boolean mask (True = attend) or a 0/-inf one."
        )
    return ~masked


def make_transformers_attention(backend: str | None):
    """An `AttentionInterface` function running the module's scoring function on `backend` (None = auto)."""

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        scoring = _module_scoring(module)
        mask = attention_mask if attention_mask is None or attention_mask.dtype == torch.bool else _keep_mask(attention_mask)
        # no mask from a causal model with several queries: transformers skipped a purely causal mask (no
        # padding, as many queries as keys), so top-left causal is exact; blockwise and flex take it as is
        causal_only = mask is None and getattr(module, "is_causal", False) and query.shape[2] > 1
        if mask is not None:
            mask = mask[:, :, :, : key.shape[-2]]
        dense_causal = None
        scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
        dropout = dropout if module.training else 0.0
        # the call's output_attentions, else the config's (transformers records weights for either)
        need_weights = bool(kwargs.get("output_attentions", getattr(getattr(module, "config", None), "output_attentions", False)))

        def run(name, params, q, k, v):
            spec = get_scoring_function(name)
            params = {key_: val.to(q.device) for key_, val in params.items()}
            needs_grad = torch.is_grad_enabled() and (q.requires_grad or any(p.requires_grad for p in params.values()))
            use = backend
            if use is None:
                use, reason = choose_backend(spec, q.device, needs_grad, dropout, q.shape[2], k.shape[2], need_weights)
            else:
                reason = "requested"
                refusal = BACKENDS[use].refuses(spec, needs_grad, q.device, dropout)
                if refusal:
                    raise NotImplementedError(
                        f"attn_implementation 'ssa_{use}' cannot run attention_scoring={spec.name!r} here: {refusal}."
                    )
            _log_once(spec.name, use, q.device, reason)
            if causal_only and use in ("blockwise", "flex") and not need_weights:
                runner = _blockwise_run if use == "blockwise" else _flex_run
                return runner(q, k, v, spec, params, None, scale, dropout, module.training, is_causal=True)
            group_mask = mask
            if causal_only:
                nonlocal dense_causal
                if dense_causal is None:
                    dense_causal = _causal_mask(q.shape[2], k.shape[2], q.device)[None, None]
                group_mask = dense_causal
            if _is_linear(spec):  # under torch.compile, read the mask without data-dependent checks
                group_mask = linear_mask(group_mask, q.shape[2], k.shape[2], expect_causal=bool(getattr(module, "is_causal", False)))
            return BACKENDS[use].run(q, k, v, spec, params, group_mask, scale, dropout, module.training, need_weights=need_weights)

        if isinstance(scoring, ScoringParameters):
            out, weights = run(scoring.scoring, scoring(), query, key, value)
        else:
            from .mixture import run_mixture

            out, weights = run_mixture(scoring, query, key, value, run)
        return out.transpose(1, 2).contiguous(), weights

    attention.__name__ = f"ssa_{backend or 'auto'}_attention"
    return attention


def boolean_mask(*args, **kwargs):
    """Mask function for the ssa_* implementations: transformers' boolean mask (True = attend).

    As for sdpa, transformers may skip the mask (None) when it is purely causal: no padding and as many
    queries as keys (or one query); the attention function then applies top-left causal itself, without a
    dense mask (blockwise and flex skip hidden tiles from it). A padded batch always gets its mask; a
    bidirectional mask without padding may be None (full attention).
    """
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **kwargs)


def register_with_transformers() -> None:
    """Make `attn_implementation="ssa_auto" | "ssa_eager" | "ssa_flex" | "ssa_blockwise"` valid (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    for name, backend in IMPLEMENTATIONS.items():
        AttentionInterface.register(name, make_transformers_attention(backend))
        AttentionMaskInterface.register(name, boolean_mask)


register_with_transformers()
