"""Attention with a selectable scoring function: the functional API and the transformers registrations.

- `scored_attention(query, key, value, scoring=..., params=...)`: like `F.scaled_dot_product_attention`, with the
  softmax replaced by any entry of the scoring registry; `ssa_attention(query, key, value, b, n)` is its SSA form.
- Backends (`BACKENDS`, backends.py): `eager` (materialised weights, every scoring function), `flex`
  (FlexAttention score_mod: softmax-family functions; forward only on CPU), `blockwise` (the fused CPU kernel:
  softmax and SSA). Each states what it can run and refuses the rest with an error that names the alternative;
  both entry points here check their inputs once and hand an `AttentionCall` to the one dispatch (a call
  without gradients, dropout or weights: its arguments to `infer`, the same choice). Nothing falls back to softmax.
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

import math
import sys
import weakref

import torch
from torch import Tensor

from .backends import _SMALL_PROBLEM, BACKEND_NAMES, BACKENDS, AttentionCall, choose_backend, dispatch, infer, inference_runner, needs_grad, supported_backends
from .linear import as_4d
from .mixture import Group, run_groups
from .parameters import as_head_tensor, checked_before, checked_flag, closest_name, is_real, unchanged_values, value_copy
from .scoring import ALL_SCORING_FUNCTIONS, get_scoring_function

__all__ = ["BACKENDS", "BACKEND_NAMES", "DEFAULT_IMPLEMENTATION", "IMPLEMENTATIONS", "choose_backend", "config_value",
           "own_implementation_overrides", "make_transformers_attention", "register_with_transformers", "scored_attention", "ssa_attention",
           "supported_backends"]

# attn_implementation names registered with transformers -> backend (None: chosen per call)
IMPLEMENTATIONS = {"ssa_auto": None, **{f"ssa_{name}": name for name in BACKEND_NAMES}}
DEFAULT_IMPLEMENTATION = "ssa_auto"


def own_implementation_overrides(implementation: str | None) -> dict:
    """Config overrides under which `attn_implementation=implementation` runs transformers' own implementation
    (e.g. PyTorch's SDPA for a softmax baseline): ssa-hf models map the standard names onto their own attention
    unless the config's aliases are emptied, which only softmax models accept. Empty for ssa-hf's names."""
    return {} if not implementation or implementation in IMPLEMENTATIONS else {"attn_implementation_aliases": {}}

# --------------------------------------------------------------------------------------------------
# Functional API
# --------------------------------------------------------------------------------------------------


# dtypes the kernels compute in (half inputs are scored in float32); float8, integer, bool and complex are refused
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_inputs(query, key, value, attn_mask, scale, dropout_p) -> None:
    """The checks of the public entry: every backend may assume what passes here."""
    # plain CPU tensors of one supported dtype pass in one line of cheap reads (a decoding call's checks cost as much
    # as its kernel); anything else goes through the checks that word the error
    if not (type(query) is Tensor and type(key) is Tensor and type(value) is Tensor and query.dtype in SUPPORTED_DTYPES
            and key.dtype is query.dtype and value.dtype is query.dtype and query.is_cpu and key.is_cpu
            and value.is_cpu):
        _check_tensors(query, key, value)
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise TypeError(f"attn_mask must be a boolean torch.Tensor or None, got {type(attn_mask).__name__}")
        if attn_mask.device != query.device:
            raise ValueError(f"attn_mask is on {attn_mask.device} and query on {query.device}; move it with .to(query.device)")
    if scale is not None and not (is_real(scale) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0 (or None for 1/sqrt(head_dim)), got {scale!r}")
    if not (dropout_p == 0.0 and type(dropout_p) in (float, int) or is_real(dropout_p) and 0.0 <= dropout_p < 1.0):
        raise ValueError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")


def _check_tensors(query, key, value) -> None:
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
    device = query.device
    if not device == key.device == value.device:
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, {key.device} and {value.device}; "
            f"move them with .to(query.device)"
        )


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
    if is_causal is not False and is_causal is not True:
        is_causal = checked_flag("is_causal", is_causal)
    _check_shapes(query, key, value, enable_gqa)
    if isinstance(scoring, str):  # one scoring function: the call carries its group
        groups, spec = None, get_scoring_function(scoring)
        params = _head_params(spec, params or {}, query.shape[1], query, key)
    else:
        groups, spec, params = _groups(scoring, params, query, key), None, {}
        if len(groups) == 1:  # a list naming one function: that function's call
            (spec, _, params), groups = groups[0], None
    mask = None if attn_mask is None else _checked_mask(attn_mask, query, key)
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"Unknown backend {backend!r}; choose from {BACKEND_NAMES} or None")
        if return_weights and not BACKENDS[backend].returns_weights:
            raise ValueError(f"return_weights needs backend 'eager' (backend {backend!r} never materialises the weights)")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if groups is None and not return_weights and not dropout_p and not needs_grad(query, key, value, params):
        return infer(spec, params, query, key, value, mask, is_causal, scale, backend)  # a decoding call's way
    call = AttentionCall(query, key, value, spec, params, mask, scale, dropout_p, dropout_p > 0, return_weights, is_causal)
    if groups is None:
        out, weights = dispatch(call, backend)
    else:
        out, weights = run_groups(call, groups, lambda group: dispatch(group, backend))
    return (out, weights) if return_weights else out


def _check_shapes(query, key, value, enable_gqa) -> None:
    q_shape, k_shape, v_shape = query.shape, key.shape, value.shape
    if len(q_shape) != 4 or len(k_shape) != 4 or len(v_shape) != 4:
        raise ValueError("query, key and value must be 4-D [batch, heads, length, head_dim]")
    batch, heads, _, head_dim = q_shape
    k_batch, kv_heads, k_len, k_dim = k_shape
    if v_shape[0] != k_batch or v_shape[1] != kv_heads or v_shape[2] != k_len:
        raise ValueError(f"key {tuple(k_shape)} and value {tuple(v_shape)} must agree in batch, heads and length")
    if k_batch != batch:
        raise ValueError(f"query has batch size {batch} and key {k_batch}: give them the same batch size")
    if kv_heads != heads and not (enable_gqa and kv_heads and heads % kv_heads == 0):
        raise ValueError(f"query has {heads} heads and key {kv_heads}: pass enable_gqa=True (and H % Hkv == 0)")
    if k_dim != head_dim or not heads * kv_heads * head_dim:
        raise ValueError(f"query {tuple(q_shape)} and key {tuple(k_shape)} need the same head_dim, >= 1, and >= 1 head")


def _groups(scoring, params, query, key) -> list[Group]:
    """The scoring groups of a call, with their parameters checked: one group for a name, one per name of a list."""
    heads = query.shape[1]
    if isinstance(scoring, str):
        spec = get_scoring_function(scoring)
        return [(spec, list(range(heads)), _head_params(spec, params or {}, heads, query, key))]
    names = list(scoring)
    if len(names) != heads or not all(isinstance(n, str) for n in names):
        raise ValueError(f"scoring: a list needs one scoring name per query head ({heads}), got {names!r}")
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
    groups = []
    for name in order:
        index = [h for h, n in enumerate(names) if n == name]
        given = {}
        for pname, pvalue in params.get(name, {}).items():
            if isinstance(pvalue, Tensor) and pvalue.dim() == 1 and pvalue.numel() == heads != len(index):
                pvalue = pvalue[torch.tensor(index, device=pvalue.device)]  # a value per head of the whole call
            given[pname] = pvalue
        groups.append((get_scoring_function(name), index, _head_params(get_scoring_function(name), given, len(index), query, key)))
    return groups


def _head_params(spec, given, heads: int, query, key) -> dict[str, Tensor]:
    """The parameters of `spec` as [heads] tensors on the query's device; a missing one is refused (unless the
    function runs without it, or has a call default such as CosFormer's m = max(Lq, Lk))."""
    if not isinstance(given, dict):
        given = dict(given)
    _check_param_names(spec, given)
    if getattr(spec, "kind", "rowwise") == "linear":
        given = {**spec.default_params(query.shape[2], key.shape[2]), **given}
    params, compiling = {}, torch.compiler.is_compiling()
    for p in spec.parameters:
        value = given.get(p.name, given)  # `given` itself: not given
        if value is not given:
            # a tensor passed before with the same values (a decoding loop's b and n) needs one lookup, not the checks
            params[p.name] = value if not compiling and checked_before(value, heads, query, True) else \
                as_head_tensor(value, heads, p.name, query.device, True, compiling)
        elif not p.optional:
            missing = [q.name for q in spec.parameters if q.name not in given and not q.optional]
            raise ValueError(f"scoring {spec.name!r} needs parameters {list(spec.parameter_names)}; missing {missing}")
    return params


def _check_param_names(spec, given: dict) -> None:
    """Strict names: a key the function does not take (a typo, or another function's parameter) is an error
    naming the valid ones, never ignored."""
    names = spec.parameter_names
    for key in given:
        if key in names:
            continue
        owners = [n for n, f in ALL_SCORING_FUNCTIONS.items() if key in f.parameter_names]
        valid = f"takes the parameters {list(spec.parameter_names)}" if spec.parameter_names else "takes no parameters"
        hint = (f" ({key!r} is a parameter of {', '.join(owners)})" if owners else "")
        same_letters = [n for n in spec.parameter_names if n.lower() == str(key).lower()]
        close = (f"; did you mean {same_letters[0]!r}?" if same_letters
                 else closest_name(key, spec.parameter_names) if spec.parameter_names else ".")
        raise ValueError(f"params: scoring {spec.name!r} {valid}; got {key!r}{hint}{close}")


def _checked_mask(attn_mask: Tensor, query, key) -> Tensor:
    if attn_mask.dtype != torch.bool:
        raise ValueError(
            "attn_mask must be boolean (True = attend). Additive float masks are not accepted: scoring functions "
            "other than softmax are not shift-invariant, so a large negative bias does not give zero weight."
        )
    mask = as_4d(attn_mask)
    target = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    if mask.dim() > 4 or any(m not in (1, t) for m, t in zip(mask.shape, target)):
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to [batch, heads, q_len, kv_len] = "
            f"{list(target)}; give it shape [q_len, kv_len], [batch, 1, q_len, kv_len] or {list(target)}"
        )
    return mask


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


