"""Row-wise scoring functions: the part of attention that turns scores into weights.

Every scoring function is one `ScoringFunction` entry in `SCORING_FUNCTIONS`, with
- `weights`: the fast path (float32 math whatever the input dtype), used by the eager backend;
- `reference`: a plain float64 implementation written from the definition, used by tests as the oracle;
- `logits` (optional): an elementwise modification g(s) such that weights = softmax(g(s)); an entry that has it
  needs no `weights` of its own, and runs on any softmax kernel that allows a score modification (FlexAttention
  builds its score_mod from it);
- `parameters`: the declarations (`parameters.ParameterSpec`) of the per-head parameters it takes (b and n for
  SSA, t for temperature, ...), from which config fields, validation, `ScoringParameters`, model-card fields and
  the docs are derived (`settings.py`).

All functions take scores of shape [..., H, Lq, Lk], a boolean mask broadcastable to it (True = attend) or
None, and a dict of per-head parameters of shape [H]. Masked entries get a weight of exactly zero, and a row
with no key to attend to gets all-zero weights (never NaN).

Linear attention and CosFormer are not row-wise functions of the scores: they are `LinearAttention` entries
(kind "linear") of `linear.LINEAR_ATTENTIONS`. `ALL_SCORING_FUNCTIONS` (both registries) holds every name
`attention_scoring` accepts, `get_scoring_function` looks names up there and `register_scoring_function` adds
an entry.

This file is part of the remote-code unit (see `ssa_hf/models/__init__.py`): it imports only torch and the
standard library (`entmax` lazily, for the functions that need it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .linear import LINEAR_ATTENTIONS, LinearAttention
from .parameters import PARAMETER_LIMITS, ParameterSpec, closest_name, max_positions

Params = dict[str, Tensor]
# g(s, p, log_n): scores, per-head parameters broadcast against them, log of the keys of each row (or None)
Logits = Callable[[Tensor, Params, "Tensor | None"], Tensor]


def _per_head(value: Tensor, scores: Tensor) -> Tensor:
    """Broadcast a per-head tensor [H] (or a scalar) against scores [..., H, Lq, Lk]."""
    value = torch.as_tensor(value, dtype=scores.dtype, device=scores.device)
    if value.dim() == 0:
        return value
    return value.reshape(-1, 1, 1)


def _full_mask(scores: Tensor, mask: Tensor | None) -> Tensor | None:
    return None if mask is None else mask.expand_as(scores)


def _row_count(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Number of keys each query row may attend to, shape [..., Lq, 1] (the N of SSMax and sigmoid attention)."""
    if mask is None:
        return torch.full(scores.shape[:-1] + (1,), scores.shape[-1], dtype=scores.dtype, device=scores.device)
    return mask.expand_as(scores).sum(-1, keepdim=True).to(scores.dtype)


def _finish(weights: Tensor, mask: Tensor | None) -> Tensor:
    """Exact zeros where masked; fully masked rows become zero rows; NaN from -inf rows removed."""
    if mask is None:
        return weights
    return torch.where(mask, weights, torch.zeros((), dtype=weights.dtype, device=weights.device))


def _masked_softmax(logits: Tensor, mask: Tensor | None) -> Tensor:
    """softmax over the last dim with masked entries at exactly zero and empty rows at zero."""
    if mask is None:
        return torch.softmax(logits, dim=-1)
    neg_inf = torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device)
    logits = torch.where(mask, logits, neg_inf)
    # A fully masked row is all -inf: give it finite logits so softmax stays finite, then zero it.
    empty = ~mask.any(-1, keepdim=True)
    logits = torch.where(empty, torch.zeros((), dtype=logits.dtype, device=logits.device), logits)
    return _finish(torch.softmax(logits, dim=-1), mask)


# --------------------------------------------------------------------------------------------------
# Elementwise logits g(s) of the softmax family
# --------------------------------------------------------------------------------------------------


