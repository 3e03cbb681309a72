"""The backend table and the one dispatch that every entry point uses.

A backend is one row of `BACKENDS`: what it refuses (statically, for a scoring function; at call time, for
gradients, device and dropout), when the automatic choice prefers it, and how it runs an `AttentionCall`. The
functional API (`scored_attention`), the transformers attention functions and the mixture of scoring heads all
go through `dispatch`: choose (or check the requested backend and refuse with the reason), log the choice once,
run. Nothing falls back to softmax. Inputs are checked before, at the public door (attention.py); backends
assume what passes there.

- `eager`: materialised weights, every scoring function (linear attention in linear time, linear.py);
- `flex`: FlexAttention with a score_mod derived from the entry's logits (flex.py);
- `blockwise`: the fused CPU kernel, a torch custom op (`torch.ops.ssa_hf.attention_forward_v2`, blockwise.py).

Part of the remote-code unit: imports only torch and siblings.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .linear import expand_heads, linear_mask, run_linear
from .scoring import ALL_SCORING_FUNCTIONS, ScoringFunction, get_scoring_function

logger = logging.getLogger("ssa_hf")

# on CUDA, below this many scores per head the eager backend is as fast as FlexAttention and needs no
# compilation (nor a recompilation per new length while decoding); on CPU the blockwise kernel wins at every size
_SMALL_PROBLEM = 256 * 256


@dataclass(eq=False)
class AttentionCall:
    """One attention computation, checked: query [B, H, Lq, D], key/value [B, Hkv, Lk, D], a boolean mask
    broadcastable to [B, H, Lq, Lk] (4-D) or None, the per-head parameters of `spec` ([H] tensors).  Treated as
    immutable (`for_group` makes a changed copy); not a frozen dataclass, whose __init__ sets each field through
    object.__setattr__ (1.4 us a call, a tenth of a decoding call)."""

    query: Tensor
    key: Tensor
    value: Tensor
    spec: ScoringFunction | None
    params: dict
    mask: Tensor | None
    scale: float
    dropout: float = 0.0  # applied when `training`
    training: bool = False
    need_weights: bool = False
    is_causal: bool = False  # top-left causal, on top of `mask`
    expect_causal: bool | None = None  # linear attention under torch.compile: the module's causality

    def for_group(self, spec, params: dict, **changes) -> "AttentionCall":
        """This call for one scoring group (`dataclasses.replace` without its per-field walk: a decoding step's
        call is short); under torch.compile, `replace` itself (what dynamo traces)."""
        if torch.compiler.is_compiling():
            return dataclasses.replace(self, spec=spec, params=params, **changes)
        call = object.__new__(AttentionCall)
        call.__dict__.update(self.__dict__, spec=spec, params=params, **changes)
        return call

    def needs_grad(self) -> bool:
        return needs_grad(self.query, self.key, self.value, self.params)


def needs_grad(query: Tensor, key: Tensor, value: Tensor, params: dict) -> bool:
    """Whether a call on these tensors and per-head parameters records a gradient."""
    return torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad
                                        or any(p.requires_grad for p in params.values()))


def _is_linear(spec) -> bool:
    return getattr(spec, "kind", "rowwise") == "linear"


def causal_mask(q_len: int, kv_len: int, device) -> Tensor:
    # top-left aligned as in F.scaled_dot_product_attention: query i attends keys j <= i
    return torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril()


def dense_mask(call: AttentionCall) -> Tensor | None:
    """The call's mask with its causal part folded in (for the backends that read causality from a mask)."""
    if not call.is_causal:
        return call.mask
    causal = causal_mask(call.query.shape[2], call.key.shape[2], call.query.device)[None, None]
    return causal if call.mask is None else call.mask & causal


# --------------------------------------------------------------------------------------------------
# eager
# --------------------------------------------------------------------------------------------------


