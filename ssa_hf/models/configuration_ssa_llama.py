"""SSALlamaConfig: a Llama decoder whose attention uses a selectable scoring function (SSA by default)."""

from __future__ import annotations

import math

from huggingface_hub.dataclasses import strict
from transformers import LlamaConfig

from .configuration_common import OUTPUT_ATTENTIONS, SCORING_CONFIG_DOC, ScoringConfigMixin, validate_output_attentions


MLP_TYPES = ("swiglu", "relu2")
NORM_TYPES = ("rmsnorm", "layernorm1p")


@strict
class SSALlamaConfig(LlamaConfig, ScoringConfigMixin):
    r"""
    Configuration of [`SSALlamaModel`], [`SSALlamaForCausalLM`] and [`SSALlamaForSequenceClassification`]: every
    field of [`LlamaConfig`] (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, rope_parameters, tie_word_embeddings, ...) plus the fields below.

    Args:
        attention_only (`bool`, *optional*, defaults to `False`):
            Drop the MLP block of every layer (an MLP-free model: the pre-attention norm and the residual around
            attention stay, so it is not the authors' attention-only ICL variant, which removes those too).
        mlp_type (`str`, *optional*, defaults to `"swiglu"`):
            The feed-forward block. `"swiglu"`: Llama's gated MLP, down(act(gate(x)) * up(x)) with three matrices
            and `hidden_act` (silu by default). `"relu2"`: Nemotron's two-matrix MLP, down(relu(up(x))^2) (squared
            ReLU); `hidden_act` is then set to `"relu2"`, the activation it uses, and any other value is refused.
            `intermediate_size` is the width of either (the 114M paper model: 3,072 with `"relu2"`).
        norm_type (`str`, *optional*, defaults to `"rmsnorm"`):
            The normalisation layers (before attention, before the MLP, and after the last layer). `"rmsnorm"`:
            Llama's RMSNorm (a gain, no bias). `"layernorm1p"`: Nemotron's LayerNorm with a zero-centred gain: the
            stored weight w is gamma - 1, so the output is LayerNorm(x) * (1 + w) + bias, with w and bias
            initialised to 0 (weight decay then pulls gamma towards 1, not 0). Both use `rms_norm_eps` as epsilon.
        partial_rotary_factor (`float`, *optional*):
            The fraction of each head's dimensions that RoPE rotates, in (0, 1]; the others carry no position
            (Nemotron: 0.5). A keyword of the constructor, stored where transformers keeps it:
            `rope_parameters["partial_rotary_factor"]` (in YAML presets, write it there); unset: 1.0 (full RoPE,
            Llama). It must give an even number of rotated dimensions, and values below 1 need
            `rope_type="default"`. The rotated dimensions are pairs (i, i + head_dim / 2) for the first
            `head_dim * factor / 2` values of i (Llama's rotate-half layout); Nemotron rotates the first
            `head_dim * factor` dimensions instead. The two are the same model up to a fixed permutation of the
            query/key dimensions, which the projections absorb, so a model trained here is equivalent, but
            Nemotron weights would need that permutation to load.
    """ + SCORING_CONFIG_DOC + r"""
    The attention implementation defaults to `"ssa_auto"` (the best ssa-hf backend for the device and for whether
    gradients are needed); `"ssa_eager"`, `"ssa_flex"` and `"ssa_blockwise"` pick one. transformers' standard names
    run ssa-hf's own implementation of the configured function (`attn_implementation_aliases`: `"eager"` ->
    `"ssa_eager"`, `"sdpa"` -> `"ssa_auto"`, `"flex_attention"` -> `"ssa_flex"`); its other implementations (flash,
    paged) run softmax and are accepted only with `attention_scoring="softmax"`.

    Example:
    ```python
    >>> import ssa_hf
    >>> from ssa_hf import SSALlamaConfig, SSALlamaForCausalLM
    >>> config = SSALlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...                         num_attention_heads=4, attention_scoring="ssa")
    >>> model = SSALlamaForCausalLM(config)
    ```"""

    model_type = "ssa_llama"
    attention_only: bool = False
    mlp_type: str = "swiglu"
    norm_type: str = "rmsnorm"

    output_attentions = OUTPUT_ATTENTIONS
    validate_output_attentions = validate_output_attentions

    def __post_init__(self, **kwargs):
        # transformers moves a partial_rotary_factor keyword into rope_parameters, unless one is there already
        given = kwargs.get("partial_rotary_factor")
        super().__post_init__(**kwargs)
        stored = (self.rope_parameters or {}).get("partial_rotary_factor")
        if given is not None and stored != given:
            raise ValueError(f"partial_rotary_factor={given} disagrees with rope_parameters"
                             f"['partial_rotary_factor']={stored}; set one of them")
        self.validate_block()
        self.validate_scoring()

    def rotary_fraction(self) -> float:
        """The fraction of each head's dimensions RoPE rotates (1.0: all)."""
        value = (self.rope_parameters or {}).get("partial_rotary_factor")
        return 1.0 if value is None else float(value)

    def validate_block(self) -> None:
        """Check mlp_type, norm_type and partial_rotary_factor; raise ValueError naming the field."""
        if self.mlp_type not in MLP_TYPES:
            raise ValueError(f"mlp_type must be one of {MLP_TYPES}, got {self.mlp_type!r}")
        if self.norm_type not in NORM_TYPES:
            raise ValueError(f"norm_type must be one of {NORM_TYPES}, got {self.norm_type!r}")
        if self.mlp_type == "relu2":
            if self.hidden_act not in ("silu", "relu2"):
                raise ValueError(f"mlp_type='relu2' uses squared ReLU, but hidden_act={self.hidden_act!r}: leave "
                                 "hidden_act unset (or 'relu2'), or use mlp_type='swiglu' for a gated MLP with it")
            self.hidden_act = "relu2"
        rope = self.rope_parameters or {}
        # partial_rotary_factor is not a declared field (stock Llama has none, and transformers' RoPE code reads the
        # attribute when present): it lives in rope_parameters, where transformers' RoPE standardisation puts it
        self._validate_rotary(rope)

    def _validate_rotary(self, rope: dict) -> None:
        fraction = self.rotary_fraction()
        if isinstance(fraction, bool) or not (math.isfinite(fraction) and 0 < fraction <= 1):
            raise ValueError(f"partial_rotary_factor must be a number in (0, 1], got {fraction!r}")
        rotated = self.head_dim * fraction
        if fraction < 1 and (abs(rotated - round(rotated)) > 1e-6 or round(rotated) < 2 or round(rotated) % 2):
            raise ValueError(f"partial_rotary_factor={fraction} rotates {rotated:g} of the {self.head_dim} dimensions "
                             "of a head; RoPE needs a whole even number >= 2 of them: choose another factor")
        if fraction < 1 and rope.get("rope_type", "default") != "default":
            raise ValueError(f"partial_rotary_factor < 1 is supported with rope_type 'default' only, got "
                             f"{rope.get('rope_type')!r}")


__all__ = ["SSALlamaConfig"]
