"""Registration of the ssa-hf model classes with transformers' Auto classes (done by `import ssa_hf`).

`register_for_auto_class` makes `save_pretrained` write `auto_map` into config.json and copy the modeling files
(with their sibling imports) next to the weights, so checkpoints load with `trust_remote_code=True` alone.
"""

from __future__ import annotations

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration_ssa_bert import SSABertConfig
from .configuration_ssa_llama import SSALlamaConfig
from .modeling_ssa_bert import (
    SSABertForCausalLM,
    SSABertForMaskedLM,
    SSABertForMultipleChoice,
    SSABertForQuestionAnswering,
    SSABertForSequenceClassification,
    SSABertForTokenClassification,
    SSABertModel,
)
from .modeling_ssa_llama import (
    SSALlamaForCausalLM,
    SSALlamaForQuestionAnswering,
    SSALlamaForSequenceClassification,
    SSALlamaForTokenClassification,
    SSALlamaModel,
)

AUTO_CLASSES = {
    SSALlamaConfig: {
        AutoModel: SSALlamaModel,
        AutoModelForCausalLM: SSALlamaForCausalLM,
        AutoModelForSequenceClassification: SSALlamaForSequenceClassification,
        AutoModelForQuestionAnswering: SSALlamaForQuestionAnswering,
        AutoModelForTokenClassification: SSALlamaForTokenClassification,
    },
    SSABertConfig: {
        AutoModel: SSABertModel,
        AutoModelForMaskedLM: SSABertForMaskedLM,
        AutoModelForCausalLM: SSABertForCausalLM,
        AutoModelForSequenceClassification: SSABertForSequenceClassification,
        AutoModelForTokenClassification: SSABertForTokenClassification,
        AutoModelForMultipleChoice: SSABertForMultipleChoice,
        AutoModelForQuestionAnswering: SSABertForQuestionAnswering,
    },
}


def register_auto_classes() -> None:
    for config_class, models in AUTO_CLASSES.items():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class()
        for auto_class, model_class in models.items():
            auto_class.register(config_class, model_class, exist_ok=True)
            model_class.register_for_auto_class(auto_class.__name__)
