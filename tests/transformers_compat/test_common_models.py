"""transformers' own common-model tests (ModelTesterMixin, GenerationTesterMixin, the causal-LM tester, ...) run
against SSALlama and SSABert, with attention_scoring "ssa" and "softmax".

Thin adapter: the upstream test classes are subclassed and their model testers pointed at our classes; no test body
is copied. Tests that cannot pass by design are skipped (DELIBERATE) and failures owned by another issue are
expected (ELSEWHERE), each with its reason (docs/dev/transformers_compat.md explains them). Run: `pytest -m transformers_common tests/transformers_compat` (see docs/dev/transformers_compat.md).
"""

from __future__ import annotations

import functools
import types

import pytest

from . import upstream

pytestmark = pytest.mark.transformers_common

if upstream.missing_reason():
    pytest.skip(upstream.missing_reason(), allow_module_level=True)
if upstream.version_mismatch():
    # not a skip: the tests were asked for, and they run with the right release installed
    pytest.fail(upstream.version_mismatch(), pytrace=False)

import ssa_hf  # noqa: E402
from ssa_hf.models.registration import AUTO_CLASSES  # noqa: E402

llama_tests = upstream.module("models.llama.test_modeling_llama")
roberta_tests = upstream.module("models.roberta.test_modeling_roberta")
common = upstream.module("test_modeling_common")
configuration_tests = upstream.module("test_configuration_common")

SCORINGS = ("ssa", "softmax")

# Tests that cannot pass by design, {test name: reason} (docs/dev/transformers_compat.md explains each); skipped.
DELIBERATE: dict[str, str] = {
    "test_can_set_attention_dynamically": "config._attn_implementation names the ssa-hf implementation that runs "
    "('ssa_eager' for 'eager', 'ssa_auto' for 'sdpa'), not the standard name the test expects",
    "test_sdpa_can_dispatch_non_composite_models": "config._attn_implementation is 'ssa_auto'/'ssa_eager' for a "
    "request of 'sdpa'/'eager' (the test asserts the standard names)",
}
# Upstream tests that fail for the stock class too, {test name: reason} (skipped; RoBERTa only).
UPSTREAM_FLAKY_ROBERTA: dict[str, str] = {
    "test_inputs_embeds_matches_input_ids": "fails for RobertaModelTest itself in about half the runs: the git-era "
    "RoBERTa test does not pass position_ids that the 5.24 mixin expects (see the folder's SOURCE.md)",
}
# Failures owned by another issue, {test name: reason}: expected to fail until that work lands (xfail, not
# strict). Empty: the fused kernel's custom op made the compiled decoding step pass.
ELSEWHERE: dict[str, str] = {}

# transformers' name tables that ModelTesterMixin reads to decide which class is a base model and which heads take
# labels; our classes are registered with the Auto classes but not in these static tables
_NAME_TABLES = {
    "AutoModel": "MODEL_MAPPING_NAMES",
    "AutoModelForCausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "AutoModelForMaskedLM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "AutoModelForSequenceClassification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForTokenClassification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "AutoModelForQuestionAnswering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "AutoModelForMultipleChoice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
}


@pytest.fixture(autouse=True, scope="module")
def _our_classes_in_transformers_name_tables():
    added = []
    for config_class, models in AUTO_CLASSES.items():
        for auto_class, model_class in models.items():
            table = getattr(common, _NAME_TABLES[auto_class.__name__])
            if config_class.model_type not in table:
                table[config_class.model_type] = model_class.__name__
                added.append((table, config_class.model_type))
    yield
    for table, key in added:
        del table[key]


