"""The scoring settings of a model, derived from the registry's parameter declarations.

Every `ParameterSpec` of every registry entry contributes its config fields (initial value, learnable flag);
`CHOICES` adds the two settings shared by all parameters of a layer. From that one list come:
- `setting_fields()`: the config mixin's dataclass fields (configuration_common.py) and `settings_doc()` its
  documentation;
- `resolve_settings()` (defaults, then a config's attributes, then explicit values) and `validate_settings()`;
- `ScoringParameters`: the module holding one layer's parameters, built from the declarations;
- `card_fields()`: the settings a model card shows for a config.

Part of the remote-code unit: imports only torch and siblings.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any, Iterable, Mapping

import torch
from torch import Tensor, nn

from .parameters import (GRANULARITIES, PARAMETRIZATIONS, Choice, ConstrainedParameter, ParameterSpec, unchanged_values,
                         value_copy)
from .scoring import ALL_SCORING_FUNCTIONS, ScoringModule, get_scoring_function

CHOICES = (
    Choice("scoring_granularity", GRANULARITIES, "head",
           '`"head"`: one value of each parameter per attention head (one (b, n) pair for SSA); `"layer"`: one per '
           "layer shared by its heads. Applies to the parameters of every scoring function (`ssa`, `temperature`, "
           "`ssmax`, `entmax_alpha`, ...).", old_name="ssa_granularity"),
    Choice("scoring_parametrization", PARAMETRIZATIONS, "softplus",
           'How learnable b and n are stored. `"softplus"`: b = softplus(raw) > 0 and n = 1 + softplus(raw) >= 1 '
           'whatever the optimiser does; `"exp"`: b = exp(a), n = exp(r) (the authors\' nanoGPT code; n >= 1 is not '
           'enforced); `"raw"`: b and n are the parameters themselves, trained without any constraint (the authors\' '
           "114M decoder: n from 1.5, unclamped, may fall below 1 or 0; a learned b that reaches 0 or below makes SSA "
           "undefined, which is why that run keeps b fixed).", old_name="ssa_parametrization"),
)
# names of configs saved before the rename -> the canonical names (still accepted when loading)
OLD_NAMES = {c.old_name: c.field for c in CHOICES if c.old_name}
# read from the config for the derived defaults (e.g. cosformer_length), not a scoring setting itself
CONTEXT_FIELDS = ("max_position_embeddings",)


def parameter_specs(entries: Iterable | None = None) -> list[ParameterSpec]:
    """Every declared parameter, once per config field, in registry order (a field declared twice must agree)."""
    seen: dict[str, ParameterSpec] = {}
    for entry in ALL_SCORING_FUNCTIONS.values() if entries is None else entries:
        for spec in entry.parameters:
            if seen.setdefault(spec.field, spec) is not spec:
                raise ValueError(f"config field {spec.field!r} is declared by two different parameters")
    return list(seen.values())


def setting_fields() -> list[tuple[str, Any, Any, str]]:
    """(field, annotation, default, doc) of every scoring setting, in documentation order. The annotations are
    strings, as in a module with postponed annotations: the values are checked by `validate_settings` (with
    messages that name the range), not by the strict dataclass's type check."""
    fields = [(c.field, "str", c.default, c.doc) for c in CHOICES]
    for spec in parameter_specs():
        fields.append((spec.field, "float | int" + (" | None" if spec.default is None else ""), spec.default, spec.doc))
        if spec.learn_field:
            fields.append((spec.learn_field, "bool", spec.learn_default, spec.learn_doc))
    return fields


def default_settings() -> dict[str, Any]:
    return {name: default for name, _, default, _ in setting_fields()}


def resolve_settings(config=None, **overrides) -> dict[str, Any]:
    """The scoring settings: declared defaults, then `config`'s attributes (a model config or any object), then
    `overrides` (canonical or old names). Includes the config's `max_position_embeddings` for derived defaults."""
    settings = default_settings()
    for name in [*settings, *CONTEXT_FIELDS]:
        if config is not None and hasattr(config, name):
            settings[name] = getattr(config, name)
    for name, value in overrides.items():
        name = OLD_NAMES.get(name, name)
        if name not in settings and name not in CONTEXT_FIELDS:
            raise TypeError(f"unknown scoring setting {name!r}; known: {sorted(default_settings())}")
        settings[name] = value
    return settings


