"""SSAGPT2Config: a GPT-2 decoder (learned absolute positions, LayerNorm, GELU MLP) whose attention uses a
selectable scoring function (SSA by default): the backbone of the paper's in-context-learning experiments."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import GPT2Config

from .configuration_common import OUTPUT_ATTENTIONS, SCORING_CONFIG_DOC, ScoringConfigMixin, validate_output_attentions


@strict
class SSAGPT2Config(GPT2Config, ScoringConfigMixin):
    r"""
    Configuration of [`SSAGPT2Model`], [`SSAGPT2LMHeadModel`] and its other heads (sequence and token
    classification, question answering): every field of [`GPT2Config`] (vocab_size, n_positions, n_embd, n_layer,
    n_head, n_inner (default 4 * n_embd), activation_function, resid_pdrop, embd_pdrop, attn_pdrop,
    layer_norm_epsilon, scale_attn_by_inverse_layer_idx, add_cross_attention, tie_word_embeddings, ...; also under
    their common names hidden_size, num_hidden_layers, num_attention_heads, max_position_embeddings) plus the
    fields below.

    Args:
    """ + SCORING_CONFIG_DOC + r"""
    The attention implementation defaults to `"ssa_auto"`; see [`SSALlamaConfig`]. `reorder_and_upcast_attn` is an
    option of transformers' softmax eager path and is accepted only with `attention_scoring="softmax"`.

    Example:
    ```python
    >>> import ssa_hf
    >>> from ssa_hf import SSAGPT2Config, SSAGPT2LMHeadModel
    >>> config = SSAGPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128,
    ...                        attention_scoring="ssa")
    >>> model = SSAGPT2LMHeadModel(config)
    ```"""

    model_type = "ssa_gpt2"

    output_attentions = OUTPUT_ATTENTIONS
    validate_output_attentions = validate_output_attentions

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.validate_scoring()
        if self.reorder_and_upcast_attn and not self.uses_softmax_only:
            raise ValueError(
                "reorder_and_upcast_attn=True belongs to transformers' softmax eager attention, which ssa-hf does not "
                f"run for attention_scoring={self.attention_scoring!r}; set it to False (ssa-hf's attention "
                "computes the scores in float32 when the inputs are half precision)"
            )


__all__ = ["SSAGPT2Config"]