def _marked(base: type, name: str, mark) -> types.FunctionType:
    original = getattr(base, name)

    @functools.wraps(original)
    def test(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    return mark(test)


def _with_exclusions(base: type, namespace: dict, upstream_flaky: dict | None = None) -> dict:
    for name, reason in (upstream_flaky or {}).items():
        namespace[name] = _marked(base, name, pytest.mark.skip(reason=f"upstream: {reason}"))
    for name, reason in DELIBERATE.items():
        if hasattr(base, name):
            namespace[name] = _marked(base, name, pytest.mark.skip(reason=f"deliberate difference: {reason}"))
    for name, reason in ELSEWHERE.items():
        if hasattr(base, name):
            namespace[name] = _marked(base, name, pytest.mark.xfail(reason=reason, strict=False))
    return namespace


def _rebind(function: types.FunctionType, replacements: dict) -> types.FunctionType:
    """The same upstream function, reading `replacements` in place of its module's globals (RobertaModel -> ...)."""
    rebound = types.FunctionType(
        function.__code__, {**function.__globals__, **replacements}, function.__name__, function.__defaults__,
        function.__closure__,
    )
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__dict__.update(function.__dict__)
    return rebound


def _pointed_at(cls: type, replacements: dict, name: str, extra: dict) -> type:
    """A subclass of the upstream `cls` whose own methods read `replacements` in place of the upstream names."""
    namespace = {
        attr: _rebind(value, replacements)
        for attr, value in vars(cls).items()
        if isinstance(value, types.FunctionType) and value.__globals__ is vars(roberta_tests)
    }
    return type(name, (cls,), {**namespace, **extra})


# ---- SSALlama: the causal-LM tester reads its classes from attributes ------------------------------------------


def _llama_case(scoring: str) -> type:
    tester = type(f"SSALlama{scoring.title()}Tester", (llama_tests.LlamaModelTester,), {
        "base_model_class": ssa_hf.SSALlamaModel,
        "config_class": ssa_hf.SSALlamaConfig,
        "causal_lm_class": ssa_hf.SSALlamaForCausalLM,
        "sequence_classification_class": ssa_hf.SSALlamaForSequenceClassification,
        "question_answering_class": ssa_hf.SSALlamaForQuestionAnswering,
        "token_classification_class": ssa_hf.SSALlamaForTokenClassification,
        "attention_scoring": scoring,  # a config argument: get_config passes tester attributes named like them
    })
    return type(f"TestSSALlama{scoring.title()}Common", (llama_tests.LlamaModelTest,), _with_exclusions(llama_tests.LlamaModelTest, {
        "model_tester_class": tester,
        "pipeline_model_mapping": {},  # pipeline tests need Hub checkpoints (tiny_model_summary.json)
        "_torch_compile_train_cls": ssa_hf.SSALlamaForCausalLM,
    }))


# ---- SSABert: the RoBERTa tester names RobertaConfig / RobertaModel / heads in its method bodies -------------

_BERT_CLASSES = {
    "RobertaConfig": ssa_hf.SSABertConfig,
    "RobertaModel": ssa_hf.SSABertModel,
    "RobertaForCausalLM": ssa_hf.SSABertForCausalLM,
    "RobertaForMaskedLM": ssa_hf.SSABertForMaskedLM,
    "RobertaForSequenceClassification": ssa_hf.SSABertForSequenceClassification,
    "RobertaForTokenClassification": ssa_hf.SSABertForTokenClassification,
    "RobertaForMultipleChoice": ssa_hf.SSABertForMultipleChoice,
    "RobertaForQuestionAnswering": ssa_hf.SSABertForQuestionAnswering,
}


def _bert_case(scoring: str) -> type:
    base_tester = _pointed_at(roberta_tests.RobertaModelTester, _BERT_CLASSES, "SSABertBaseTester", {})

    def get_config(self):
        config = base_tester.get_config(self)
        config.attention_scoring = scoring
        return config

    tester = type(f"SSABert{scoring.title()}Tester", (base_tester,), {"get_config": get_config})

    def set_up(self):
        self.model_tester = tester(self)
        self.config_tester = configuration_tests.ConfigTester(self, config_class=ssa_hf.SSABertConfig, hidden_size=32)

    return _pointed_at(roberta_tests.RobertaModelTest, _BERT_CLASSES, f"TestSSABert{scoring.title()}Common", _with_exclusions(roberta_tests.RobertaModelTest, {
        "setUp": set_up,
        "all_model_classes": tuple(_BERT_CLASSES[c.__name__] for c in roberta_tests.RobertaModelTest.all_model_classes),
        "pipeline_model_mapping": {},
    }, UPSTREAM_FLAKY_ROBERTA))


for _scoring in SCORINGS:
    for _case in (_llama_case(_scoring), _bert_case(_scoring)):
        globals()[_case.__name__] = _case
del _scoring, _case