def ssa_logits(scores: Tensor, b: Tensor, n: Tensor) -> Tensor:
    """g(s) = n * sgn(s) * log1p(b |s|), so that SSA(s) = softmax(g(s)) (the stable form of f(s) = (1 + b|s|)^(sgn(s) n))."""
    return n * torch.sign(scores) * torch.log1p(b * scores.abs())


def identity_logits(scores: Tensor, params: Params, log_n: Tensor | None) -> Tensor:
    """g(s) = s: plain softmax (kernels skip the score modification for it)."""
    return scores


def _logits_ssa(scores: Tensor, params: Params, log_n: Tensor | None) -> Tensor:
    return ssa_logits(scores, params["b"], params["n"])


def _logits_temperature(scores: Tensor, params: Params, log_n: Tensor | None) -> Tensor:
    return scores / params["t"]


def _logits_ssmax(scores: Tensor, params: Params, log_n: Tensor | None) -> Tensor:
    return scores * params["s"] * log_n


# --------------------------------------------------------------------------------------------------
# Fast paths (float32), used by the eager backend
# --------------------------------------------------------------------------------------------------


def softmax_family_weights(logits: Logits, needs_row_count: bool):
    """The fast path of an entry given by its logits: masked softmax(g(s)), parameters broadcast per head."""

    def weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
        log_n = torch.log(_row_count(scores, mask).clamp_min(1.0)) if needs_row_count else None
        per_head = {name: _per_head(value, scores) for name, value in params.items()}
        return _masked_softmax(logits(scores, per_head, log_n), _full_mask(scores, mask))

    return weights


def _softmax1_weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
    # e^x / (1 + sum e^x): a softmax with one extra logit fixed at 0, computed with max(x_max, 0) subtracted.
    mask = _full_mask(scores, mask)
    neg_inf = torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device)
    logits = scores if mask is None else torch.where(mask, scores, neg_inf)
    shift = logits.amax(-1, keepdim=True).clamp_min(0.0)
    exp = torch.exp(logits - shift)
    return _finish(exp / (torch.exp(-shift) + exp.sum(-1, keepdim=True)), mask)


def _sigmoid_length(scores: Tensor, params: Params) -> Tensor:
    """The n of sigmoid attention's bias -log(n) (Ramapuram et al. 2024): one sequence length for every row.

    Their bias is a single constant per model, -log of the sequence length, also for causal rows (not the row's
    own key count). Models pass it as the fixed parameter `length` (`sigmoid_length`, default
    max_position_embeddings); without it, the number of keys of the call, Lk.
    """
    if "length" in params:
        return _per_head(params["length"], scores)
    return torch.tensor(float(scores.shape[-1]), dtype=scores.dtype, device=scores.device)


def _sigmoid_weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
    # sigmoid(x - log n): each weight on its own, no normalisation.
    mask = _full_mask(scores, mask)
    return _finish(torch.sigmoid(scores - torch.log(_sigmoid_length(scores, params))), mask)


def _softpick_weights(scores: Tensor, mask: Tensor | None, params: Params, eps: float = 1e-6) -> Tensor:
    # relu(e^x - 1) / sum |e^x - 1|, both scaled by e^-m with m = max(x_max, 0) so nothing overflows.
    mask = _full_mask(scores, mask)
    neg_inf = torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device)
    masked = scores if mask is None else torch.where(mask, scores, neg_inf)
    shift = masked.amax(-1, keepdim=True).clamp_min(0.0)
    centred = torch.exp(scores - shift) - torch.exp(-shift)
    if mask is not None:
        centred = torch.where(mask, centred, torch.zeros((), dtype=scores.dtype, device=scores.device))
    return _finish(F.relu(centred) / (centred.abs().sum(-1, keepdim=True) + eps * torch.exp(-shift)), mask)


def _sa_softmax_weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
    # x * softmax(x) (SA-Softmax): not row-normalised, weights may be negative.
    return scores * _masked_softmax(scores, _full_mask(scores, mask))