class LayerState:
    """What the calls of one attention layer share until its scoring tensors change, kept on its scoring module:
    the snapshot of those tensors (owner, name, tensor, version counter, storage) from which the rest was computed
    and against which their values were checked, the scoring groups for calls without gradients, and the bound
    inference runner per (backend, request kind). On the CPU a tensor's dtype and values are compared (value_copy:
    an edit through `.data` moves no version counter); elsewhere an optimizer step or an in-place edit moves a
    version counter, a move or a dtype change gives new storage; a load that assigns new tensors replaces the
    owner's entry. Any of them makes the next call build a new state, which checks the values again before they
    are used."""

    __slots__ = ("heads", "device", "snapshot", "groups", "runners")

    def __init__(self, heads: int, device, snapshot: list):
        self.heads, self.device, self.snapshot, self.groups, self.runners = heads, device, snapshot, None, {}

    def current(self, heads: int, device) -> bool:
        if heads != self.heads or device != self.device:
            return False
        for owner, name, tensor, version, pointer, copy in self.snapshot:
            if owner.get(name) is not tensor or not unchanged_values(tensor, copy):
                return False
            # off the CPU: an inference tensor has no version counter
            if type(copy) is not tuple and (tensor.data_ptr() != pointer or version is not None
                                            and tensor._version != version):
                return False
        return True


