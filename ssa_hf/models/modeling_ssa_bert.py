"""SSABert: transformers' RoBERTa encoder (as BabyBERTa) with a selectable attention scoring function.

Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

from transformers import PreTrainedModel
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaForMaskedLM,
    RobertaForSequenceClassification,
    RobertaLMHead,
    RobertaModel,
    RobertaPreTrainedModel,
)

from .configuration_ssa_bert import SSABertConfig
from .modeling_common import SSAModelMixin, attach_scoring


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
        self.post_init()

    def forward(self, *args, **kwargs):
        self.assert_scoring_runs()
        return super().forward(*args, **kwargs)


class SSABertForMaskedLM(SSABertPreTrainedModel, RobertaForMaskedLM):
    def __init__(self, config: SSABertConfig):
        PreTrainedModel.__init__(self, config)
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


__all__ = ["SSABertPreTrainedModel", "SSABertModel", "SSABertForMaskedLM", "SSABertForSequenceClassification"]
