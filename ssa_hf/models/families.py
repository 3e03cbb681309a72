"""The model families of ssa-hf, in one table: what presets, the Auto registration, model cards, conversion,
pretraining and the lm-eval adapter need to know about each family.

A family is a transformers architecture whose attention modules carry ssa-hf scoring parameters: a config class
(`configuration_ssa_<name>.py`) and model classes per task (`modeling_ssa_<name>.py`). Adding one means writing
those two files, adding its `FamilySpec` to `FAMILY_SPECS` below and a preset in `configs/models/`; everything
else reads this table (docs/dev/architecture.md, "Model families").

Not part of the remote-code unit: no configuration or modeling file imports this module, so it is never copied
into a checkpoint folder (it imports them, not the other way round).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from . import modeling_ssa_bert as bert
from . import modeling_ssa_gpt2 as gpt2
from . import modeling_ssa_llama as llama
from .configuration_ssa_bert import SSABertConfig
from .configuration_ssa_gpt2 import SSAGPT2Config
from .configuration_ssa_llama import SSALlamaConfig


@dataclass(frozen=True)
class TaskSpec:
    """A model head: the Auto class that loads it and the Hub pipeline tag of a model card."""

    name: str
    auto_class: type
    pipeline_tag: str
    suffix: str  # how transformers names the head's class (LlamaForCausalLM); GPT-2 names its causal LM otherwise


TASKS: dict[str, TaskSpec] = {task.name: task for task in (
    TaskSpec("causal_lm", AutoModelForCausalLM, "text-generation", "ForCausalLM"),
    TaskSpec("masked_lm", AutoModelForMaskedLM, "fill-mask", "ForMaskedLM"),
    TaskSpec("base", AutoModel, "feature-extraction", "Model"),
    TaskSpec("sequence_classification", AutoModelForSequenceClassification, "text-classification",
             "ForSequenceClassification"),
    TaskSpec("token_classification", AutoModelForTokenClassification, "token-classification", "ForTokenClassification"),
    TaskSpec("question_answering", AutoModelForQuestionAnswering, "question-answering", "ForQuestionAnswering"),
    TaskSpec("multiple_choice", AutoModelForMultipleChoice, "multiple-choice", "ForMultipleChoice"),
)}


def _intermediate_size(config) -> int:
    return config.intermediate_size


def _no_rows(config) -> list[list[Any]]:
    return []


@dataclass(frozen=True)
class FamilySpec:
    """One model family.

    `name`: the config's model_type (and the `family:` of a preset). `model_classes`: task -> class, every head,
    all registered with the Auto class of their task. `default_task`: the head of a preset's model and of
    pretraining (`ssa-hf pretrain --task causal` takes the families whose default is causal_lm).
    `architecture`: how a model card names it; `card_tags`: Hub tags of its cards besides ssa-hf's own.
    `stock_sources`: the checkpoints `ssa-hf convert` turns into this family, model_type -> {architecture: task}
    (the weights must load by name; a source whose weights or config need mapping has an adapter in
    ssa_hf/hub/convert.py). `positions_after_pad`: positions are numbered from pad_token_id + 1 (RoBERTa), so the
    pad token must not appear inside a sequence. `feed_forward_size(config)` and `card_rows(config)` feed the
    architecture table of cards and `ssa-hf params`.
    """

    name: str
    config_class: type
    model_classes: Mapping[str, type]
    default_task: str
    architecture: str
    card_tags: tuple[str, ...]
    stock_sources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    positions_after_pad: bool = False
    feed_forward_size: Callable[[Any], int] = _intermediate_size
    card_rows: Callable[[Any], list[list[Any]]] = _no_rows

    def __post_init__(self):
        if self.config_class.model_type != self.name:
            raise ValueError(f"family {self.name!r}: its config's model_type is {self.config_class.model_type!r}")
        unknown = (set(self.model_classes) | {self.default_task}) - set(TASKS)
        if unknown or self.default_task not in self.model_classes:
            raise ValueError(f"family {self.name!r}: tasks {sorted(unknown)} unknown or default task missing")

    def model_class(self, task: str | None = None) -> type:
        task = task or self.default_task
        if task not in self.model_classes:
            raise ValueError(f"task {task!r} is not available for {self.name}; choose from {list(self.model_classes)}")
        return self.model_classes[task]

    @property
    def convertible_tasks(self) -> set[str]:
        """Heads `ssa-hf convert` handles for this family: those of its stock sources."""
        return {task for architectures in self.stock_sources.values() for task in architectures.values()}

    def sources(self) -> dict[str, dict[str, str]]:
        """Every model_type `ssa-hf convert` accepts for this family (its own, to change the scoring function,
        and the stock ones), with the architectures of each and their task."""
        own = {cls.__name__: task for task, cls in self.model_classes.items() if task in self.convertible_tasks}
        return {**{k: dict(v) for k, v in self.stock_sources.items()}, self.name: own}


def _attention_only_row(config) -> list[list[Any]]:
    return [["attention only (no MLP)", bool(config.attention_only)]]


def _gpt2_feed_forward(config) -> int:
    return config.n_inner if config.n_inner is not None else 4 * config.hidden_size


FAMILY_SPECS: tuple[FamilySpec, ...] = (
    FamilySpec(
        name="ssa_llama",
        config_class=SSALlamaConfig,
        model_classes={
            "causal_lm": llama.SSALlamaForCausalLM,
            "base": llama.SSALlamaModel,
            "sequence_classification": llama.SSALlamaForSequenceClassification,
            "question_answering": llama.SSALlamaForQuestionAnswering,
            "token_classification": llama.SSALlamaForTokenClassification,
        },
        default_task="causal_lm",
        architecture="Llama-architecture decoder",
        card_tags=("llama",),
        stock_sources={"llama": {"LlamaForCausalLM": "causal_lm", "LlamaModel": "base",
                                 "LlamaForSequenceClassification": "sequence_classification"}},
        card_rows=_attention_only_row,
    ),
    FamilySpec(
        name="ssa_bert",
        config_class=SSABertConfig,
        model_classes={
            "masked_lm": bert.SSABertForMaskedLM,
            "base": bert.SSABertModel,
            "sequence_classification": bert.SSABertForSequenceClassification,
            "causal_lm": bert.SSABertForCausalLM,
            "token_classification": bert.SSABertForTokenClassification,
            "multiple_choice": bert.SSABertForMultipleChoice,
            "question_answering": bert.SSABertForQuestionAnswering,
        },
        default_task="masked_lm",
        architecture="RoBERTa-architecture encoder",
        card_tags=("roberta",),
        stock_sources={
            "roberta": {"RobertaForMaskedLM": "masked_lm", "RobertaModel": "base",
                        "RobertaForSequenceClassification": "sequence_classification"},
            "bert": {"BertForMaskedLM": "masked_lm", "BertModel": "base"},
        },
        positions_after_pad=True,
    ),
    FamilySpec(
        name="ssa_gpt2",
        config_class=SSAGPT2Config,
        model_classes={
            "causal_lm": gpt2.SSAGPT2LMHeadModel,
            "base": gpt2.SSAGPT2Model,
            "sequence_classification": gpt2.SSAGPT2ForSequenceClassification,
            "token_classification": gpt2.SSAGPT2ForTokenClassification,
            "question_answering": gpt2.SSAGPT2ForQuestionAnswering,
        },
        default_task="causal_lm",
        architecture="GPT-2-architecture decoder",
        card_tags=("gpt2",),
        stock_sources={"gpt2": {"GPT2LMHeadModel": "causal_lm", "GPT2Model": "base",
                                "GPT2ForSequenceClassification": "sequence_classification"}},
        feed_forward_size=_gpt2_feed_forward,
    ),
)

FAMILIES: dict[str, FamilySpec] = {spec.name: spec for spec in FAMILY_SPECS}


def family_of_config(config) -> FamilySpec | None:
    """The family of an ssa-hf config object (None for any other config, e.g. one loaded as remote code)."""
    for spec in FAMILY_SPECS:
        if isinstance(config, spec.config_class):
            return spec
    return None


def families_with_default_task(task: str) -> list[str]:
    return [spec.name for spec in FAMILY_SPECS if spec.default_task == task]


def source_families() -> dict[str, tuple[FamilySpec, dict[str, str]]]:
    """model_type -> (the family it converts to, {architecture: task}) for every checkpoint `ssa-hf convert` reads."""
    return {model_type: (spec, architectures) for spec in FAMILY_SPECS
            for model_type, architectures in spec.sources().items()}


def task_of_architecture(architecture: str) -> str:
    """The task of a model class name: ssa-hf's classes and the stock ones of the table by name, any other by
    transformers' naming (`...ForCausalLM`, `...Model`)."""
    for spec in FAMILY_SPECS:
        for task, cls in spec.model_classes.items():
            if cls.__name__ == architecture:
                return task
        for architectures in spec.stock_sources.values():
            if architecture in architectures:
                return architectures[architecture]
    for task in TASKS.values():
        if architecture.endswith(task.suffix) and task.suffix != "Model":
            return task.name
    if architecture.endswith("Model"):
        return "base"
    raise ValueError(f"architecture {architecture!r}: supported heads are "
                     f"{', '.join('*' + t.suffix for t in TASKS.values())}")


def public_classes() -> dict[str, type]:
    """Every config and model class of the table by name (what `ssa_hf.<Name>` finds)."""
    classes = {}
    for spec in FAMILY_SPECS:
        classes[spec.config_class.__name__] = spec.config_class
        classes.update({cls.__name__: cls for cls in spec.model_classes.values()})
    return classes


__all__ = ["FAMILIES", "FAMILY_SPECS", "FamilySpec", "TASKS", "TaskSpec", "families_with_default_task",
           "family_of_config", "public_classes", "source_families", "task_of_architecture"]
