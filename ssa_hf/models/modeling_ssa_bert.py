"""SSABert: transformers' RoBERTa encoder (as BabyBERTa) with a selectable attention scoring function.

The layers and heads are RoBERTa's own (with their forward signatures); every attention module, cross-attention
included (`is_decoder=True, add_cross_attention=True`), carries its scoring parameters (`...attention.self.scoring`).
Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

import logging

from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaForCausalLM,
    RobertaForMaskedLM,
    RobertaForMultipleChoice,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaLMHead,
    RobertaModel,
    RobertaPreTrainedModel,
)

from .configuration_ssa_bert import SSABertConfig
from .modeling_common import SSAModelMixin, attach_scoring

logger = logging.getLogger("ssa_hf")


class SSABertPreTrainedModel(SSAModelMixin, RobertaPreTrainedModel):
    config_class = SSABertConfig
    config: SSABertConfig
    base_model_prefix = "roberta"
    _supports_flash_attn = False


class SSABertModel(SSABertPreTrainedModel, RobertaModel):
    def __init__(self, config: SSABertConfig, add_pooling_layer: bool = True):
        RobertaModel.__init__(self, config, add_pooling_layer=add_pooling_layer)
        for layer in self.encoder.layer:
            attach_scoring(layer.attention.self, config)
            if hasattr(layer, "crossattention"):
                attach_scoring(layer.crossattention.self, config)
        self.post_init()


class SSABertForMaskedLM(SSABertPreTrainedModel, RobertaForMaskedLM):
    def __init__(self, config: SSABertConfig):
        PreTrainedModel.__init__(self, config)
        self.roberta = SSABertModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()


class SSABertForCausalLM(SSABertPreTrainedModel, RobertaForCausalLM, GenerationMixin):
    """Meant for `is_decoder=True` (causal self-attention); with `add_cross_attention=True` it is the decoder of an
    encoder-decoder model (e.g. `EncoderDecoderModel`)."""

    def __init__(self, config: SSABertConfig):
        PreTrainedModel.__init__(self, config)
        if not config.is_decoder:  # as RobertaForCausalLM: a warning, the model still works bidirectionally
            logger.warning("SSABertForCausalLM without is_decoder=True attends in both directions; set is_decoder=True")
        self.roberta = SSABertModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()


class SSABertForSequenceClassification(SSABertPreTrainedModel, RobertaForSequenceClassification):
    def __init__(self, config: SSABertConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = SSABertModel(config, add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)
        self.post_init()


def _classifier_dropout(config: SSABertConfig) -> nn.Dropout:
    return nn.Dropout(config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout)


class SSABertForTokenClassification(SSABertPreTrainedModel, RobertaForTokenClassification):
    def __init__(self, config: SSABertConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = SSABertModel(config, add_pooling_layer=False)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class SSABertForMultipleChoice(SSABertPreTrainedModel, RobertaForMultipleChoice):
    def __init__(self, config: SSABertConfig):
        PreTrainedModel.__init__(self, config)
        self.roberta = SSABertModel(config)  # the pooled output scores each choice
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()


class SSABertForQuestionAnswering(SSABertPreTrainedModel, RobertaForQuestionAnswering):
    def __init__(self, config: SSABertConfig):
        PreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = SSABertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


__all__ = [
    "SSABertPreTrainedModel",
    "SSABertModel",
    "SSABertForMaskedLM",
    "SSABertForCausalLM",
    "SSABertForSequenceClassification",
    "SSABertForTokenClassification",
    "SSABertForMultipleChoice",
    "SSABertForQuestionAnswering",
]