def _snapshot(scoring: torch.nn.Module) -> list:
    return [(owner, name, tensor, None if tensor.is_inference() else tensor._version, tensor.data_ptr(),
             value_copy(tensor))
            for module in scoring.modules() for owner in (module._parameters, module._buffers)
            for name, tensor in owner.items() if tensor is not None]


_OLDER_COPIES: dict = {}  # (its package, backend) -> that copy's attention function


def _older_copy_attention(scoring, backend: str | None):
    """For a module's `scoring` of a copy of this code older than `attention_groups` (a checkpoint saved before
    2026-12-01), that copy's own attention function, which knows its modules; else None.  Found among the modules
    already imported (that copy's `attention.py`), never imported."""
    if not isinstance(scoring, torch.nn.Module) or callable(getattr(scoring, "attention_groups", None)):
        return None
    key = (type(scoring).__module__.rpartition(".")[0], backend)
    if key not in _OLDER_COPIES:
        copy = sys.modules.get(key[0] + ".attention") if key[0] else None
        make = getattr(copy, "make_transformers_attention", None)
        _OLDER_COPIES[key] = make(backend) if callable(make) and copy is not sys.modules.get(__name__) else None
    return _OLDER_COPIES[key]


def _scoring_of(module):
    scoring = getattr(module, "scoring", None)
    if not callable(getattr(scoring, "attention_groups", None)):
        raise ValueError(
            f"attn_implementation 'ssa_*' needs an attention module that carries ssa-hf scoring parameters "
            f"(`module.scoring`); {type(module).__name__} has "
            f"{'none' if scoring is None else 'a ' + type(scoring).__name__ + ' without attention_groups'}. Use an ssa-hf model class (SSALlama*, SSABert*, SSAGPT2*) "
            f"or convert a checkpoint with `ssa-hf convert`."
        )
    return scoring