def _eager_run(call: AttentionCall) -> tuple[Tensor, Tensor | None]:
    query, key, value, spec = call.query, call.key, call.value, call.spec
    if _is_linear(spec):
        # linear attention: linear time, weights materialised only when asked for (or for attention dropout)
        mask = linear_mask(call.mask, query.shape[2], key.shape[2], call.is_causal, call.expect_causal)
        return run_linear(query, key, value, spec, call.params, mask, call.dropout, call.training, call.need_weights)
    heads = query.shape[1]
    key, value = expand_heads(key, heads), expand_heads(value, heads)
    # scores and weights in float32 for half inputs: SSA's logits must not be formed in fp16 (float64 stays float64)
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    scores = torch.matmul(query.to(compute), key.to(compute).transpose(-1, -2)) * call.scale
    weights = spec.weights(scores, dense_mask(call), call.params)
    if call.dropout > 0.0 and call.training:
        weights = F.dropout(weights, p=call.dropout, training=True)
    return torch.matmul(weights.to(value.dtype), value), weights


def _eager_prefers(spec, device, q_len, kv_len, need_weights) -> str | None:
    if need_weights:
        return "attention weights requested"
    return "linear attention (linear-time form)" if _is_linear(spec) else None


# --------------------------------------------------------------------------------------------------
# flex
# --------------------------------------------------------------------------------------------------


def _flex_scoring(spec) -> str | None:
    from .flex import flex_available

    if not flex_available():
        return "this torch has no FlexAttention"
    if _is_linear(spec):
        return f"{spec.name!r} is linear attention, which runs in linear time on backend 'eager'"
    if spec.logits is None:
        runs = ", ".join(n for n, s in ALL_SCORING_FUNCTIONS.items() if getattr(s, "logits", None) is not None)
        return f"{spec.name!r} is not a modification of softmax scores (flex runs: {runs})"
    return None


def _flex_conditions(needs_grad, device, dropout) -> str | None:
    if needs_grad and device.type == "cpu":
        return "FlexAttention on CPU is forward-only (inference); for training on CPU use backend 'blockwise' or 'eager'"
    if dropout > 0.0:
        return "FlexAttention has no attention dropout; use backend 'eager' or set the attention dropout to 0"
    return None


def _flex_prefers(spec, device, q_len, kv_len, need_weights) -> str | None:
    return "CUDA FlexAttention" if device.type == "cuda" and q_len * kv_len > _SMALL_PROBLEM else None


def _flex_run(call: AttentionCall) -> tuple[Tensor, None]:
    from .flex import flex_scored_attention

    causal_only = call.is_causal and call.mask is None  # a causal mask_mod and a cached block mask
    mask = None if causal_only else dense_mask(call)
    return flex_scored_attention(call.query, call.key, call.value, call.spec, call.params, mask, call.scale,
                                 is_causal=causal_only), None


# --------------------------------------------------------------------------------------------------
# blockwise (the fused CPU kernel)
# --------------------------------------------------------------------------------------------------


def _blockwise_scoring(spec) -> str | None:
    try:
        from .blockwise import SUPPORTED_SCORING
    except ImportError:
        return "the blockwise kernel is not available in this installation"
    if _is_linear(spec):
        return f"{spec.name!r} is linear attention, which runs in linear time on backend 'eager'"
    if spec.name not in SUPPORTED_SCORING:
        return (f"the blockwise kernel runs only {SUPPORTED_SCORING}, not {spec.name!r}; use backend 'eager' (or "
                f"'flex' for inference)")
    return None


def _blockwise_conditions(needs_grad, device, dropout) -> str | None:
    if dropout > 0.0:
        return "the blockwise kernel has no attention dropout; use backend 'eager' or set the attention dropout to 0"
    return None


def _blockwise_prefers(spec, device, q_len, kv_len, need_weights) -> str | None:
    return "fused CPU kernel" if device.type == "cpu" else None


def _blockwise_bind(spec, params) -> Callable:
    from .blockwise import inference_runner

    # the kernel skips hidden tiles from `is_causal` alone; no [Lq, Lk] mask is built or read
    return inference_runner(params.get("b"), params.get("n"))


def _blockwise_run(call: AttentionCall) -> tuple[Tensor, None]:
    params = call.params
    return _run_blockwise()(call.query, call.key, call.value, params.get("b"), params.get("n"), call.mask,
                            call.is_causal, call.scale), None


