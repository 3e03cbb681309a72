"""SSABertConfig: a RoBERTa-style encoder (as BabyBERTa) whose attention uses a selectable scoring function."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import RobertaConfig

from .configuration_common import OUTPUT_ATTENTIONS, SCORING_CONFIG_DOC, ScoringConfigMixin, validate_output_attentions


@strict
class SSABertConfig(RobertaConfig, ScoringConfigMixin):
    r"""
    Configuration of [`SSABertModel`] and its heads (masked LM, causal LM, sequence and token classification,
    multiple choice, question answering): every field
    of [`RobertaConfig`] (vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
    max_position_embeddings, attention_probs_dropout_prob, ...) plus the fields below.

    Args:
    """ + SCORING_CONFIG_DOC + r"""
    The attention implementation defaults to `"ssa_auto"`; see [`SSALlamaConfig`]. Attention dropout
    (`attention_probs_dropout_prob` > 0) runs on the eager backend during training. As in RoBERTa, `is_decoder=True`
    makes the self-attention causal and `add_cross_attention=True` (decoders only) adds cross-attention layers,
    which use the same scoring function (with their own parameters).

    Example:
    ```python
    >>> import ssa_hf
    >>> from ssa_hf import SSABertConfig, SSABertForMaskedLM
    >>> config = SSABertConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    ...                        num_attention_heads=4, attention_scoring="ssa")
    >>> model = SSABertForMaskedLM(config)
    ```"""

    model_type = "ssa_bert"

    output_attentions = OUTPUT_ATTENTIONS
    validate_output_attentions = validate_output_attentions

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate_scoring()


__all__ = ["SSABertConfig"]
