"""Declared parameters of scoring functions, and the module that holds one parameter.

A scoring function declares each of its per-head parameters once, as a `ParameterSpec` in its registry entry:
the name the kernels read (b, n, t, ...), the config field of its initial (or fixed) value with its default,
range and documentation, whether it is learned (always, never, or as a config flag says), the floor its
parametrisation keeps it above, and how an unset value is derived. The config fields, their validation and
documentation, `ScoringParameters`, the model-card fields, the load-time checks and the docs tables are all
derived from these declarations (`settings.py`); `Choice` declares the two settings every parameter shares
(`scoring_granularity`, `scoring_parametrization`). The functional API's per-call parameter values are checked
here too (`as_head_tensor`), with the cache of tensors that passed (`checked_before`), and `value_copy` /
`unchanged_values` tell every cache whether a tensor's values changed since.

Part of the remote-code unit: imports only torch and the standard library.
"""

from __future__ import annotations

import difflib
import math
import numbers
import weakref
from dataclasses import dataclass
from typing import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PARAMETRIZATIONS = ("softplus", "exp", "raw")
GRANULARITIES = ("head", "layer")
# Initial (or fixed) values of the positive scoring parameters are kept within [1e-4, 1e4] so that they survive
# a cast of the model to float16 (whose range ends at 65504 and whose normal numbers start at 6e-5) and
# n * log1p(b |s|) stays finite in float32 for any score a model produces.
PARAMETER_LIMITS = (1e-4, 1e4)


def closest_name(value, choices) -> str:
    """'; did you mean X?' for a near miss among `choices`, else '.' (ends the sentence either way)."""
    match = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f"; did you mean {match[0]!r}?" if match else "."


def checked_flag(name: str, value) -> bool:
    """A real bool (numpy's too); anything else (the string "False", 0, None) is refused: SDPA refuses it, and
    reading it as truthy would run causal attention for `is_causal="False"`."""
    kind = type(value)
    if kind is bool:
        return value
    if kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_"):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} ({kind.__name__})")


def is_real(value) -> bool:
    """A real number that is not a bool."""
    kind = type(value)
    if kind is float or kind is int:  # the common answer without the ABC check (0.4 us, asked per call)
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Choice:
    """A setting with a fixed set of values, shared by every parameter of a layer (e.g. `scoring_granularity`)."""

    field: str
    choices: tuple[str, ...]
    default: str
    doc: str
    old_name: str | None = None  # the field's name in configs saved before it was renamed (still accepted)

    def check(self, value) -> None:
        if value not in self.choices:
            raise ValueError(f"{self.field} must be one of {self.choices}, got {value!r}{closest_name(value, self.choices)}")


@dataclass(frozen=True)
class ParameterSpec:
    """One per-head parameter of a scoring function, declared once (see the module docstring)."""

    name: str  # key of the parameter dict the kernels read
    field: str  # config field of the initial (or fixed) value
    doc: str  # documentation of `field`
    default: float | None = None  # None: unset, then `derive` or `required` applies
    low: float = 0.0  # allowed range of `field`: [low, high], low excluded when `low_open`
    high: float = math.inf
    low_open: bool = False
    learn_field: str | None = None  # config flag saying whether the parameter is trained
    learn_default: bool = False
    learn_doc: str = ""
    learnable: bool = False  # whether it is trained, when there is no `learn_field`
    floor: float = 0.0  # the value stays above it (softplus); `floor_included`: at or above
    floor_included: bool = False
    follows_parametrization: bool = False  # stored as `scoring_parametrization` says (else softplus)
    cap: float | None = None  # clamped to at most this when read
    derive: Callable[[Mapping], float | None] | None = None  # the value of an unset field, from the settings
    required: str = ""  # the error when the value is still unset (and the parameter is not `optional`)
    optional: bool = False  # the function runs without it (then left out of the parameter dict)

    def describe(self) -> str:
        left = "(" if self.low_open else "["
        high = "inf)" if math.isinf(self.high) else f"{self.high:g}]"
        return f"{left}{self.low:g}, {high}"

    def check(self, value) -> None:
        """Raise ValueError naming the field when `value` is not a finite number in range (None: when optional)."""
        if value is None and self.default is None:
            return
        if not is_real(value):
            raise ValueError(f"{self.field} must be a number in {self.describe()}, got {value!r} ({type(value).__name__})")
        above_low = value > self.low if self.low_open else value >= self.low
        if not (math.isfinite(value) and above_low and value <= self.high):
            raise ValueError(f"{self.field} must be a finite number in {self.describe()}, got {value!r}")

    def check_flag(self, value) -> None:
        if self.learn_field is not None and not isinstance(value, bool):
            raise ValueError(f"{self.learn_field} must be true or false, got {value!r}")

    def is_learned(self, settings: Mapping) -> bool:
        return bool(settings[self.learn_field]) if self.learn_field else self.learnable

    def can_learn(self) -> bool:
        return self.learn_field is not None or self.learnable

    def parametrization(self, settings: Mapping) -> str:
        return settings["scoring_parametrization"] if self.follows_parametrization else "softplus"

    def initial_value(self, settings: Mapping) -> float | None:
        """The configured value, else the derived one; raises `required` when neither exists."""
        value = settings.get(self.field)
        if value is None and self.derive is not None:
            value = self.derive(settings)
        if value is None and not self.optional:
            raise ValueError(self.required or f"{self.field} is unset and has no default; set it")
        return None if value is None else float(value)

    def load_bound(self, settings: Mapping) -> tuple[float, bool]:
        """(bound, included) that a loaded value must respect: the floor, > 0 under a learned `exp`, any finite
        value under a learned `raw`."""
        if self.is_learned(settings) and self.parametrization(settings) == "raw":
            return -math.inf, True  # raw: any finite value (the authors' 114M run trains n unclamped)
        if self.is_learned(settings) and self.parametrization(settings) == "exp":
            return 0.0, False  # exp(raw) keeps the value positive, not above the floor
        return self.floor, self.floor_included


