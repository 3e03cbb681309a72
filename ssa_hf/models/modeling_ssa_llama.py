"""SSALlama: transformers' Llama decoder with a selectable attention scoring function (SSA by default).

The layers and heads are Llama's own (with their forward signatures); each attention module carries its scoring parameters (`self_attn.scoring`) and the
attention call goes through transformers' AttentionInterface to an ssa-hf implementation (`ssa_auto` by default).
Part of the remote-code unit: imports only torch, transformers and siblings, so a saved checkpoint loads with
`trust_remote_code=True` where ssa-hf is not installed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
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
    LlamaRotaryEmbedding,
)

from .configuration_ssa_llama import SSALlamaConfig
from .modeling_common import SSAModelMixin, attach_scoring


class NoMLP(nn.Module):
    """Stands in for the MLP of an attention-only layer: adds nothing to the residual stream."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(hidden_states)


class SquaredReLUMLP(nn.Module):
    """Nemotron's feed-forward block (`mlp_type="relu2"`): two matrices with a squared ReLU between them,
    down(relu(up(x))^2)."""

    def __init__(self, config: SSALlamaConfig):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.square(F.relu(self.up_proj(hidden_states))))


class ZeroCentredLayerNorm(nn.LayerNorm):
    """LayerNorm whose stored weight is gamma - 1 (`norm_type="layernorm1p"`, Nemotron's "LayerNorm1P"): the
    output is normalised(x) * (1 + weight) + bias. Weight and bias start at 0, so weight decay pulls the gain
    towards 1. (transformers' generic initialisation would set the weight to 1, a gain of 2:
    `SSALlamaPreTrainedModel._init_weights` zeroes it instead.)"""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(hidden_states, self.normalized_shape, self.weight + 1, self.bias, self.eps)


class PartialRotaryEmbedding(LlamaRotaryEmbedding):
    """RoPE on a fraction of each head's dimensions (`partial_rotary_factor` < 1). Llama's rotate-half layout
    pairs dimension i with i + head_dim / 2; the first head_dim * factor / 2 pairs get the frequencies RoPE gives
    a head of head_dim * factor dimensions, the other pairs frequency 0 (cos 1, sin 0: no rotation, no
    position). Llama's attention code then applies it unchanged."""

    @staticmethod
    def compute_default_rope_parameters(config: SSALlamaConfig, **kwargs) -> tuple[torch.Tensor, float]:
        base = config.rope_parameters["rope_theta"]
        rotated = round(config.head_dim * config.rotary_fraction())
        inv_freq = 1.0 / (base ** (torch.arange(0, rotated, 2, dtype=torch.float) / rotated))
        still = torch.zeros(config.head_dim // 2 - rotated // 2, dtype=torch.float)
        return torch.cat([inv_freq, still]), 1.0


class SSALlamaPreTrainedModel(SSAModelMixin, LlamaPreTrainedModel):
    config_class = SSALlamaConfig
    config: SSALlamaConfig
    base_model_prefix = "model"
    _supports_flash_attn = False  # flash kernels run softmax only; sdpa/flex are allowed for softmax models
    _can_record_outputs = {"hidden_states": LlamaDecoderLayer, "attentions": LlamaAttention}

    def _init_weights(self, module):
        if isinstance(module, ZeroCentredLayerNorm):
            from transformers import initialization as init

            init.zeros_(module.weight)  # gamma - 1 = 0: a gain of 1
            init.zeros_(module.bias)
            return
        super()._init_weights(module)


def _norm(config: SSALlamaConfig, existing: nn.Module) -> nn.Module:
    if config.norm_type == "layernorm1p":
        return ZeroCentredLayerNorm(config.hidden_size, eps=config.rms_norm_eps)
    return existing


class SSALlamaModel(SSALlamaPreTrainedModel, LlamaModel):
    def __init__(self, config: SSALlamaConfig):
        LlamaModel.__init__(self, config)
        for layer in self.layers:
            attach_scoring(layer.self_attn, config)
            if config.mlp_type == "relu2":
                layer.mlp = SquaredReLUMLP(config)
            layer.input_layernorm = _norm(config, layer.input_layernorm)
            layer.post_attention_layernorm = _norm(config, layer.post_attention_layernorm)
            if config.attention_only:
                layer.mlp = NoMLP()
                layer.post_attention_layernorm = nn.Identity()
        self.norm = _norm(config, self.norm)
        if config.rotary_fraction() < 1:
            self.rotary_emb = PartialRotaryEmbedding(config)
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