def _blockwise_infer(query, key, value, params, mask, is_causal, scale) -> Tensor:
    return _run_blockwise()(query, key, value, params.get("b"), params.get("n"), mask, is_causal, scale)


@functools.cache
def _run_blockwise():
    # imported on first use (the kernel's module stays optional), then kept: an import statement per call costs
    # about a microsecond, a tenth of a short decoding call's kernel time
    from .blockwise import run_blockwise

    return run_blockwise


# --------------------------------------------------------------------------------------------------
# The table, the choice and the dispatch
# --------------------------------------------------------------------------------------------------


def _never(*args) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    name: str
    summary: str  # what it is, for the docs table
    scoring: Callable[[ScoringFunction], str | None]  # why it cannot run a scoring function at all, or None
    conditions: Callable[[bool, torch.device, float], str | None]  # (needs_grad, device, dropout) -> reason or None
    prefers: Callable[..., str | None]  # (spec, device, q_len, kv_len, need_weights) -> why `backend=None` takes it
    run: Callable[[AttentionCall], tuple[Tensor, Tensor | None]]
    returns_weights: bool = False
    # (spec, params) -> run(query, key, value, mask, is_causal, scale) -> out: the backend with one scoring group's
    # parameters bound, for calls without gradients, dropout or weights (what a layer keeps between decoding steps)
    bind: Callable[[ScoringFunction, dict], Callable] | None = None
    # (query, key, value, params, mask, is_causal, scale) -> out: `run` for a call without gradients, dropout or
    # weights, from its arguments (`infer`: no AttentionCall built, a microsecond of a short decoding call)
    infer: Callable[..., Tensor] | None = None

    def refuses(self, spec, needs_grad: bool, device, dropout: float) -> str | None:
        """None when the backend can run the request, else the reason it cannot (shown to the user)."""
        return self.scoring(spec) or self.conditions(needs_grad, torch.device(device), dropout)


# The automatic choice takes the first that prefers a request (blockwise and flex prefer disjoint devices);
# `eager` runs everything and is the last resort.
BACKENDS: dict[str, Backend] = {
    "eager": Backend("eager", "materialised weights in float32 (linear attention in linear time)", _never, _never,
                     _eager_prefers, _eager_run, returns_weights=True),
    "flex": Backend("flex", "FlexAttention with a score_mod from the entry's logits", _flex_scoring, _flex_conditions,
                    _flex_prefers, _flex_run),
    "blockwise": Backend("blockwise", "fused CPU kernel, memory linear in the length (custom op "
                         "`torch.ops.ssa_hf.attention_forward_v2`)", _blockwise_scoring, _blockwise_conditions,
                         _blockwise_prefers, _blockwise_run, bind=_blockwise_bind,
                         infer=_blockwise_infer),
}
BACKEND_NAMES = tuple(BACKENDS)
FALLBACK = "eager"


def choose_backend(spec, device: torch.device, needs_grad: bool, dropout: float, q_len: int, kv_len: int,
                   need_weights: bool = False) -> tuple[str, str]:
    """The backend `backend=None` uses, and why: the first of the table that prefers the request and runs it."""
    for backend in BACKENDS.values():
        reason = backend.prefers(spec, device, q_len, kv_len, need_weights)
        if reason and backend.refuses(spec, needs_grad, device, dropout) is None:
            return backend.name, reason
    return FALLBACK, "small problem" if q_len * kv_len <= _SMALL_PROBLEM else "the only backend that runs this request"


def supported_backends(scoring: str | list[str], device: str | torch.device = "cpu", needs_grad: bool = True) -> list[str]:
    """The backends that can run `scoring` (for a mixture, a list of names: the backends that run every member)."""
    names = [scoring] if isinstance(scoring, str) else list(dict.fromkeys(scoring))
    specs = [get_scoring_function(name) for name in names]
    return [name for name, b in BACKENDS.items() if all(b.refuses(spec, needs_grad, device, 0.0) is None for spec in specs)]


_logged: set = set()
_CHOICES: dict = {}


