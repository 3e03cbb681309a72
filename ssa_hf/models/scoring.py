"""Row-wise scoring functions: the part of attention that turns scores into weights.

Every scoring function is one `ScoringFunction` entry in `SCORING_FUNCTIONS`, with
- `weights`: the fast path (float32 math whatever the input dtype), used by the eager backend;
- `reference`: a plain float64 implementation written from the definition, used by tests as the oracle;
- `logits` (optional): an elementwise modification g(s) such that weights = softmax(g(s)) — the functions
  that have it can run on any softmax kernel that allows a score modification (FlexAttention, blockwise);
- `parameters`: the names of the per-head parameters it takes (b and n for SSA, t for temperature, ...).

All functions take scores of shape [..., H, Lq, Lk], a boolean mask broadcastable to it (True = attend) or
None, and a dict of per-head parameters of shape [H]. Masked entries get a weight of exactly zero, and a row
with no key to attend to gets all-zero weights (never NaN).

Linear attention and CosFormer are not row-wise functions of the scores: they are `LinearAttention` entries
(kind "linear") of `linear.LINEAR_ATTENTIONS`. `ALL_SCORING_FUNCTIONS` (both registries) holds every name
`attention_scoring` accepts, and `get_scoring_function` looks names up there.

This file is part of the remote-code unit (see `ssa_hf/models/__init__.py`): it imports only torch and the
standard library (`entmax` lazily, for the functions that need it).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .linear import LINEAR_ATTENTIONS, LinearAttention

Params = dict[str, Tensor]


def closest_name(value, choices) -> str:
    """'; did you mean X?' for a near miss among `choices`, else '.' (ends the sentence either way)."""
    import difflib

    match = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f"; did you mean {match[0]!r}?" if match else "."


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


def _logits_softmax(scores: Tensor, params: Params, mask: Tensor | None) -> Tensor:
    return scores


def _logits_ssa(scores: Tensor, params: Params, mask: Tensor | None) -> Tensor:
    return ssa_logits(scores, _per_head(params["b"], scores), _per_head(params["n"], scores))


def _logits_temperature(scores: Tensor, params: Params, mask: Tensor | None) -> Tensor:
    return scores / _per_head(params["t"], scores)


def _logits_ssmax(scores: Tensor, params: Params, mask: Tensor | None) -> Tensor:
    log_n = torch.log(_row_count(scores, mask).clamp_min(1.0))
    return scores * _per_head(params["s"], scores) * log_n


# --------------------------------------------------------------------------------------------------
# Fast paths (float32), used by the eager backend
# --------------------------------------------------------------------------------------------------


def _softmax_family(logits_fn):
    def weights(scores: Tensor, mask: Tensor | None, params: Params) -> Tensor:
        return _masked_softmax(logits_fn(scores, params, mask), _full_mask(scores, mask))

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
    except ImportError as error:  # pragma: no cover - entmax is a declared dependency
        raise ImportError("This scoring function needs the `entmax` package: pip install entmax") from error
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
    description: str
    weights: Callable[[Tensor, Tensor | None, Params], Tensor]
    reference: Callable[[Tensor, Tensor | None, Params], Tensor]
    parameters: tuple[str, ...] = ()
    normalised: bool = True
    logits: Callable[[Tensor, Params, Tensor | None], Tensor] | None = None
    # True when `logits` needs the number of keys per row (SSMax): kernels must pass the row counts.
    needs_row_count: bool = False
    # softmax_1: weights = softmax(logits) * sigmoid(logsumexp(logits)) -- a softmax kernel plus its LSE.
    extra_zero_logit: bool = False
    notes: str = ""
    # "rowwise" for every entry here; linear attention entries (linear.py, LINEAR_ATTENTIONS) have kind "linear"
    kind: str = "rowwise"


def _entry(name, description, weights, reference_row, **kw) -> ScoringFunction:
    return ScoringFunction(name=name, description=description, weights=weights, reference=_ref_rows(reference_row), **kw)


SCORING_FUNCTIONS: dict[str, ScoringFunction] = {
    f.name: f
    for f in [
        _entry("softmax", "softmax(s)", _softmax_family(_logits_softmax), _ref_softmax_row, logits=_logits_softmax),
        _entry(
            "ssa",
            "Scaled Signed Averaging: softmax(n sgn(s) log1p(b|s|)) = (1+b|s|)^(sgn(s) n) / sum",
            _softmax_family(_logits_ssa),
            _ref_ssa_row,
            parameters=("b", "n"),
            logits=_logits_ssa,
        ),
        _entry(
            "temperature",
            "softmax(s / t), t fixed or learned",
            _softmax_family(_logits_temperature),
            _ref_temperature_row,
            parameters=("t",),
            logits=_logits_temperature,
        ),
        _entry(
            "ssmax",
            "Scalable-Softmax: softmax(s * log(N) * x), N = keys in the row, s learned",
            _softmax_family(_logits_ssmax),
            _ref_ssmax_row,
            parameters=("s",),
            logits=_logits_ssmax,
            needs_row_count=True,
        ),
        _entry(
            "softmax1",
            "softmax_1 ('off by one'): e^x / (1 + sum e^x)",
            _softmax1_weights,
            _ref_softmax1_row,
            logits=_logits_softmax,
            normalised=False,
            extra_zero_logit=True,
        ),
        ScoringFunction(
            name="sigmoid",
            description="sigmoid(x - log n), n the sequence length (Ramapuram et al. 2024), unnormalised",
            weights=_sigmoid_weights,
            reference=_ref_sigmoid,
            normalised=False,
        ),
        _entry("softpick", "relu(e^x - 1) / sum |e^x - 1|", _softpick_weights, _ref_softpick_row, normalised=False),
        _entry("sa_softmax", "SA-Softmax: x * softmax(x)", _sa_softmax_weights, _ref_sa_softmax_row, normalised=False),
        _entry("sparsemax", "sparsemax (Euclidean projection onto the simplex)", _sparsemax_weights, _ref_sparsemax_row),
        _entry(
            "entmax15", "1.5-entmax", _entmax15_weights, lambda x, p: _ref_entmax_row(x, 1.5)
        ),
        _entry(
            "entmax_alpha",
            "alpha-entmax, alpha in (1, 2] fixed or learned",
            _entmax_alpha_weights,
            lambda x, p: _ref_entmax_row(x, float(p["alpha"])),
            parameters=("alpha",),
        ),
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


# --------------------------------------------------------------------------------------------------
# Parameters (b, n, t, s, alpha) as modules, with the parametrisations that keep them valid
# --------------------------------------------------------------------------------------------------

PARAMETRIZATIONS = ("softplus", "exp", "raw")


def _inverse_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


class ConstrainedParameter(nn.Module):
    """A positive per-head (or per-layer) quantity `floor + map(raw)`, learnable or fixed.

    - `softplus`: value = floor + softplus(raw): stays above `floor` whatever the optimiser does.
    - `exp`: value = exp(raw), the authors' parametrisation (b = e^a, n = e^r); `floor` is not enforced.
    - `raw`: value = raw, stored as is and trained without any constraint (the authors' 114M decoder trains n
      from 1.5 this way: it may leave [1, inf) and even turn negative); `floor` is not enforced.
    A fixed parameter is a buffer holding the value itself. `size` is the number of heads, or 1 for one
    value per layer (broadcast to all heads by `forward`).
    """

    def __init__(self, init: float, size: int, num_heads: int, learnable: bool, parametrization: str, floor: float = 0.0):
        super().__init__()
        if parametrization not in PARAMETRIZATIONS:
            raise ValueError(f"parametrization must be one of {PARAMETRIZATIONS}, got {parametrization!r}")
        self.floor, self.parametrization, self.num_heads, self.learnable = floor, parametrization, num_heads, learnable
        if not learnable:
            self.register_buffer("value", torch.full((size,), float(init)), persistent=True)
            return
        if parametrization == "raw":
            raw = float(init)
        elif parametrization == "exp":
            raw = math.log(init)
        else:
            # keep the initial value strictly above the floor so that the raw value is finite
            raw = _inverse_softplus(max(init - floor, 1e-3))
        self.raw = nn.Parameter(torch.full((size,), raw))

    def forward(self) -> Tensor:
        if not self.learnable:
            value = self.value
        elif self.parametrization == "raw":
            value = self.raw
        elif self.parametrization == "exp":
            value = torch.exp(self.raw)
        else:
            value = self.floor + F.softplus(self.raw)
        return value.expand(self.num_heads) if value.numel() == 1 else value

    def reset(self, init: float) -> None:
        """Set the value again (used by `_init_weights`)."""
        with torch.no_grad():
            if not self.learnable:
                self.value.fill_(init)
            elif self.parametrization == "raw":
                self.raw.fill_(init)
            elif self.parametrization == "exp":
                self.raw.fill_(math.log(init))
            else:
                self.raw.fill_(_inverse_softplus(max(init - self.floor, 1e-3)))


GRANULARITIES = ("head", "layer")
SCORING_FLAGS = ("ssa_learn_b", "ssa_learn_n", "temperature_learnable", "entmax_alpha_learnable")


@dataclass(frozen=True)
class FieldRule:
    """The allowed range of one numeric scoring field, [low, high] with `low` excluded when `low_open`."""

    field: str
    low: float
    high: float
    low_open: bool = False
    optional: bool = False  # None allowed (a default is derived elsewhere)

    def describe(self) -> str:
        left = "(" if self.low_open else "["
        high = "inf)" if math.isinf(self.high) else f"{self.high:g}]"
        return f"{left}{self.low:g}, {high}"

    def check(self, value) -> None:
        if value is None and self.optional:
            return
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"{self.field} must be a number in {self.describe()}, got {value!r} ({type(value).__name__})")
        above_low = value > self.low if self.low_open else value >= self.low
        if not (math.isfinite(value) and above_low and value <= self.high):
            raise ValueError(f"{self.field} must be a finite number in {self.describe()}, got {value!r}")


# Initial (or fixed) values of the scoring parameters. Positive values are kept within [1e-4, 1e4] so that
# they survive a cast of the model to float16 (whose range ends at 65504 and whose normal numbers start at
# 6e-5) and n * log1p(b |s|) stays finite in float32 for any score a model produces.
PARAMETER_LIMITS = (1e-4, 1e4)
SCORING_FIELD_RULES = (
    FieldRule("ssa_b_init", *PARAMETER_LIMITS),
    FieldRule("ssa_n_init", 1.0, PARAMETER_LIMITS[1]),
    # None: matched to SSA's initial slope, 1 / (ssa_n_init * ssa_b_init) (see ScoringOptions.temperature)
    FieldRule("temperature_init", *PARAMETER_LIMITS, optional=True),
    FieldRule("ssmax_s_init", *PARAMETER_LIMITS),
    # no default: 1.5 would be entmax15 and 2 sparsemax (entmax_alpha refuses to build without it)
    FieldRule("entmax_alpha_init", 1.0, 2.0, low_open=True, optional=True),
    # n of sigmoid attention's bias -log(n): a sequence length
    FieldRule("sigmoid_length", 1.0, math.inf, optional=True),
    # CosFormer's length scale m: a position count, kept in float32 by the linear kernels
    FieldRule("cosformer_length", 0.0, math.inf, low_open=True, optional=True),
)


@dataclass
class ScoringOptions:
    """Settings of the scoring parameters; the model configs carry the same names as fields."""

    ssa_granularity: str = "head"  # "head" or "layer"
    ssa_parametrization: str = "softplus"  # "softplus" (b > 0, n >= 1 enforced), "exp" (authors' nanoGPT), "raw" (114M)
    ssa_b_init: float = 1.0
    ssa_n_init: float = 1.5
    ssa_learn_b: bool = True
    ssa_learn_n: bool = True
    # None: matched to SSA's initial slope, t = 1 / (ssa_n_init * ssa_b_init) (2/3 with the defaults); never 1
    # by default, which would make `temperature` a copy of `softmax`
    temperature_init: float | None = None
    temperature_learnable: bool = False
    ssmax_s_init: float = 0.43
    # required by `entmax_alpha` (no default: 1.5 is `entmax15` and 2 is `sparsemax`, which have their own names)
    entmax_alpha_init: float | None = None
    entmax_alpha_learnable: bool = False
    # sigmoid attention's n in the bias -log(n); None: the config's max_position_embeddings (see from_config)
    sigmoid_length: float | None = None
    # CosFormer's length scale m (fixed); None: the config's max_position_embeddings (see from_config)
    cosformer_length: float | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, config) -> "ScoringOptions":
        names = [f for f in cls.__dataclass_fields__ if f != "extra"]
        options = cls(**{k: getattr(config, k) for k in names if hasattr(config, k)})
        if getattr(config, "max_position_embeddings", None):
            if options.cosformer_length is None:
                options.cosformer_length = float(config.max_position_embeddings)
            if options.sigmoid_length is None:
                options.sigmoid_length = float(config.max_position_embeddings)
        return options

    def temperature(self) -> float:
        """The temperature of `temperature`: temperature_init, or SSA's matched 1 / (ssa_n_init * ssa_b_init)."""
        if self.temperature_init is not None:
            return float(self.temperature_init)
        return 1.0 / (self.ssa_n_init * self.ssa_b_init)

    def validate(self) -> None:
        """Raise ValueError naming the first field outside its declared range (`SCORING_FIELD_RULES`)."""
        for name, allowed in (("ssa_granularity", GRANULARITIES), ("ssa_parametrization", PARAMETRIZATIONS)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}{closest_name(value, allowed)}")
        for name in SCORING_FLAGS:
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for rule in SCORING_FIELD_RULES:
            rule.check(getattr(self, rule.field))


