"""Attention with a selectable scoring function: the functional API and the transformers registrations.

- `scored_attention(query, key, value, scoring=..., params=...)`: like `F.scaled_dot_product_attention`, with the
  softmax replaced by any entry of the scoring registry; `ssa_attention(query, key, value, b, n)` is its SSA form.
- Backends (`BACKENDS`): `eager` (materialised weights, every scoring function), `flex` (FlexAttention
  score_mod: softmax-family functions; forward only on CPU), `blockwise` (memory-efficient tiles with
  recomputation in backward: softmax and SSA). Each states what it can run and refuses the rest with an
  error that names the alternative. Nothing falls back to softmax.
- transformers: `register_with_transformers()` adds the attention implementations `ssa_auto`, `ssa_eager`,
  `ssa_flex` and `ssa_blockwise` to `AttentionInterface`, each with a boolean mask function in
  `AttentionMaskInterface` (without one, transformers passes no mask at all to a new implementation). They read
  the scoring function and its parameters from the attention module (`module.scoring`, a `ScoringParameters`).

Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .scoring import ScoringFunction, ScoringModule, ScoringParameters, get_scoring_function

logger = logging.getLogger("ssa_hf")

BACKEND_NAMES = ("eager", "flex", "blockwise")
# attn_implementation names registered with transformers -> backend (None: chosen per call)
IMPLEMENTATIONS = {"ssa_auto": None, "ssa_eager": "eager", "ssa_flex": "flex", "ssa_blockwise": "blockwise"}
DEFAULT_IMPLEMENTATION = "ssa_auto"
# below this many scores per head the eager backend is as fast as any other and needs no compilation
_SMALL_PROBLEM = 256 * 256

_logged: set = set()


def _log_once(scoring: str, backend: str, device: torch.device, reason: str) -> None:
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


def _eager_run(query, key, value, spec, params, mask, scale, dropout, training):
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
    if spec.logits is None:
        return f"{spec.name!r} is not a modification of softmax scores (flex runs: softmax, temperature, ssa, ssmax, softmax1)"
    if needs_grad and device.type == "cpu":
        return "FlexAttention on CPU is forward-only (inference); for training on CPU use backend 'blockwise' or 'eager'"
    if dropout > 0.0:
        return "FlexAttention has no attention dropout; use backend 'eager' or set the attention dropout to 0"
    return None


def _flex_run(query, key, value, spec, params, mask, scale, dropout, training):
    from .flex import flex_scored_attention

    return flex_scored_attention(query, key, value, spec, params, mask, scale), None


BLOCKWISE_SCORING = ("softmax", "ssa")


def _blockwise_refuses(spec, needs_grad, device, dropout):
    try:
        from . import blockwise  # noqa: F401
    except ImportError:
        return "the blockwise kernel is not available in this installation"
    if spec.name not in BLOCKWISE_SCORING:
        return f"the blockwise kernel runs only {BLOCKWISE_SCORING}, not {spec.name!r}; use backend 'eager' (or 'flex' for inference)"
    if dropout > 0.0:
        return "the blockwise kernel has no attention dropout; use backend 'eager' or set the attention dropout to 0"
    return None


def _blockwise_run(query, key, value, spec, params, mask, scale, dropout, training):
    from .blockwise import blockwise_attention

    out = blockwise_attention(
        query, key, value, b=params.get("b"), n=params.get("n"), attn_mask=mask, is_causal=False, scale=scale, scoring=spec.name
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
    if q_len * kv_len <= _SMALL_PROBLEM:
        return "eager", "small problem"
    if device.type == "cuda" and BACKENDS["flex"].refuses(spec, needs_grad, device, dropout) is None:
        return "flex", "CUDA FlexAttention"
    if device.type == "cpu" and BACKENDS["blockwise"].refuses(spec, needs_grad, device, dropout) is None:
        return "blockwise", "memory-efficient CPU kernel"
    return "eager", "the only backend that runs this request"


def supported_backends(scoring: str, device: str | torch.device = "cpu", needs_grad: bool = True) -> list[str]:
    spec = get_scoring_function(scoring)
    device = torch.device(device)
    return [name for name, b in BACKENDS.items() if b.refuses(spec, needs_grad, device, 0.0) is None]


# --------------------------------------------------------------------------------------------------
# Functional API
# --------------------------------------------------------------------------------------------------


def _causal_mask(q_len: int, kv_len: int, device) -> Tensor:
    # top-left aligned as in F.scaled_dot_product_attention: query i attends keys j <= i
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril()


def _as_head_tensor(value, heads: int, name: str, device, positive: bool) -> Tensor:
    tensor = value if isinstance(value, Tensor) else torch.tensor(float(value))
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
    scoring: str = "ssa",
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
        scoring: a name of `SCORING_FUNCTIONS`.
        params: the function's parameters, each a float or a tensor of shape [H] (e.g. {"b": 1.0, "n": 1.5}).
        attn_mask: boolean, broadcastable to [B, H, Lq, Lk], True = attend. Additive float masks are refused:
            most of these functions are not shift-invariant, so a finite bias would leak weight.
        is_causal: top-left aligned causal mask, as in `F.scaled_dot_product_attention` (combined with attn_mask).
        scale: score scale, default 1/sqrt(D).
        backend: "eager", "flex", "blockwise" or None (chosen for the device and for whether gradients are needed).
        return_weights: also return the attention weights (eager backend only).
    Returns:
        [B, H, Lq, D] in the dtype of `value` (and the weights [B, H, Lq, Lk] with `return_weights`).
    """
    spec = get_scoring_function(scoring)
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError("query, key and value must be 4-D [batch, heads, length, head_dim]")
    batch, heads, q_len, head_dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    if key.shape != value.shape[:3] + (key.shape[3],) or key.shape[:3] != value.shape[:3]:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must agree in batch, heads and length")
    if kv_heads != heads and not (enable_gqa and heads % kv_heads == 0):
        raise ValueError(f"query has {heads} heads and key {kv_heads}: pass enable_gqa=True (and H % Hkv == 0)")
    if key.shape[-1] != head_dim:
        raise ValueError(f"query and key head dims differ: {head_dim} vs {key.shape[-1]}")
    params = dict(params or {})
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
    if is_causal:
        causal = _causal_mask(q_len, kv_len, query.device)[None, None]
        mask = causal if mask is None else mask & causal
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
    out, weights = BACKENDS[backend].run(query, key, value, spec, params, mask, scale, dropout_p, dropout_p > 0)
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


