"""SSALlama: transformers' Llama decoder with a selectable attention scoring function (SSA by default).

The layers and heads are Llama's own (with their forward signatures); each attention module carries its scoring parameters (`self_attn.scoring`) and the
attention call goes through transformers' AttentionInterface to an ssa-hf implementation (`ssa_auto` by default).
Part of the remote-code unit: imports only torch, transformers and siblings, so a saved checkpoint loads with
`trust_remote_code=True` where ssa-hf is not installed.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaForQuestionAnswering,
    LlamaForSequenceClassification,
    LlamaForTokenClassification,
    LlamaModel,
    LlamaPreTrainedModel,
)

from .configuration_ssa_llama import SSALlamaConfig
from .modeling_common import SSAModelMixin, attach_scoring


class NoMLP(nn.Module):
    """Stands in for the MLP of an attention-only layer: adds nothing to the residual stream."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(hidden_states)


class SSALlamaPreTrainedModel(SSAModelMixin, LlamaPreTrainedModel):
    config_class = SSALlamaConfig
    config: SSALlamaConfig
    base_model_prefix = "model"
    _supports_flash_attn = False  # flash kernels run softmax only; sdpa/flex are allowed for softmax models
    _can_record_outputs = {"hidden_states": LlamaDecoderLayer, "attentions": LlamaAttention}


class SSALlamaModel(SSALlamaPreTrainedModel, LlamaModel):
    def __init__(self, config: SSALlamaConfig):
        LlamaModel.__init__(self, config)
        for layer in self.layers:
            attach_scoring(layer.self_attn, config)
            if config.attention_only:
                layer.mlp = NoMLP()
                layer.post_attention_layernorm = nn.Identity()
        self.post_init()


class SSALlamaForCausalLM(SSALlamaPreTrainedModel, LlamaForCausalLM, GenerationMixin):  # generation as a direct base, as transformers expects
    def __init__(self, config: SSALlamaConfig):
        PreTrainedModel.__init__(self, config)
        self.model = SSALlamaModel(config)
        self.vocab_size = config.vocab_size
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()


class SSALlamaForSequenceClassification(SSALlamaPreTrainedModel, LlamaForSequenceClassification):
    def __init__(self, config: SSALlamaConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.model = SSALlamaModel(config)
        self.score = nn.Linear(config.hidden_size, self.num_labels, bias=False)
        self.post_init()


class SSALlamaForQuestionAnswering(SSALlamaPreTrainedModel, LlamaForQuestionAnswering):
    def __init__(self, config: SSALlamaConfig):
        PreTrainedModel.__init__(self, config)
        self.model = SSALlamaModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()


class SSALlamaForTokenClassification(SSALlamaPreTrainedModel, LlamaForTokenClassification):
    def __init__(self, config: SSALlamaConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.model = SSALlamaModel(config)
        dropout = getattr(config, "classifier_dropout", None)
        self.dropout = nn.Dropout(0.1 if dropout is None else dropout)
        self.score = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


__all__ = [
    "SSALlamaPreTrainedModel",
    "SSALlamaModel",
    "SSALlamaForCausalLM",
    "SSALlamaForSequenceClassification",
    "SSALlamaForQuestionAnswering",
    "SSALlamaForTokenClassification",
]