def _check_values(module, scoring) -> None:
    """Refuse a layer's scoring parameters that are not finite or out of range, before a call uses them."""
    problems = getattr(scoring, "parameter_problems", None)
    found = problems("scoring.") if callable(problems) else []
    if found:
        layer = getattr(module, "layer_idx", None)
        where = type(module).__name__ + ("" if layer is None else f" of layer {layer}")
        raise ValueError(
            f"Invalid scoring parameters in the {where} (b > 0, n >= 1, t, s, m > 0, alpha > 1, all finite): "
            + "; ".join(found) + ". They changed since they were last checked (an optimizer step, a load or an "
            "in-place edit): lower the (scoring) learning rate, restore a checkpoint or set valid values; "
            "model.validate_scoring_parameters() names every layer."
        )


def _layer_state(module, heads: int, device, compiling: bool, with_groups: bool = False) -> tuple:
    """(module.scoring, its current state with the values checked, the call's scoring groups or None).  The state
    is None when it cannot be kept (under torch.compile, which traces the groups into its graph, or for a scoring
    object that is no module); the groups are computed then, and with with_groups (calls with gradients: the graph
    must reach the parameters), before the values are checked, so that a scoring module that keeps its last values
    checks those instead of computing them again (every call of a training step: the optimizer moved them).  None
    otherwise: the state holds them.  A call with gradients whose values changed checks them and builds no state
    (None): the optimizer step after it would make it stale before any call read it (~10 us a layer a step)."""
    scoring = state = None
    if not compiling:
        scoring = module._modules.get("scoring") if isinstance(module, torch.nn.Module) else None
        state = None if scoring is None else scoring.__dict__.get("_ssa_layer_state")
        if state is not None and not state.current(heads, device):
            state = None
    if state is None:
        scoring = _scoring_of(module)
    keep = not compiling and isinstance(scoring, torch.nn.Module)
    groups = _groups_of(scoring, heads, device) if with_groups or not keep else None
    if state is None and keep:
        _check_values(module, scoring)
        if not with_groups:  # a call with gradients keeps none: the optimizer step after it would discard it
            state = scoring.__dict__["_ssa_layer_state"] = LayerState(heads, device, _snapshot(scoring))
    return scoring, state, groups


def _groups_of(scoring, heads: int, device) -> list[Group]:
    """The scoring groups of `module.scoring`, found by what it does (`attention_groups`), not by its class: a
    model loaded from another remote-code copy than the one whose function transformers calls still runs, with
    its own registry entries."""
    return [(spec, index, {k: v if v.device == device else v.to(device) for k, v in params.items()})
            for spec, index, params in scoring.attention_groups(heads)]


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


try:  # transformers' output capture (the ContextVar its capture_outputs decorator fills)
    from transformers.utils.output_capturing import _active_collector
except ImportError:  # another transformers version: the output_attentions argument and config still work
    _active_collector = None


def _capturing_attentions(compiling: bool) -> bool:
    """Whether transformers' output capturing (`capture_outputs`) is collecting attention weights in this call.
    Never under torch.compile (dynamo cannot trace the ContextVar; weights are not returned there anyway)."""
    if _active_collector is None or compiling:
        return False
    collected = _active_collector.get()
    return bool(collected) and ("attentions" in collected or "cross_attentions" in collected)


def config_value(config, name: str, default=None, compiling: bool | None = None):
    """`config.<name>` for a field stored as an instance attribute, read from the config's own storage past
    transformers' config attribute lookup, which costs microseconds (paid per layer per decoding step); under
    torch.compile (which cannot trace that read) and for a field that is not stored there, through the attribute."""
    if not (torch.compiler.is_compiling() if compiling is None else compiling):
        stored = object.__getattribute__(config, "__dict__")
        if name in stored:
            return stored[name]
    return getattr(config, name, default)


