"""ssa-hf: Scaled Signed Averaging (SSA) attention for the Hugging Face ecosystem.

Importing the package registers its attention implementations (`ssa_auto`, `ssa_eager`, `ssa_flex`,
`ssa_blockwise`, with their mask functions) and its model classes with transformers' Auto classes.
"""

from .models import (
    ALL_SCORING_FUNCTIONS,
    LINEAR_ATTENTIONS,
    BACKENDS,
    SCORING_FUNCTIONS,
    ScoringOptions,
    ScoringParameters,
    get_scoring_function,
    scored_attention,
    ssa_attention,
    supported_backends,
)
from .models.configuration_ssa_bert import SSABertConfig
from .models.configuration_ssa_llama import SSALlamaConfig
from .models.modeling_ssa_bert import (
    SSABertForCausalLM,
    SSABertForMaskedLM,
    SSABertForMultipleChoice,
    SSABertForQuestionAnswering,
    SSABertForSequenceClassification,
    SSABertForTokenClassification,
    SSABertModel,
)
from .models.modeling_ssa_llama import (
    SSALlamaForCausalLM,
    SSALlamaForQuestionAnswering,
    SSALlamaForSequenceClassification,
    SSALlamaForTokenClassification,
    SSALlamaModel,
)
from .models.registration import register_auto_classes

register_auto_classes()

__version__ = "0.1.0"

__all__ = [
    "ALL_SCORING_FUNCTIONS",
    "LINEAR_ATTENTIONS",
    "BACKENDS",
    "SCORING_FUNCTIONS",
    "SSABertConfig",
    "SSABertForCausalLM",
    "SSABertForMaskedLM",
    "SSABertForMultipleChoice",
    "SSABertForQuestionAnswering",
    "SSABertForSequenceClassification",
    "SSABertForTokenClassification",
    "SSABertModel",
    "SSALlamaConfig",
    "SSALlamaForCausalLM",
    "SSALlamaForQuestionAnswering",
    "SSALlamaForSequenceClassification",
    "SSALlamaForTokenClassification",
    "SSALlamaModel",
    "ScoringOptions",
    "ScoringParameters",
    "get_scoring_function",
    "scored_attention",
    "ssa_attention",
    "supported_backends",
]