def _fill_below_support(scores: Tensor, mask: Tensor | None, gap: Tensor | float) -> Tensor:
    """Replace masked scores by a finite value so far below the row maximum that sparse maps give it zero.

    For alpha-entmax the largest weight is at most 1, so any score below max - 1/(alpha - 1) is outside the
    support (sparsemax: alpha = 2, gap 1). -inf is not used because the entmax solvers do arithmetic on it.
    """
    if mask is None:
        return scores
    big = torch.finfo(scores.dtype).max / 4
    top = torch.where(mask, scores, torch.full((), -big, dtype=scores.dtype, device=scores.device))
    top = top.amax(-1, keepdim=True).clamp_min(-big / 2)
    low = scores.amin(-1, keepdim=True)
    fill = torch.minimum(top, low) - gap - 1.0
    return torch.where(mask, scores, fill)


def _require_entmax():
    try:
        import entmax
    except ImportError as error:  # an optional dependency (the [entmax] extra)
        raise ImportError('sparsemax and entmax scoring need the entmax package: pip install "ssa-hf[entmax]" '
                          "(or pip install entmax)") from error
    return entmax


def _sparsemax_weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
    mask = _full_mask(scores, mask)
    return _finish(_require_entmax().sparsemax(_fill_below_support(scores, mask, 1.0), dim=-1), mask)


def _entmax15_weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
    mask = _full_mask(scores, mask)
    return _finish(_require_entmax().entmax15(_fill_below_support(scores, mask, 2.0), dim=-1), mask)


def _entmax_alpha_weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
    mask = _full_mask(scores, mask)
    alpha = _per_head(params["alpha"], scores)
    gap = (1.0 / (alpha - 1.0)).amax().detach()
    filled = _fill_below_support(scores, mask, gap)
    alpha = alpha.expand_as(scores[..., :1]) if alpha.dim() else alpha
    return _finish(_require_entmax().entmax_bisect(filled, alpha=alpha, dim=-1, n_iter=60), mask)


# --------------------------------------------------------------------------------------------------
# float64 references, written from the definitions (test oracles)
# --------------------------------------------------------------------------------------------------


def _param_at(value, head: int) -> Tensor:
    flat = torch.as_tensor(value, dtype=torch.float64).reshape(-1)
    return flat[head % flat.numel()]


