"""The attention-scoring fields shared by every ssa-hf model config (SSALlamaConfig, SSABertConfig).

Their fields are generated from the scoring functions' declared parameters (`settings.setting_fields`), so a new
scoring parameter needs no edit here. Part of the remote-code unit: imports only siblings, transformers-free.
"""

from __future__ import annotations

from dataclasses import field, make_dataclass

from .scoring import ALL_SCORING_FUNCTIONS, closest_name
from .settings import OLD_NAMES, resolve_settings, setting_fields, settings_doc, validate_settings

SCORING_CONFIG_DOC = r"""
        attention_scoring (`str` or `list[str]`, *optional*, defaults to `"ssa"`):
            The scoring function that turns attention scores into weights, by name (`ssa_hf.SCORING_FUNCTIONS`:
            softmax, ssa, temperature, ssmax, softmax1, sigmoid, softpick, sa_softmax, sparsemax, entmax15,
            entmax_alpha), or a linear-attention mechanism (`linear`: elu+1 features; `cosformer`: ReLU features
            with cos re-weighting by position distance). A list gives one name per attention head (a mixture of
            scoring heads). The softmax baseline is the same model with `"softmax"`.
""" + settings_doc() + r"""
        attn_implementation_aliases (`dict[str, str]`, *optional*):
            What transformers' standard `attn_implementation` names run in this model, so that tools passing them
            never get softmax in place of the configured scoring function. Defaults to
            `{"eager": "ssa_eager", "sdpa": "ssa_auto", "flex_attention": "ssa_flex"}`; values must be ssa-hf
            implementations (`ssa_auto`, `ssa_eager`, `ssa_flex`, `ssa_blockwise`). `output_attentions=True` is
            accepted with `eager`, `ssa_eager` and `ssa_auto` and returns the weights of the configured function.

        Every numeric field must be a finite number in its range (the positive ones are bounded so that they
        survive a cast of the model to float16); the config raises a `ValueError` naming the field and the range.
        `ssa_granularity` and `ssa_parametrization`, the names of `scoring_granularity` and
        `scoring_parametrization` in configs saved before they were renamed, are still accepted.
"""

# transformers' standard attention implementation names -> the ssa-hf implementation each one runs
STANDARD_IMPLEMENTATION_ALIASES = {"eager": "ssa_eager", "sdpa": "ssa_auto", "flex_attention": "ssa_flex"}
# implementations that return attention weights (`output_attentions=True`): ssa_auto switches to eager for it
IMPLEMENTATIONS_WITH_WEIGHTS = (None, "eager", "ssa_eager", "ssa_auto")


# each family's attention-dropout field (Llama, RoBERTa, GPT-2)
ATTENTION_DROPOUT_FIELDS = ("attention_dropout", "attention_probs_dropout_prob", "attn_pdrop")


def _old_name(old: str, new: str) -> property:
    """`config.<old>` reads and writes `config.<new>`: configs saved before the rename load (transformers sets
    unknown keyword arguments as attributes), and preset files and overrides may still use the old name."""

    def get(self):
        return getattr(self, new)

    def set(self, value):
        setattr(self, new, value)

    return property(get, set, doc=f"The former name of `{new}` (still accepted).")


class _ScoringConfigMethods:
    """Methods of `ScoringConfigMixin`, whose fields are generated from the scoring declarations."""

    def scoring_per_head(self) -> list[str]:
        """The scoring function of each attention head."""
        heads = self.num_attention_heads
        if isinstance(self.attention_scoring, str):
            return [self.attention_scoring] * heads
        return list(self.attention_scoring)

    def scoring_settings(self) -> dict:
        """The resolved scoring settings of this config (see `settings.resolve_settings`)."""
        return resolve_settings(self)

    def validate_scoring(self) -> None:
        """Raise ValueError naming the offending field."""
        self._validate_aliases()
        names = [self.attention_scoring] if isinstance(self.attention_scoring, str) else list(self.attention_scoring)
        if not names:
            raise ValueError("attention_scoring: empty list; give a name or one name per head")
        for name in names:
            if name not in ALL_SCORING_FUNCTIONS:
                raise ValueError(
                    f"attention_scoring: unknown scoring function {name!r}{closest_name(name, ALL_SCORING_FUNCTIONS)} "
                    f"Choose from {list(ALL_SCORING_FUNCTIONS)}"
                )
        if not isinstance(self.attention_scoring, str) and len(names) != self.num_attention_heads:
            raise ValueError(
                f"attention_scoring: a list needs one name per head ({self.num_attention_heads}), got {len(names)}"
            )
        validate_settings(self.scoring_settings())
        for field in ATTENTION_DROPOUT_FIELDS:  # the attention functions refuse these too, at call time
            value = getattr(self, field, None)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not 0.0 <= value < 1.0):
                raise ValueError(f"{field} must be a probability in [0, 1) (0 turns attention dropout off), got {value!r}")

    def _validate_aliases(self) -> None:
        from .attention import IMPLEMENTATIONS

        if self.attn_implementation_aliases is None:
            self.attn_implementation_aliases = dict(STANDARD_IMPLEMENTATION_ALIASES)
        aliases = self.attn_implementation_aliases
        if not isinstance(aliases, dict) or any(v not in IMPLEMENTATIONS for v in aliases.values()):
            raise ValueError(
                f"attn_implementation_aliases: each standard name must map to one of {list(IMPLEMENTATIONS)}, got {aliases!r}"
            )

    @property
    def uses_softmax_only(self) -> bool:
        return all(name == "softmax" for name in self.scoring_per_head())


for _old, _new in OLD_NAMES.items():
    setattr(_ScoringConfigMethods, _old, _old_name(_old, _new))

# Dataclass fields for the scoring function, one per declared setting (documentation: `SCORING_CONFIG_DOC`)
ScoringConfigMixin = make_dataclass(
    "ScoringConfigMixin",
    [("attention_scoring", "str | list[str]", field(default="ssa")),
     *[(name, kind, field(default=default)) for name, kind, default, _ in setting_fields()],
     ("attn_implementation_aliases", "dict[str, str] | None", field(default=None))],
    bases=(_ScoringConfigMethods,),
    kw_only=True,
)
ScoringConfigMixin.__module__ = __name__


def _get_output_attentions(config) -> bool:
    return config._output_attentions


def _set_output_attentions(config, value: bool) -> None:
    # transformers allows this only with its "eager" (softmax); ssa-hf's eager path returns the configured weights
    if value and config._attn_implementation is None:
        config._attn_implementation = "eager"
    _check_weights_available(config._attn_implementation, value)
    config._output_attentions = value


def validate_output_attentions(config) -> None:
    _check_weights_available(config._attn_implementation, config.output_attentions)


def _check_weights_available(implementation: str | None, output_attentions: bool) -> None:
    if output_attentions and implementation not in IMPLEMENTATIONS_WITH_WEIGHTS:
        raise ValueError(
            f"output_attentions=True needs attention weights, which attn_implementation={implementation!r} never "
            f"materialises; use 'ssa_eager' (or 'eager', which runs it) or the default 'ssa_auto'."
        )


# set on each ssa-hf config class (they inherit transformers' property first, which allows only "eager")
OUTPUT_ATTENTIONS = property(_get_output_attentions, _set_output_attentions, doc="Whether the model returns all attentions.")
