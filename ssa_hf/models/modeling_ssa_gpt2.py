"""SSAGPT2: transformers' GPT-2 decoder with a selectable attention scoring function (SSA by default).

The blocks and heads are GPT-2's own (learned absolute positions, pre-LayerNorm, GELU MLP of 4 x hidden, fused
Conv1D projections, so a stock GPT-2 checkpoint's weights load by name); every attention module, cross-attention
included (`add_cross_attention=True`), carries its scoring parameters (`transformer.h.N.attn.scoring`) and the
attention call goes through transformers' AttentionInterface to an ssa-hf implementation (`ssa_auto` by default).
Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.models.gpt2.modeling_gpt2 import (
    GPT2ForQuestionAnswering,
    GPT2ForSequenceClassification,
    GPT2ForTokenClassification,
    GPT2LMHeadModel,
    GPT2Model,
    GPT2PreTrainedModel,
)

from .configuration_ssa_gpt2 import SSAGPT2Config
from .modeling_common import SSAModelMixin, attach_scoring


class SSAGPT2PreTrainedModel(SSAModelMixin, GPT2PreTrainedModel):
    config_class = SSAGPT2Config
    config: SSAGPT2Config
    base_model_prefix = "transformer"
    _supports_flash_attn = False  # flash kernels run softmax only; sdpa/flex names map onto ssa-hf's own


class SSAGPT2Model(SSAGPT2PreTrainedModel, GPT2Model):
    def __init__(self, config: SSAGPT2Config):
        GPT2Model.__init__(self, config)
        for block in self.h:
            attach_scoring(block.attn, config)
            if hasattr(block, "crossattention"):
                attach_scoring(block.crossattention, config)
        self.post_init()


class SSAGPT2LMHeadModel(SSAGPT2PreTrainedModel, GPT2LMHeadModel, GenerationMixin):  # generation as a direct base
    def __init__(self, config: SSAGPT2Config):
        PreTrainedModel.__init__(self, config)
        self.transformer = SSAGPT2Model(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()


class SSAGPT2ForSequenceClassification(SSAGPT2PreTrainedModel, GPT2ForSequenceClassification):
    def __init__(self, config: SSAGPT2Config):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.transformer = SSAGPT2Model(config)
        self.score = nn.Linear(config.n_embd, self.num_labels, bias=False)
        self.post_init()


class SSAGPT2ForTokenClassification(SSAGPT2PreTrainedModel, GPT2ForTokenClassification):
    def __init__(self, config: SSAGPT2Config):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.transformer = SSAGPT2Model(config)
        self.dropout = nn.Dropout(0.1)  # GPT2ForTokenClassification's default (GPT2Config has no classifier dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class SSAGPT2ForQuestionAnswering(SSAGPT2PreTrainedModel, GPT2ForQuestionAnswering):
    def __init__(self, config: SSAGPT2Config):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.transformer = SSAGPT2Model(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()


__all__ = [
    "SSAGPT2PreTrainedModel",
    "SSAGPT2Model",
    "SSAGPT2LMHeadModel",
    "SSAGPT2ForSequenceClassification",
    "SSAGPT2ForTokenClassification",
    "SSAGPT2ForQuestionAnswering",
]