def _log_once(scoring: str, backend: str, device: torch.device, reason: str, compiling: bool) -> None:
    if compiling:  # logging inside a compiled region would break the graph
        return
    key = (scoring, backend, device.type)
    if key not in _logged:
        _logged.add(key)
        logger.info("ssa-hf attention: scoring=%s runs on backend=%s (%s; %s)", scoring, backend, device.type, reason)


def resolve(spec, device: torch.device, needs_grad: bool, dropout: float, q_len: int, kv_len: int,
            need_weights: bool, backend: str | None, refused: str = "Backend {backend!r} cannot run scoring {scoring!r}") -> str:
    """The backend that runs a request: chosen (backend None) or the requested one checked (a refusal raises
    NotImplementedError worded by `refused`: {backend}, {scoring}); the choice is logged once.

    Both depend on the lengths only through the small-problem threshold: they are remembered per request kind
    (a decoding step would otherwise walk the table every call)."""
    compiling = torch.compiler.is_compiling()
    key = (backend, id(spec), spec.name, device, needs_grad, dropout, q_len * kv_len > _SMALL_PROBLEM, need_weights)
    chosen = None if compiling else _CHOICES.get(key)
    if chosen is not None:  # remembered: chosen and logged before
        return chosen[0]
    if backend is None:
        name, reason = choose_backend(spec, device, needs_grad, dropout, q_len, kv_len, need_weights)
    else:
        refusal = BACKENDS[backend].refuses(spec, needs_grad, device, dropout)
        name, reason = backend, refusal or "requested"
        if refusal:
            raise NotImplementedError(f"{refused.format(backend=backend, scoring=spec.name)} here: {refusal}.")
    if not compiling:
        _CHOICES[key] = (name, reason)
    _log_once(spec.name, name, device, reason, compiling)
    return name


def dispatch(call: AttentionCall, backend: str | None,
             refused: str = "Backend {backend!r} cannot run scoring {scoring!r}") -> tuple[Tensor, Tensor | None]:
    """Choose (backend None) or check the requested backend, log the choice once, run: (out, weights or None).
    `refused` words a refusal for the entry point ({backend}, {scoring}); it raises NotImplementedError."""
    name = resolve(call.spec, call.query.device, call.needs_grad(), call.dropout, call.query.shape[2],
                   call.key.shape[2], call.need_weights, backend, refused)
    return BACKENDS[name].run(call)


def infer(spec, params: dict, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, is_causal: bool,
          scale: float, backend: str | None, refused: str = "Backend {backend!r} cannot run scoring {scoring!r}") -> Tensor:
    """`dispatch` for a checked call that needs no gradient (none enabled, or no input requires one), dropout or
    weights, from its arguments: the backend's `infer` where it has one, else its `run` on the AttentionCall."""
    name = resolve(spec, query.device, False, 0.0, query.shape[2], key.shape[2], False, backend, refused)
    run = BACKENDS[name].infer
    if run is not None:
        return run(query, key, value, params, mask, is_causal, scale)
    return BACKENDS[name].run(AttentionCall(query, key, value, spec, params, mask, scale, is_causal=is_causal))[0]


def inference_runner(spec, params: dict, device: torch.device, q_len: int, kv_len: int, backend: str | None,
                     refused: str = "Backend {backend!r} cannot run scoring {scoring!r}") -> Callable | None:
    """What `dispatch` would run for a call without gradients, dropout or weights, with `params` bound:
    run(query, key, value, mask, is_causal, scale) -> out, or None when that backend binds nothing (then
    `dispatch` runs the call). Valid for every call of the same request kind (small or not) on `device`."""
    name = resolve(spec, device, False, 0.0, q_len, kv_len, False, backend, refused)
    bind = BACKENDS[name].bind
    return None if bind is None else bind(spec, params)


def static_refusal(backend: str, scoring: str) -> str | None:
    """Why `backend` can never run `scoring` (checked when a model is configured; call-time conditions aside)."""
    return BACKENDS[backend].scoring(get_scoring_function(scoring))


__all__ = ["AttentionCall", "BACKENDS", "BACKEND_NAMES", "Backend", "choose_backend", "dispatch", "infer",
           "inference_runner", "needs_grad", "resolve", "static_refusal", "supported_backends"]