def max_positions(settings: Mapping) -> float | None:
    """The default of a length parameter: the model's max_position_embeddings (None outside a model)."""
    value = settings.get("max_position_embeddings")
    return float(value) if value else None


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
        self.raw = nn.Parameter(torch.full((size,), self._raw(init)))

    def _raw(self, init: float) -> float:
        if self.parametrization == "raw":
            return float(init)
        if self.parametrization == "exp":
            return math.log(init)
        # keep the initial value strictly above a floor the value may reach (n >= 1) so that the raw value is
        # finite; above a floor of 0 every value in range (>= PARAMETER_LIMITS[0]) already is, and is kept as given
        # (a margin there would turn a small b, e.g. 1e-4 for a softmax-matched start, silently into 1e-3)
        margin = 1e-3 if self.floor else PARAMETER_LIMITS[0]
        return _inverse_softplus(max(init - self.floor, margin))

    def forward(self) -> Tensor:
        if not self.learnable:
            value = self.value
        elif self.parametrization == "raw":
            value = self.raw
        elif self.parametrization == "exp":
            value = torch.exp(self.raw)
        else:
            value = F.softplus(self.raw)
            if self.floor:  # one small op fewer for b (floor 0): a training step reads every layer's values
                value = value + self.floor
        return value.expand(self.num_heads) if value.numel() == 1 else value

    def source(self) -> Tensor:
        """The tensor the value is computed from (the raw parameter, or the buffer of a fixed value)."""
        return self.raw if self.learnable else self.value

    @staticmethod
    def value_of(stored: Tensor, learnable: bool, parametrization: str, floor: float = 0.0) -> Tensor:
        """The value a stored tensor (`raw`, or the `value` buffer of a fixed parameter) stands for (float64)."""
        stored = stored.detach().double()
        if not learnable or parametrization == "raw":
            return stored
        return torch.exp(stored) if parametrization == "exp" else F.softplus(stored) + floor

    def set_value(self, value: Tensor) -> None:
        """Store `value` (per entry) in this parameter's own form; refuses a value its parametrization cannot hold
        (at or below the floor under softplus, not positive under exp) rather than moving it."""
        value = value.detach().double().reshape(self.source().shape)
        if self.learnable and self.parametrization != "raw":
            low = self.floor if self.parametrization == "softplus" else 0.0
            if not bool((value > low).all()):
                raise ValueError(f"value {value.tolist()} cannot be stored as {self.parametrization} (must be > {low:g})")
            y = value - self.floor  # softplus^-1(y) = y + log(1 - e^-y), stable for small and large y
            value = torch.log(value) if self.parametrization == "exp" else y + torch.log(-torch.expm1(-y))
        with torch.no_grad():
            self.source().copy_(value.to(self.source().dtype))

    def reset(self, init: float) -> None:
        """Set the value again (used by `_init_weights`)."""
        with torch.no_grad():
            if self.learnable:
                self.raw.fill_(self._raw(init))
            else:
                self.value.fill_(init)


def value_copy(tensor: Tensor) -> tuple | Tensor | None:
    """What `unchanged_values` compares a tensor with later (an edit through `.data` moves neither its version
    counter nor its storage): a CPU tensor's dtype and values as a list (a few per-head values, read in ~0.4 us where
    torch.equal with a copy took 0.8 us, and several times that in a decoding step's layer), a copy of other
    inference tensors (which have no version counter); None on other devices, where comparing would wait for the
    device. Where it is a list, the dtype and values decide alone: version counter and storage add nothing."""
    if tensor.is_cpu:
        return tensor.dtype, tensor.tolist()
    return tensor.detach().clone() if tensor.is_inference() else None


