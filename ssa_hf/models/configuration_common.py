"""The attention-scoring fields shared by every ssa-hf model config (SSALlamaConfig, SSABertConfig).

Part of the remote-code unit: imports only the standard library, transformers-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scoring import ALL_SCORING_FUNCTIONS, ScoringOptions, closest_name

SCORING_CONFIG_DOC = r"""
        attention_scoring (`str` or `list[str]`, *optional*, defaults to `"ssa"`):
            The scoring function that turns attention scores into weights, by name (`ssa_hf.SCORING_FUNCTIONS`:
            softmax, ssa, temperature, ssmax, softmax1, sigmoid, softpick, sa_softmax, sparsemax, entmax15,
            entmax_alpha), or a linear-attention mechanism (`linear`: elu+1 features; `cosformer`: ReLU features
            with cos re-weighting by position distance). A list gives one name per attention head (a mixture of
            scoring heads). The softmax baseline is the same model with `"softmax"`.
        ssa_granularity (`str`, *optional*, defaults to `"head"`):
            `"head"`: one (b, n) pair per attention head; `"layer"`: one pair per layer shared by its heads.
            Also applies to the parameters of `temperature`, `ssmax` and `entmax_alpha`.
        ssa_parametrization (`str`, *optional*, defaults to `"softplus"`):
            How learnable b and n are stored. `"softplus"`: b = softplus(raw) > 0 and n = 1 + softplus(raw) >= 1
            whatever the optimiser does; `"exp"`: b = exp(a), n = exp(r) (the authors' nanoGPT code; n >= 1 is not
            enforced); `"raw"`: b and n are the parameters themselves, trained without any constraint (the authors'
            114M decoder: n from 1.5, unclamped, may fall below 1 or 0; a learned b that reaches 0 or below makes SSA
            undefined, which is why that run keeps b fixed).
        ssa_b_init (`float`, *optional*, defaults to 1.0):
            Initial (or fixed) value of SSA's b, in [1e-4, 1e4].
        ssa_n_init (`float`, *optional*, defaults to 1.5):
            Initial (or fixed) value of SSA's n, in [1, 1e4]. Under `softplus`, a learnable n starts at no less
            than 1.001 so that its raw value is finite.
        ssa_learn_b (`bool`, *optional*, defaults to `True`):
            Whether b is trained (else a fixed buffer).
        ssa_learn_n (`bool`, *optional*, defaults to `True`):
            Whether n is trained (else a fixed buffer).
        temperature_init (`float`, *optional*):
            Temperature t of `attention_scoring="temperature"` (softmax(s / t)); in [1e-4, 1e4]. Unset: matched to SSA's
            initial slope, t = 1 / (ssa_n_init * ssa_b_init) (2/3 with the defaults), the temperature at which
            softmax equals SSA for small scores; never 1 by default (that would be `softmax`).
        temperature_learnable (`bool`, *optional*, defaults to `False`):
            Whether t is trained.
        ssmax_s_init (`float`, *optional*, defaults to 0.43):
            Initial scale s of `attention_scoring="ssmax"` (softmax(s log(N) x)); learned, in [1e-4, 1e4].
        entmax_alpha_init (`float`, *optional*):
            alpha of `attention_scoring="entmax_alpha"`, in (1, 2]; required by it (no default: 1.5 is `entmax15`
            and 2 is `sparsemax`).
        entmax_alpha_learnable (`bool`, *optional*, defaults to `False`):
            Whether alpha is trained (kept in (1, 2]).
        cosformer_length (`float`, *optional*):
            CosFormer's length scale m in cos(pi/2 * (i - j) / m), fixed; defaults to `max_position_embeddings`.
            Longer inputs are refused (the re-weighting would turn negative).
        sigmoid_length (`float`, *optional*):
            n in the bias -log(n) of `attention_scoring="sigmoid"` (Ramapuram et al. 2024: one sequence length for
            every row, causal rows included); defaults to `max_position_embeddings`. Set it to the training length.
        attn_implementation_aliases (`dict[str, str]`, *optional*):
            What transformers' standard `attn_implementation` names run in this model, so that tools passing them
            never get softmax in place of the configured scoring function. Defaults to
            `{"eager": "ssa_eager", "sdpa": "ssa_auto", "flex_attention": "ssa_flex"}`; values must be ssa-hf
            implementations (`ssa_auto`, `ssa_eager`, `ssa_flex`, `ssa_blockwise`). `output_attentions=True` is
            accepted with `eager`, `ssa_eager` and `ssa_auto` and returns the weights of the configured function.

        Every numeric field must be a finite number in its range (the positive ones are bounded so that they
        survive a cast of the model to float16); the config raises a `ValueError` naming the field and the range.
"""

# transformers' standard attention implementation names -> the ssa-hf implementation each one runs
STANDARD_IMPLEMENTATION_ALIASES = {"eager": "ssa_eager", "sdpa": "ssa_auto", "flex_attention": "ssa_flex"}
# implementations that return attention weights (`output_attentions=True`): ssa_auto switches to eager for it
IMPLEMENTATIONS_WITH_WEIGHTS = (None, "eager", "ssa_eager", "ssa_auto")


@dataclass(kw_only=True)
class ScoringConfigMixin:
    """Dataclass fields for the scoring function; the documentation is `SCORING_CONFIG_DOC`."""

    attention_scoring: str | list[str] = "ssa"
    ssa_granularity: str = "head"
    ssa_parametrization: str = "softplus"
    ssa_b_init: float | int = 1.0
    ssa_n_init: float | int = 1.5
    ssa_learn_b: bool = True
    ssa_learn_n: bool = True
    temperature_init: float | int | None = None
    temperature_learnable: bool = False
    ssmax_s_init: float | int = 0.43
    entmax_alpha_init: float | int | None = None
    entmax_alpha_learnable: bool = False
    cosformer_length: float | int | None = None
    sigmoid_length: float | int | None = None
    attn_implementation_aliases: dict[str, str] | None = None

    def scoring_per_head(self) -> list[str]:
        """The scoring function of each attention head."""
        heads = self.num_attention_heads
        if isinstance(self.attention_scoring, str):
            return [self.attention_scoring] * heads
        return list(self.attention_scoring)

    def scoring_options(self) -> ScoringOptions:
        return ScoringOptions.from_config(self)

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
        try:
            self.scoring_options().validate()
        except ValueError as error:
            raise ValueError(str(error)) from None

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