def _ref_rows(fn):
    """Apply a per-row float64 function to every row, honouring the mask: masked entries 0, empty rows 0."""

    def reference(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
        scores = scores.double()
        full = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand_as(scores)
        heads = scores.shape[-3]
        out = torch.zeros_like(scores)
        flat_s = scores.reshape(-1, heads, *scores.shape[-2:])
        flat_m = full.reshape(-1, heads, *scores.shape[-2:])
        flat_o = out.view(-1, heads, *scores.shape[-2:])
        for i in range(flat_s.shape[0]):
            for h in range(heads):
                p = {k: _param_at(v, h) for k, v in params.items()}
                for q in range(flat_s.shape[2]):
                    keep = flat_m[i, h, q]
                    if keep.any():
                        flat_o[i, h, q, keep] = fn(flat_s[i, h, q, keep], p)
        return out

    return reference


def _ref_softmax_row(x: Tensor, p: Params) -> Tensor:
    e = torch.exp(x - x.max())
    return e / e.sum()


def _ref_ssa_row(x: Tensor, p: Params) -> Tensor:
    # The literal definition f(x) = (1 + b|x|)^(sgn(x) n); float64 holds it for |x| up to ~1e4 at moderate n.
    f = torch.pow(1.0 + p["b"] * x.abs(), torch.sign(x) * p["n"])
    return f / f.sum()


def _ref_temperature_row(x: Tensor, p: Params) -> Tensor:
    return _ref_softmax_row(x / p["t"], p)


def _ref_ssmax_row(x: Tensor, p: Params) -> Tensor:
    return _ref_softmax_row(p["s"] * math.log(x.numel()) * x, p)


def _ref_softmax1_row(x: Tensor, p: Params) -> Tensor:
    m = max(float(x.max()), 0.0)
    e = torch.exp(x - m)
    return e / (math.exp(-m) + e.sum())


def _ref_sigmoid(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
    # elementwise: 1 / (1 + e^-(x - log n)) with n the sequence length (not the row's key count), masked entries 0
    scores = scores.double()
    length = params.get("length", scores.shape[-1])
    length = torch.as_tensor(length, dtype=torch.float64)
    length = length.reshape(-1, 1, 1) if length.dim() else length
    out = 1.0 / (1.0 + torch.exp(-(scores - torch.log(length))))
    return out if mask is None else torch.where(mask.expand_as(out), out, torch.zeros((), dtype=out.dtype))


def _ref_softpick_row(x: Tensor, p: Params) -> Tensor:
    m = max(float(x.max()), 0.0)
    c = torch.exp(x - m) - math.exp(-m)
    return torch.clamp(c, min=0.0) / (c.abs().sum() + 1e-6 * math.exp(-m))


def _ref_sa_softmax_row(x: Tensor, p: Params) -> Tensor:
    return x * _ref_softmax_row(x, p)


def _ref_sparsemax_row(x: Tensor, p: Params) -> Tensor:
    # Euclidean projection onto the simplex (Martins & Astudillo 2016): sort, find the support size k.
    z, _ = torch.sort(x, descending=True)
    cumulative = torch.cumsum(z, 0)
    ks = torch.arange(1, x.numel() + 1, dtype=x.dtype)
    support = 1 + ks * z > cumulative
    k = int(support.nonzero().max()) + 1
    tau = (cumulative[k - 1] - 1) / k
    return torch.clamp(x - tau, min=0.0)


def _ref_entmax_row(x: Tensor, alpha: float) -> Tensor:
    # alpha-entmax: p_i = [(alpha-1) x_i - tau]_+ ^ (1/(alpha-1)) with tau such that sum p = 1, by bisection.
    z = (alpha - 1.0) * x
    lo, hi = float(z.max()) - 1.0, float(z.max())
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        total = torch.clamp(z - tau, min=0.0).pow(1.0 / (alpha - 1.0)).sum()
        lo, hi = (tau, hi) if total > 1 else (lo, tau)
    p = torch.clamp(z - 0.5 * (lo + hi), min=0.0).pow(1.0 / (alpha - 1.0))
    return p / p.sum()


@dataclass(frozen=True)
class ScoringFunction:
    """One entry of the registry. See the module docstring for the meaning of each field."""

    name: str
    description: str  # the weights over a row x, as the docs table shows them
    reference: Callable[[Tensor, Tensor | None, Params], Tensor]
    weights: Callable[[Tensor, Tensor | None, Params], Tensor] | None = None  # None: from `logits`
    parameters: tuple[ParameterSpec, ...] = ()
    normalised: bool = True
    logits: Logits | None = None
    # True when `logits` needs the number of keys per row (SSMax): kernels must pass the row counts.
    needs_row_count: bool = False
    # softmax_1: weights = softmax(logits) * sigmoid(logsumexp(logits)) -- a softmax kernel plus its LSE.
    extra_zero_logit: bool = False
    notes: str = ""
    # "rowwise" for every entry here; linear attention entries (linear.py, LINEAR_ATTENTIONS) have kind "linear"
    kind: str = "rowwise"

    def __post_init__(self):
        # read per call by the functional API: made once (a plain attribute, which torch.compile traces)
        object.__setattr__(self, "_parameter_names", tuple(p.name for p in self.parameters))
        if self.weights is None:
            if self.logits is None:
                raise ValueError(f"scoring function {self.name!r}: give `weights`, `logits` or both")
            object.__setattr__(self, "weights", softmax_family_weights(self.logits, self.needs_row_count))

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return self._parameter_names


def _entry(name, description, reference_row, **kw) -> ScoringFunction:
    return ScoringFunction(name=name, description=description, reference=_ref_rows(reference_row), **kw)


def _matched_temperature(settings) -> float:
    """temperature's default: SSA's initial slope, t = 1 / (n0 b0); never 1, which would make it softmax."""
    t = 1.0 / (settings["ssa_n_init"] * settings["ssa_b_init"])
    if t == 1.0:
        raise ValueError("temperature_init is unset and 1 / (ssa_n_init * ssa_b_init) = 1, which would make "
                         "`temperature` plain softmax: set temperature_init")
    return t


SSA_B = ParameterSpec(
    "b", "ssa_b_init", "Initial (or fixed) value of SSA's b, in [1e-4, 1e4].", default=1.0, low=PARAMETER_LIMITS[0],
    high=PARAMETER_LIMITS[1], learn_field="ssa_learn_b", learn_default=True,
    learn_doc="Whether b is trained (else a fixed buffer).", floor=0.0, follows_parametrization=True,
)
SSA_N = ParameterSpec(
    "n", "ssa_n_init", "Initial (or fixed) value of SSA's n, in [1, 1e4]. Under `softplus`, a learnable n starts at "
    "no less than 1.001 so that its raw value is finite.", default=1.5, low=1.0, high=PARAMETER_LIMITS[1],
    learn_field="ssa_learn_n", learn_default=True, learn_doc="Whether n is trained (else a fixed buffer).",
    floor=1.0, floor_included=True, follows_parametrization=True,
)
TEMPERATURE_T = ParameterSpec(
    "t", "temperature_init", "Temperature t of `attention_scoring=\"temperature\"` (softmax(s / t)); in [1e-4, 1e4]. "
    "Unset: matched to SSA's initial slope, t = 1 / (ssa_n_init * ssa_b_init) (2/3 with the defaults), the "
    "temperature at which softmax equals SSA for small scores; never 1 by default (that would be `softmax`).",
    low=PARAMETER_LIMITS[0], high=PARAMETER_LIMITS[1], learn_field="temperature_learnable",
    learn_doc="Whether t is trained.", derive=_matched_temperature,
)
SSMAX_S = ParameterSpec(
    "s", "ssmax_s_init", "Initial scale s of `attention_scoring=\"ssmax\"` (softmax(s log(N) x)); learned, in "
    "[1e-4, 1e4].", default=0.43, low=PARAMETER_LIMITS[0], high=PARAMETER_LIMITS[1], learnable=True,
)
SIGMOID_LENGTH = ParameterSpec(
    "length", "sigmoid_length", "n in the bias -log(n) of `attention_scoring=\"sigmoid\"` (Ramapuram et al. 2024: "
    "one sequence length for every row, causal rows included); defaults to `max_position_embeddings`. Set it to "
    "the training length.", low=1.0, derive=max_positions, optional=True,
)
ENTMAX_ALPHA = ParameterSpec(
    "alpha", "entmax_alpha_init", "alpha of `attention_scoring=\"entmax_alpha\"`, in (1, 2]; required by it (no "
    "default: 1.5 is `entmax15` and 2 is `sparsemax`).", low=1.0, high=2.0, low_open=True,
    learn_field="entmax_alpha_learnable", learn_doc="Whether alpha is trained (kept in (1, 2]).", floor=1.0, cap=2.0,
    required="attention_scoring='entmax_alpha' needs entmax_alpha_init in (1, 2] (there is no default: 1.5 is "
    "`entmax15` and 2 is `sparsemax`, which have their own names)",
)

SCORING_FUNCTIONS: dict[str, ScoringFunction] = {
    f.name: f
    for f in [
        _entry("softmax", "softmax(x)", _ref_softmax_row, logits=identity_logits),
        _entry("ssa", "softmax(n sgn(x) log1p(b|x|)) = (1+b|x|)^(sgn(x) n) / sum", _ref_ssa_row,
               parameters=(SSA_B, SSA_N), logits=_logits_ssa),
        _entry("temperature", "softmax(x / t), t fixed or learned (default t = 1 / (n0 b0), never 1)",
               _ref_temperature_row, parameters=(TEMPERATURE_T,), logits=_logits_temperature),
        _entry("ssmax", "softmax(s log(N) x), N = keys the row attends to, s learned", _ref_ssmax_row,
               parameters=(SSMAX_S,), logits=_logits_ssmax, needs_row_count=True),
        _entry("softmax1", "e^x / (1 + sum e^x)", _ref_softmax1_row, weights=_softmax1_weights,
               logits=identity_logits, normalised=False, extra_zero_logit=True),
        ScoringFunction("sigmoid", "sigmoid(x - log n), n the sequence length (Ramapuram et al. 2024), the same for "
                        "every row", _ref_sigmoid, _sigmoid_weights, parameters=(SIGMOID_LENGTH,), normalised=False),
        _entry("softpick", "relu(e^x - 1) / sum |e^x - 1|", _ref_softpick_row, weights=_softpick_weights,
               normalised=False),
        _entry("sa_softmax", "x softmax(x)", _ref_sa_softmax_row, weights=_sa_softmax_weights, normalised=False),
        _entry("sparsemax", "Euclidean projection onto the simplex (`entmax` package)", _ref_sparsemax_row,
               weights=_sparsemax_weights),
        _entry("entmax15", "1.5-entmax (`entmax` package)", lambda x, p: _ref_entmax_row(x, 1.5),
               weights=_entmax15_weights),
        _entry("entmax_alpha", "alpha-entmax, alpha in (1, 2] (`entmax_alpha_init` required)",
               lambda x, p: _ref_entmax_row(x, float(p["alpha"])), weights=_entmax_alpha_weights,
               parameters=(ENTMAX_ALPHA,)),
    ]
}


# Every name `attention_scoring` accepts: the row-wise registry above plus the linear-attention mechanisms
# (linear, cosformer), which are not functions of the scores and live in `linear.LINEAR_ATTENTIONS`.
ALL_SCORING_FUNCTIONS: dict[str, ScoringFunction | LinearAttention] = {**SCORING_FUNCTIONS, **LINEAR_ATTENTIONS}


def get_scoring_function(name: str) -> ScoringFunction | LinearAttention:
    try:
        return ALL_SCORING_FUNCTIONS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"Unknown scoring function {name!r}{closest_name(name, ALL_SCORING_FUNCTIONS)} "
            f"Available: {', '.join(ALL_SCORING_FUNCTIONS)}."
        ) from None


class ScoringModule(nn.Module):
    """Base of the modules an attention layer keeps its scoring function in (`attention.scoring`).

    The attention functions read a module's scoring only through `attention_groups` (duck typing, never
    `isinstance`): with several remote-code checkpoints in one process each model class comes from its own copy of
    this code, while transformers holds one `ssa_*` function per name (the copy registered last), so the entries
    travel with the module."""

    def reset_parameters(self) -> None:
        raise NotImplementedError

    def attention_groups(self, heads: int) -> list:
        """[(registry entry, its query heads, {parameter: [len(heads)] tensor})], one per scoring function."""
        raise NotImplementedError

    def parameter_problems(self, prefix: str = "") -> list[str]:
        """'{prefix}{name}: reason' for every parameter value that is not finite or out of its range (empty: all
        valid). The attention functions run it whenever the module's tensors have changed, before they are used."""
        raise NotImplementedError


def register_scoring_function(entry: ScoringFunction | LinearAttention) -> None:
    """Add an entry (its parameters' config fields, validation and docs follow from its declarations)."""
    if entry.name in ALL_SCORING_FUNCTIONS:
        raise ValueError(f"a scoring function named {entry.name!r} is already registered")
    registry = LINEAR_ATTENTIONS if entry.kind == "linear" else SCORING_FUNCTIONS
    registry[entry.name] = ALL_SCORING_FUNCTIONS[entry.name] = entry


def unregister_scoring_function(name: str) -> None:
    """Remove an entry added by `register_scoring_function` (tests and experiments)."""
    ALL_SCORING_FUNCTIONS.pop(name)
    SCORING_FUNCTIONS.pop(name, None)
    LINEAR_ATTENTIONS.pop(name, None)