def unchanged_values(tensor: Tensor, copy: tuple | Tensor | None) -> bool:
    if copy is None:
        return True
    if type(copy) is tuple:
        return tensor.dtype is copy[0] and tensor.tolist() == copy[1]
    return torch.equal(tensor, copy)


# --------------------------------------------------------------------------------------------------
# Values of one call's parameters: the checks, and the cache of tensors that passed them
# --------------------------------------------------------------------------------------------------


# Per-head tensors whose values passed the checks: id -> (weak reference, (heads, positive), value_copy, version
# counter, storage). A tensor found here is the same object with the same values as when it was checked, so they
# need no second look: a decoding loop passing the same b and n each call pays a lookup instead of the checks. On the
# CPU its values are compared (see value_copy); elsewhere an in-place edit moves the version counter and `.data =`
# the storage.
_CHECKED: dict = {}


def checked_before(value, heads: int, query: Tensor, positive: bool) -> bool:
    """Whether `value` is a tensor remembered with these values for `heads` heads on the query's device."""
    hit = _CHECKED.get(id(value))
    if hit is None or hit[0]() is not value or hit[1] != (heads, positive):
        return False
    if type(hit[2]) is tuple:
        return value.is_cpu and query.is_cpu and unchanged_values(value, hit[2])
    return hit[3] == value._version and hit[4] == value.data_ptr() and value.device == query.device


def _remember_checked(tensor: Tensor, heads: int, positive: bool) -> None:
    if len(_CHECKED) >= 256:
        _CHECKED.clear()
    copy = value_copy(tensor)
    by_value = type(copy) is tuple
    _CHECKED[id(tensor)] = (weakref.ref(tensor), (heads, positive), copy, None if by_value else tensor._version,
                            None if by_value else tensor.data_ptr())


def as_head_tensor(value, heads: int, name: str, device, positive: bool, compiling: bool = False) -> Tensor:
    if isinstance(value, Tensor):
        tensor = value
        if tensor.dtype == torch.bool or tensor.is_complex():
            raise TypeError(f"{name} must be a real number or a float tensor of shape [num_heads={heads}], got dtype {tensor.dtype}")
        if not tensor.is_floating_point():
            tensor = tensor.float()
        if tensor.device != device:
            tensor = tensor.to(device)
        if tensor.dim() > 1 or tensor.numel() not in (1, heads):
            raise ValueError(f"{name} must be a scalar or a tensor of shape [num_heads={heads}], got shape {tuple(tensor.shape)}")
        if not compiling:
            # one read of the (per-head, so few) values and checks in Python: four reductions with a host sync each
            # cost more than a decoding step's kernel call
            values = tensor.tolist()
            _check_head_values(name, values if tensor.dim() else [values], positive)
        if tensor.dim() == 1 and tensor.shape[0] == heads:
            # remembered only where the call uses the caller's own plain tensor (subclasses may have no storage;
            # inference tensors off the CPU have no version counter to go by: checked on every call)
            if (not compiling and tensor is value and type(value) in (Tensor, torch.nn.Parameter)
                    and (value.is_cpu or not value.is_inference())):
                _remember_checked(value, heads, positive)
            return tensor
        return tensor.reshape(-1).expand(heads)
    if not is_real(value):
        raise TypeError(f"{name} must be a real number or a float tensor of shape [num_heads={heads}], got {value!r}")
    number = float(value)
    if not (math.isfinite(number) and (number > 0 or not positive)):  # the list check only to word the error
        _check_head_values(name, [number], positive)
    if compiling:  # traced: a tensor of the graph, no module-level cache
        return torch.full((heads,), number, device=device)
    return _constant(number, heads, device)


def _check_head_values(name: str, values: list, positive: bool) -> None:
    # a finite sum means every value is finite (NaN and inf propagate); only a failing row is looked at closely
    if not math.isfinite(sum(values)) and not all(math.isfinite(x) for x in values):
        raise ValueError(f"{name} must be finite, got {values}")
    if positive and values and not min(values) > 0:
        raise ValueError(f"{name} must be > 0, got {values}")


_CONSTANTS: dict = {}


def _constant(number: float, heads: int, device) -> Tensor:
    """A [heads] float32 tensor of `number`, made once per (number, heads, device): a decoding loop passing the same
    floats every step pays no tensor construction. Never modified in place (the kernels only read parameters)."""
    key = (number, heads, device)
    tensor = _CONSTANTS.get(key)
    if tensor is None:
        if len(_CONSTANTS) >= 256:
            _CONSTANTS.clear()
        tensor = _CONSTANTS[key] = torch.full((heads,), number, device=device)
    return tensor