def make_transformers_attention(backend: str | None):
    """An `AttentionInterface` function running the module's scoring function on `backend` (None = auto)."""
    refused = "attn_implementation 'ssa_{backend}' cannot run attention_scoring={scoring!r}"

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        compiling = torch.compiler.is_compiling()
        mask = attention_mask if attention_mask is None or attention_mask.dtype == torch.bool else _keep_mask(attention_mask)
        if mask is not None:
            mask = mask[:, :, :, : key.shape[-2]]
        module_causal = bool(getattr(module, "is_causal", False))
        # no mask from a causal model with several queries: transformers skipped a purely causal mask (no
        # padding, as many queries as keys), so top-left causal is exact
        is_causal = mask is None and module_causal and query.shape[2] > 1
        scale = scaling if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
        # the call's output_attentions, else the config's (transformers records weights for either), or a capture
        # of weights in progress (GPT-2's model forward consumes output_attentions before its attention runs)
        need_weights = kwargs.get("output_attentions")
        if need_weights is None:
            config = getattr(module, "config", None)
            # the storage of ssa-hf's output_attentions property (configuration_common.py); other configs: the attribute
            need_weights = config is not None and config_value(config, "_output_attentions", None, compiling)
            if need_weights is None:
                need_weights = getattr(config, "output_attentions", False)
        need_weights = bool(need_weights) or _capturing_attentions(compiling)
        training = module.training
        heads, device = query.shape[1], query.device
        try:
            scoring, state, groups = _layer_state(module, heads, device, compiling, with_groups=torch.is_grad_enabled())
        except ValueError:  # an older copy's module (this copy registered last): that copy runs it
            older = _older_copy_attention(getattr(module, "scoring", None), backend)
            if older is None:
                raise
            return older(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if groups is None:  # no gradients, a kept state: its groups and bound runners
            if state.groups is None:
                state.groups = _groups_of(scoring, heads, device)
            groups = state.groups
            if len(groups) == 1 and not need_weights and (dropout == 0.0 or not training):
                # inference (evaluation, a decoding step): the layer's bound runner, no per-call dispatch
                kind = (backend, query.shape[2] * key.shape[2] > _SMALL_PROBLEM)
                runner = state.runners.get(kind, _UNBOUND)
                if runner is _UNBOUND:
                    spec, _, params = groups[0]
                    runner = state.runners[kind] = inference_runner(spec, params, device, query.shape[2],
                                                                    key.shape[2], backend, refused)
                if runner is not None:
                    return runner(query, key, value, mask, is_causal, scale).transpose(1, 2).contiguous(), None
        call = AttentionCall(
            query, key, value, None, {}, mask, scale=scale,
            dropout=dropout if training else 0.0, training=training, need_weights=need_weights, is_causal=is_causal,
            expect_causal=module_causal,  # linear attention under torch.compile reads the mask without checks
        )
        out, weights = run_groups(call, groups, lambda group: dispatch(group, backend, refused))
        return out.transpose(1, 2).contiguous(), weights

    attention.__name__ = f"ssa_{backend or 'auto'}_attention"
    attention.runs_modules_of_any_copy = True  # read by ensure_registered
    return attention


_UNBOUND = object()


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


def ensure_registered(implementation: str) -> None:
    """Register this copy's functions again if the one transformers holds for `implementation` comes from a copy
    older than `attention_groups`, which refuses the modules of other copies (a checkpoint saved before 2026-12-01,
    loaded with trust_remote_code after this model).  Called before each forward of an ssa-hf model."""
    if implementation in IMPLEMENTATIONS:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        if not getattr(ALL_ATTENTION_FUNCTIONS.get(implementation), "runs_modules_of_any_copy", False):
            register_with_transformers()


register_with_transformers()
try:  # defines the kernel's custom op, which a saved torch.export program (.pt2) of a model calls: importing ssa-hf's
    from .blockwise import attention_forward  # noqa: E402,F401  models (installed or remote code) then loads one
except ImportError:  # a copy without the kernel's file: its blockwise backend says it is unavailable
    pass
