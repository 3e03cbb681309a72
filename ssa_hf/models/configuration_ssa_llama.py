"""SSALlamaConfig: a Llama decoder whose attention uses a selectable scoring function (SSA by default)."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import LlamaConfig

from .configuration_common import OUTPUT_ATTENTIONS, SCORING_CONFIG_DOC, ScoringConfigMixin, validate_output_attentions


@strict
class SSALlamaConfig(LlamaConfig, ScoringConfigMixin):
    r"""
    Configuration of [`SSALlamaModel`], [`SSALlamaForCausalLM`] and [`SSALlamaForSequenceClassification`]: every
    field of [`LlamaConfig`] (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, rope_parameters, tie_word_embeddings, ...) plus the fields below.

    Args:
        attention_only (`bool`, *optional*, defaults to `False`):
            Drop the MLP block of every layer (the attention-only variant of the paper's in-context-learning
            experiments).
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

    output_attentions = OUTPUT_ATTENTIONS
    validate_output_attentions = validate_output_attentions

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate_scoring()


__all__ = ["SSALlamaConfig"]