def make_transformers_attention(backend: str | None):
    """An `AttentionInterface` function running the module's scoring function on `backend` (None = auto)."""

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        scoring = _module_scoring(module)
        if attention_mask is not None and attention_mask.dtype != torch.bool:
            raise ValueError(
                "ssa-hf attention received a float mask; it needs the boolean mask of its own mask function. "
                "Was the model's attention implementation changed without `set_attn_implementation`?"
            )
        mask = attention_mask
        if mask is not None:
            mask = mask[:, :, :, : key.shape[-2]]
        elif getattr(module, "is_causal", False) and query.shape[2] > 1:
            mask = _causal_mask(query.shape[2], key.shape[2], query.device)[None, None]
        scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
        dropout = dropout if module.training else 0.0
        need_weights = bool(kwargs.get("output_attentions", False))

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
            return BACKENDS[use].run(q, k, v, spec, params, mask, scale, dropout, module.training)

        if isinstance(scoring, ScoringParameters):
            out, weights = run(scoring.scoring, scoring(), query, key, value)
        else:
            from .mixture import run_mixture

            out, weights = run_mixture(scoring, query, key, value, run)
        return out.transpose(1, 2).contiguous(), weights

    attention.__name__ = f"ssa_{backend or 'auto'}_attention"
    return attention


def boolean_mask(*args, **kwargs):
    """Mask function for the ssa_* implementations: transformers' boolean mask (True = attend), never skipped.

    Skipping the causal mask (as sdpa may) is off so the kernels always see padding; a bidirectional mask
    without padding may still be None (full attention).
    """
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register_with_transformers() -> None:
    """Make `attn_implementation="ssa_auto" | "ssa_eager" | "ssa_flex" | "ssa_blockwise"` valid (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    for name, backend in IMPLEMENTATIONS.items():
        AttentionInterface.register(name, make_transformers_attention(backend))
        AttentionMaskInterface.register(name, boolean_mask)


register_with_transformers()