class ScoringModule(nn.Module):
    """Base of the modules an attention layer keeps its scoring function in (`attention.scoring`)."""

    def reset_parameters(self) -> None:
        raise NotImplementedError


class ScoringParameters(ScoringModule):
    """The trainable or fixed parameters of one attention layer's scoring function.

    `forward()` returns {name: tensor of shape [num_heads]} ready for `ScoringFunction.weights` and the kernels.
    """

    def __init__(self, scoring: str, num_heads: int, options: ScoringOptions | None = None):
        super().__init__()
        options = options or ScoringOptions()
        options.validate()
        self.scoring = get_scoring_function(scoring).name
        self.options = options
        size = num_heads if options.ssa_granularity == "head" else 1
        p = options.ssa_parametrization
        self.params = nn.ModuleDict()
        if scoring == "ssa":
            self.params["b"] = ConstrainedParameter(options.ssa_b_init, size, num_heads, options.ssa_learn_b, p, floor=0.0)
            self.params["n"] = ConstrainedParameter(options.ssa_n_init, size, num_heads, options.ssa_learn_n, p, floor=1.0)
        elif scoring == "temperature":
            if options.temperature_init is None and options.temperature() == 1.0:
                raise ValueError("temperature_init is unset and 1 / (ssa_n_init * ssa_b_init) = 1, which would make "
                                 "`temperature` plain softmax: set temperature_init")
            self.params["t"] = ConstrainedParameter(options.temperature(), size, num_heads, options.temperature_learnable, "softplus")
        elif scoring == "ssmax":
            self.params["s"] = ConstrainedParameter(options.ssmax_s_init, size, num_heads, True, "softplus")
        elif scoring == "cosformer":
            if options.cosformer_length is None:
                raise ValueError("cosformer needs cosformer_length (its length scale m; models default it to max_position_embeddings)")
            self.params["m"] = ConstrainedParameter(options.cosformer_length, size, num_heads, False, "softplus")
        elif scoring == "sigmoid" and options.sigmoid_length is not None:
            self.params["length"] = ConstrainedParameter(options.sigmoid_length, size, num_heads, False, "softplus")
        elif scoring == "entmax_alpha":
            if options.entmax_alpha_init is None:
                raise ValueError("attention_scoring='entmax_alpha' needs entmax_alpha_init in (1, 2] (there is no default: "
                                 "1.5 is `entmax15` and 2 is `sparsemax`, which have their own names)")
            self.params["alpha"] = ConstrainedParameter(options.entmax_alpha_init, size, num_heads, options.entmax_alpha_learnable, "softplus", floor=1.0)

    def initial_values(self) -> dict[str, float]:
        o = self.options
        return {"b": o.ssa_b_init, "n": o.ssa_n_init, "t": o.temperature(), "s": o.ssmax_s_init, "alpha": o.entmax_alpha_init,
                "m": o.cosformer_length, "length": o.sigmoid_length}

    def reset_parameters(self) -> None:
        init = self.initial_values()
        for name, param in self.params.items():
            param.reset(init[name])

    def forward(self) -> Params:
        values = {name: param() for name, param in self.params.items()}
        if "alpha" in values:
            values["alpha"] = values["alpha"].clamp(max=2.0)
        return values

    def extra_repr(self) -> str:
        return f"scoring={self.scoring!r}"