def validate_settings(settings: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first setting outside its declared range or choices."""
    for choice in CHOICES:
        choice.check(settings[choice.field])
    specs = parameter_specs()
    for spec in specs:
        spec.check_flag(settings[spec.learn_field] if spec.learn_field else None)
    for spec in specs:
        spec.check(settings[spec.field])


def settings_doc(indent: str = " " * 8) -> str:
    """The docstring entries of the scoring settings, in transformers' config style."""
    lines = []
    for name, kind, default, doc in setting_fields():
        type_name = kind if kind in ("bool", "str") else "float"
        shown = "" if default is None else f", defaults to {f'`{default!r}`' if not isinstance(default, float) else default}"
        shown = shown.replace("'", '"')
        lines.append(f"{indent}{name} (`{type_name}`, *optional*{shown}):")
        lines.append(textwrap.fill(doc, 116, initial_indent=indent + "    ", subsequent_indent=indent + "    "))
    return "\n".join(lines)


def card_fields(config) -> list[str]:
    """The settings a model card shows for `config`: for each scoring function it uses (sorted), the shared
    settings and the fields of the parameters that can be learned (fixed lengths are left out)."""
    names = [config.attention_scoring] if isinstance(config.attention_scoring, str) else config.attention_scoring
    shown: list[str] = []
    for name in sorted(set(names)):
        for field in card_fields_of(name):
            if field not in shown:
                shown.append(field)
    return shown


def card_fields_of(name: str) -> list[str]:
    """The settings a model card shows for one scoring function (empty when it has no learnable parameter)."""
    specs = [s for s in get_scoring_function(name).parameters if s.can_learn()]
    if not specs:
        return []
    fields = ["scoring_granularity"]
    if any(s.follows_parametrization for s in specs):
        fields.append("scoring_parametrization")
    for spec in specs:
        fields += [spec.field] + ([spec.learn_field] if spec.learn_field else [])
    return fields


def card_fields_by_scoring() -> dict[str, list[str]]:
    """`card_fields_of` for every registered name that shows any field."""
    return {name: card_fields_of(name) for name in ALL_SCORING_FUNCTIONS if card_fields_of(name)}


def _gathered(tensor: Tensor) -> Tensor:
    """A value as a plain tensor without a graph: a sharded one (FSDP2's DTensor) gathered (a collective).  Plain
    tensors skip the attribute lookup, whose miss costs microseconds on every check of a training step."""
    if type(tensor) is not Tensor and hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.detach() if tensor.requires_grad else tensor


class ScoringParameters(ScoringModule):
    """The trainable or fixed parameters of one attention layer's scoring function, built from its declarations.

    `ScoringParameters("ssa", num_heads)` uses the declared defaults; a model config (or any object with the
    settings as attributes) and keyword settings override them, e.g. `ScoringParameters("ssa", 8,
    scoring_granularity="layer", ssa_b_init=0.8)`. `forward()` returns {name: tensor of shape [num_heads]}.
    """

    def __init__(self, scoring: str, num_heads: int, config=None, **settings):
        super().__init__()
        entry = get_scoring_function(scoring)
        self.settings = resolve_settings(config, **settings)
        validate_settings(self.settings)
        self.scoring, self.specs = entry.name, {s.name: s for s in entry.parameters}
        size = num_heads if self.settings["scoring_granularity"] == "head" else 1
        self.params = nn.ModuleDict()
        for spec in entry.parameters:
            value = spec.initial_value(self.settings)
            if value is not None:
                self.params[spec.name] = ConstrainedParameter(
                    value, size, num_heads, spec.is_learned(self.settings), spec.parametrization(self.settings),
                    floor=spec.floor,
                )

    def initial_values(self) -> dict[str, float]:
        return {name: self.specs[name].initial_value(self.settings) for name in self.params}

    def reset_parameters(self) -> None:
        for name, value in self.initial_values().items():
            self.params[name].reset(value)

    def attention_groups(self, heads: int) -> list:
        return [(get_scoring_function(self.scoring), list(range(heads)), self())]

    def parameter_problems(self, prefix: str = "") -> list[str]:
        """Every value that is not finite or outside its declared bound, as '{prefix}{name}: reason' lines (one
        host read of the few per-head values: run when they may have changed, not per call)."""
        problems = []
        with torch.no_grad():
            tensors = self._last_values() or self()
            # sharded (FSDP2) between optimizer steps: gathered (a collective)
            flat = [_gathered(t) for t in tensors.values()]
            flat = [t if t.dim() == 1 else t.reshape(-1) for t in flat]
            # one host read for all of them (per call of a training step: each small op costs microseconds); a
            # float32 value is exact as a Python float
            read = torch.cat(flat).tolist() if flat else []
            start = 0
            for name, part in zip(tensors, flat):
                values, start = read[start:start + part.numel()], start + part.numel()
                # the declared floor (b > 0, n >= 1, ...); a learned `exp` parameter only promises > 0
                bound, included = self.specs[name].load_bound(self.settings)
                if not all(math.isfinite(x) for x in values):
                    problems.append(f"{prefix}{name}: not finite, got {values}")
                elif any(x < bound or (not included and x == bound) for x in values):
                    problems.append(f"{prefix}{name}: must be {'>=' if included else '>'} {bound}, got {values}")
        return problems

    def forward(self) -> dict[str, Tensor]:
        values = {name: param() for name, param in self.params.items()}
        for name, value in values.items():
            cap = self.specs[name].cap
            if cap is not None:
                values[name] = value.clamp(max=cap)
        if not torch.compiler.is_compiling():
            # kept for parameter_problems: in a training step the attention function reads the values with their
            # graph and then checks them, which would otherwise compute them a second time (small ops, ~5 us each)
            sources = self._sources()
            if not any(t.is_inference() for t in sources):
                self.__dict__["_last"] = ([(t, t._version, t.data_ptr(), value_copy(t)) for t in sources],
                                          {name: value.detach() for name, value in values.items()})
        return values

    def _sources(self) -> list[Tensor]:
        return [param.source() for param in self.params.values()]

    def _last_values(self) -> dict[str, Tensor] | None:
        """The values of the last forward, detached, while the tensors they came from are unchanged (the same
        tensors at the same versions and storage: `module.to(dtype)` swaps storage without a version bump); else
        None."""
        last = self.__dict__.get("_last")
        if last is None:
            return None
        sources, values = last
        current = self._sources()
        if len(current) != len(sources) or any(t is not s or t._version != v or t.data_ptr() != p
                                               or not unchanged_values(t, c) for t, (s, v, p, c) in zip(current, sources)):
            return None
        return values

    def extra_repr(self) -> str:
        return f"scoring={self.scoring!r}"
