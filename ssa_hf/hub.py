"""Checkpoint folders, model cards, pushing to the Hugging Face Hub, and converting softmax checkpoints to SSA.

- `render_model_card(model | folder | config, training=..., evaluation=..., base_preset=...)` fills the template
  in `model_cards/` and returns a `huggingface_hub.ModelCard` whose metadata has been checked locally
  (`validate_model_card`); `write_model_card(folder, ...)` writes it as the folder's README.md.
- `save_checkpoint_folder(model, folder, tokenizer=...)` writes model (safetensors + remote code), tokenizer and
  card into a temporary sibling folder and renames it into place: readers never see half a checkpoint.
- `push_to_hub(folder, repo_id)` checks the folder, renders the card if needed and uploads through
  `huggingface_hub.HfApi` (token from `hf auth login` or HF_TOKEN; never printed).
- `convert_checkpoint(src, dst, attention_scoring="ssa")` turns a Llama, RoBERTa or BERT checkpoint folder into
  its ssa-hf twin: the weights are copied, the scoring parameters initialised from the config.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import yaml

from .models.configuration_common import ScoringConfigMixin
from .models.scoring import ScoringModule
from .models.settings import card_fields_by_scoring
from .presets import (
    FAMILIES,
    MODEL_CLASSES,
    check_config_fields,
    checkout_folder,
    config_field_names,
    count_parameters,
)
from .reporting import DestinationExistsError, atomic_folder, atomic_write_bytes, atomic_write_json, markdown_table

logger = logging.getLogger(__name__)

MODEL_CARDS_ENV = "SSA_HF_MODEL_CARDS_DIR"
DEFAULT_TEMPLATE = "ssa_model_card.md"
CARD_INPUTS_FILE = "ssa_hf_card.json"  # what the card was rendered from, so that push can render it again
CONVERSION_FILE = "ssa_conversion.json"
REPO_ID_PLACEHOLDER = "path/to/this/checkpoint"

PIPELINE_TAGS = {
    "causal_lm": "text-generation",
    "masked_lm": "fill-mask",
    "base": "feature-extraction",
    "sequence_classification": "text-classification",
}
AUTO_CLASSES = {
    "causal_lm": "AutoModelForCausalLM",
    "masked_lm": "AutoModelForMaskedLM",
    "base": "AutoModel",
    "sequence_classification": "AutoModelForSequenceClassification",
}
ARCHITECTURE_NAMES = {"ssa_llama": "Llama-architecture decoder", "ssa_bert": "RoBERTa-architecture encoder"}
SCORING_FIELDS = {f for f in ScoringConfigMixin.__dataclass_fields__}
SCORING_FIELDS_SHOWN = card_fields_by_scoring()  # derived from the scoring functions' declared parameters

BIBTEX = """@inproceedings{naim2026ssa,
  title     = {{SSA}: Improving Performance With a Better Scoring Function},
  author    = {Naim, Omar and Bhar, Swarnadeep and Bolte, Jerome and Asher, Nicholas},
  booktitle = {Proceedings of the 64th Annual Meeting of the Association for Computational Linguistics
               (Volume 1: Long Papers)},
  pages     = {30033--30051},
  year      = {2026},
  eprint    = {2508.14685},
  archivePrefix = {arXiv}
}"""

# Files that make a checkpoint's tokenizer (copied by `convert_checkpoint`).
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "chat_template.jinja",
    "chat_template.json",
)
# Never uploaded by `push_to_hub`: training state, intermediate checkpoints, temporary and hidden files.
DEFAULT_IGNORE_PATTERNS = (
    ".*", "*/.*", "**/.*", "*.tmp", "__pycache__/*", "**/__pycache__/*", "checkpoint-*", "checkpoint-*/*",
    "checkpoints/*", "optimizer.pt", "scheduler.pt", "rng_state*.pth", "training_state/*", "*.pyc",
)


# --------------------------------------------------------------------------------------------- paths and io


def model_cards_dir() -> Path:
    """`$SSA_HF_MODEL_CARDS_DIR`, else `model_cards/` beside the `ssa_hf` package in the repository checkout."""
    return checkout_folder("model_cards", MODEL_CARDS_ENV, "pass template=PATH")


def _read_mapping(value: Mapping | str | os.PathLike | None, what: str) -> dict | None:
    """A dict given directly, or read from a JSON/YAML file."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    path = Path(value)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ValueError(f"{what} file {path}: cannot parse it: {error}") from None
    if not isinstance(data, (dict, list)):
        raise ValueError(f"{what} file {path}: expected a mapping or a list at the top level")
    return data


# --------------------------------------------------------------------------------- evaluation and training


@dataclass
class EvaluationResult:
    """One score for the card (and its model-index metadata).

    `task`: the benchmark (e.g. lm-eval's "arc_easy"); `metric`: e.g. "acc_norm"; `value`: the score;
    `dataset`: Hub id of the data set ("allenai/ai2_arc"), `dataset_name`, `dataset_config`, `split`;
    `num_fewshot`: examples in the prompt; `stderr`; `baselines`: e.g. {"chance": 0.25, "majority": 0.27};
    `source`: what produced the figure ("lm-evaluation-harness 0.4.13"); `task_type`: Hub task of the
    model-index entry (defaults to the model's pipeline tag).
    """

    task: str
    metric: str
    value: float
    dataset: str | None = None
    dataset_name: str | None = None
    dataset_config: str | None = None
    split: str | None = None
    num_fewshot: int | None = None
    stderr: float | None = None
    baselines: dict[str, float] = field(default_factory=dict)
    source: str | None = None
    task_type: str | None = None

    def __post_init__(self):
        if not isinstance(self.task, str) or not self.task:
            raise ValueError(f"evaluation result: 'task' must be a non-empty string, got {self.task!r}")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"evaluation result for {self.task!r}: 'metric' must be a non-empty string")
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) or not math.isfinite(self.value):
            raise ValueError(f"evaluation result {self.task}/{self.metric}: 'value' must be a finite number, "
                             f"got {self.value!r}")
        if self.num_fewshot is not None and (not isinstance(self.num_fewshot, int) or self.num_fewshot < 0):
            raise ValueError(f"evaluation result {self.task}/{self.metric}: 'num_fewshot' must be an integer >= 0")
        if not isinstance(self.baselines, dict):
            raise ValueError(f"evaluation result {self.task}/{self.metric}: 'baselines' must be a mapping "
                             f"such as {{'chance': 0.25, 'majority': 0.27}}")
        self.value = float(self.value)


_RESULT_FIELDS = set(EvaluationResult.__dataclass_fields__)


def _from_lm_eval(data: dict) -> list[EvaluationResult]:
    """lm-evaluation-harness's own results JSON: {"results": {task: {"acc,none": .., "acc_stderr,none": ..}},
    "n-shot": {task: k}, "configs": {task: {"dataset_path": ..}}, "lm_eval_version"?: ..}."""
    results = []
    n_shot = data.get("n-shot") or {}
    configs = data.get("configs") or {}
    version = data.get("lm_eval_version")
    source = f"lm-evaluation-harness {version}" if version else "lm-evaluation-harness"
    for task, metrics in data["results"].items():
        if not isinstance(metrics, dict):
            raise ValueError(f"lm-eval results: task {task!r} does not map to a dict of metrics")
        task_config = configs.get(task) or {}
        for key, value in metrics.items():
            name, _, filter_name = key.partition(",")
            if name == "alias" or name.endswith("_stderr") or not isinstance(value, (int, float)):
                continue
            stderr = metrics.get(f"{name}_stderr,{filter_name}" if filter_name else f"{name}_stderr")
            shots = n_shot.get(task, task_config.get("num_fewshot"))
            results.append(EvaluationResult(
                task=task, metric=name, value=value,
                dataset=task_config.get("dataset_path"), dataset_config=task_config.get("dataset_name"),
                split=task_config.get("test_split") or task_config.get("validation_split"),
                num_fewshot=int(shots) if isinstance(shots, (int, float)) else None,
                stderr=float(stderr) if isinstance(stderr, (int, float)) and math.isfinite(stderr) else None,
                source=source,
            ))
    return results


def normalize_evaluation(evaluation) -> list[EvaluationResult]:
    """Evaluation results from: a list of EvaluationResult or of dicts with its fields; a dict {"results": [...]};
    lm-evaluation-harness's results JSON (a dict whose "results" is a mapping task -> metrics); or a path to a
    JSON/YAML file holding any of these."""
    if evaluation is None:
        return []
    if isinstance(evaluation, (str, os.PathLike)):
        evaluation = _read_mapping(evaluation, "evaluation")
    if isinstance(evaluation, Mapping):
        if isinstance(evaluation.get("results"), Mapping):
            return _from_lm_eval(dict(evaluation))
        if isinstance(evaluation.get("results"), list):
            evaluation = evaluation["results"]
        else:
            raise ValueError("evaluation: expected a list of results, {'results': [...]}, or lm-eval's results JSON")
    results = []
    for i, item in enumerate(evaluation):
        if isinstance(item, EvaluationResult):
            results.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ValueError(f"evaluation result #{i}: expected a mapping with task, metric, value; got {item!r}")
        unknown = set(item) - _RESULT_FIELDS
        if unknown:
            raise ValueError(f"evaluation result #{i}: unknown keys {sorted(unknown)}; allowed: {sorted(_RESULT_FIELDS)}")
        missing = {"task", "metric", "value"} - set(item)
        if missing:
            raise ValueError(f"evaluation result #{i}: missing {sorted(missing)}")
        results.append(EvaluationResult(**item))
    return results


def normalize_training(training) -> dict[str, Any]:
    """Training information: a mapping (or a JSON/YAML file) such as {"datasets": ["HuggingFaceFW/fineweb-edu"],
    "steps": 22000, "tokens": ..., "learning_rate": ...}. "datasets" (Hub ids) also goes into the metadata."""
    if training is None:
        return {}
    data = _read_mapping(training, "training")
    if not isinstance(data, dict):
        raise ValueError("training: expected a mapping such as {'datasets': [...], 'steps': 1000}")
    datasets = data.get("datasets")
    if datasets is not None:
        if isinstance(datasets, str):
            data["datasets"] = [datasets]
        elif not (isinstance(datasets, list) and all(isinstance(d, str) and d for d in datasets)):
            raise ValueError("training: 'datasets' must be a list of data set names (Hub ids or local names)")
    return data


# ------------------------------------------------------------------------------------ inspecting checkpoints


def task_of_architecture(architecture: str) -> str:
    for suffix, task in (("ForCausalLM", "causal_lm"), ("ForMaskedLM", "masked_lm"),
                         ("ForSequenceClassification", "sequence_classification")):
        if architecture.endswith(suffix):
            return task
    if architecture.endswith("Model"):
        return "base"
    raise ValueError(f"architecture {architecture!r}: supported heads are *ForCausalLM, *ForMaskedLM, "
                     f"*ForSequenceClassification and the base *Model")


def _family(config) -> str:
    for family, config_class in FAMILIES.items():
        if isinstance(config, config_class):
            return family
    raise ValueError(f"not an ssa-hf config: {type(config).__name__} (model_type "
                     f"{getattr(config, 'model_type', None)!r}); convert the checkpoint with `ssa-hf convert`")


def _task(config, model=None) -> str:
    if model is not None:
        return task_of_architecture(type(model).__name__)
    architectures = getattr(config, "architectures", None) or []
    if architectures:
        return task_of_architecture(architectures[0])
    return {"ssa_llama": "causal_lm", "ssa_bert": "masked_lm"}[_family(config)]


def _read_config_json(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json; expected a checkpoint folder written by save_pretrained")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON: {error}") from None


def load_ssa_config(folder: str | os.PathLike):
    """The SSALlamaConfig / SSABertConfig of a checkpoint folder (no remote code is run)."""
    folder = Path(folder)
    raw = _read_config_json(folder)
    model_type = raw.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(f"{folder}: model_type {model_type!r} is not an ssa-hf model ({list(FAMILIES)}); "
                         f"convert it first with `ssa-hf convert {folder} DST`")
    return FAMILIES[model_type].from_pretrained(folder)


def _weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def read_scoring_parameters(folder: str | os.PathLike, config=None) -> dict[str, dict[str, list[float]]] | None:
    """The scoring parameters stored in a checkpoint folder, as `model.scoring_parameters()` returns them, read
    from the safetensors files without loading the other weights. None when the folder has no safetensors."""
    from safetensors import safe_open

    folder = Path(folder)
    files = _weight_files(folder)
    if not files:
        return None
    config = config if config is not None else load_ssa_config(folder)
    cls = MODEL_CLASSES[_family(config)][_task(config)]
    with torch.device("meta"):
        model = cls(copy.deepcopy(config))
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                if ".scoring." in f".{key}":
                    tensors[key] = handle.get_tensor(key)
    for name, module in model.named_modules():
        if isinstance(module, ScoringModule) and not any(isinstance(m, ScoringModule) for m in _parents(model, name)):
            own = {k[len(name) + 1:]: v for k, v in tensors.items() if k.startswith(name + ".")}
            module.to_empty(device="cpu")
            try:
                module.load_state_dict(own, strict=True)
            except RuntimeError as error:
                raise ValueError(f"{folder}: the scoring parameters of {name} do not match the config: {error}") from None
    return model.scoring_parameters()


def _parents(model, name: str):
    parts = name.split(".")
    return [model.get_submodule(".".join(parts[:i])) for i in range(1, len(parts))]


def _layer_of(module_name: str) -> str:
    match = re.search(r"\.(\d+)\.", f".{module_name}.")
    return match.group(1) if match else module_name


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def scoring_parameter_table(values: dict[str, dict[str, list[float]]]) -> str:
    """Per layer: each scoring parameter's value (one value per layer) or mean and range over heads."""
    names = sorted({p for params in values.values() for p in params})
    rows = []
    for module, params in values.items():
        row = [_layer_of(module)]
        for name in names:
            v = params.get(name)
            if not v:
                row.append("")
            elif max(v) - min(v) <= 1e-12 * max(1.0, abs(max(v))):
                row.append(_fmt(v[0]))
            else:
                row.append(f"{_fmt(sum(v) / len(v))} ({_fmt(min(v))} to {_fmt(max(v))})")
        rows.append(row)
    return markdown_table(["layer"] + [f"{n} (mean over heads, range)" for n in names], rows)


# ---------------------------------------------------------------------------------------------- model cards


def _architecture_table(config, task: str, family: str) -> str:
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    rows = [
        ["model class", MODEL_CLASSES[family][task].__name__],
        ["architecture", ARCHITECTURE_NAMES[family]],
        ["layers", config.num_hidden_layers],
        ["hidden size", config.hidden_size],
        ["feed-forward size", config.intermediate_size],
        ["attention heads", heads],
        ["key-value heads", kv],
        ["head dimension", head_dim],
        ["vocabulary", config.vocab_size],
        ["max positions", config.max_position_embeddings],
        ["tied input/output embeddings", bool(getattr(config, "tie_word_embeddings", False))],
    ]
    if family == "ssa_llama":
        rows.append(["attention only (no MLP)", bool(config.attention_only)])
    rows.append(["parameters", f"{count_parameters(config, task):,}"])
    return markdown_table(["", ""], rows)


def _scoring_settings(config) -> dict[str, Any]:
    names = config.scoring_per_head()
    settings: dict[str, Any] = {"attention_scoring": config.attention_scoring}
    for name in sorted(set(names)):
        for key in SCORING_FIELDS_SHOWN.get(name, []):
            settings[key] = getattr(config, key)
    return settings


def _scoring_table(settings: dict[str, Any]) -> str:
    return markdown_table(["setting", "value"], [[k, v] for k, v in settings.items()])


def _cell(value: Any) -> Any:
    """A markdown table cell: containers as JSON, pipes and newlines escaped."""
    if isinstance(value, (dict, list)):
        value = json.dumps(value, sort_keys=True)
    if isinstance(value, str):
        value = value.replace("|", "\\|").replace("\n", " ")
    return value


def _kv_table(data: Mapping[str, Any]) -> str:
    return markdown_table(["", ""], [[_cell(key), _cell(value)] for key, value in data.items()])


def _evaluation_table(results: Sequence[EvaluationResult]) -> str:
    rows = []
    for r in results:
        baselines = ", ".join(f"{k} {_fmt(v)}" for k, v in sorted(r.baselines.items())) or "not given"
        rows.append([_cell(r.task), _cell(r.dataset or ""), _cell(r.split or ""), _cell(r.metric), _fmt(r.value),
                     _fmt(r.stderr) if r.stderr is not None else "",
                     r.num_fewshot if r.num_fewshot is not None else "not given", _cell(baselines), _cell(r.source or "")])
    return markdown_table(["task", "data set", "split", "metric", "value", "stderr", "num_fewshot", "baselines",
                           "source"], rows)


def _eval_results_metadata(results: Sequence[EvaluationResult], pipeline_tag: str):
    from huggingface_hub import EvalResult

    out = []
    for r in results:
        out.append(EvalResult(
            task_type=r.task_type or pipeline_tag,
            dataset_type=r.dataset or r.task,
            dataset_name=r.dataset_name or r.task,
            dataset_config=r.dataset_config,
            dataset_split=r.split,
            dataset_args={"num_few_shot": r.num_fewshot} if r.num_fewshot is not None else None,
            metric_type=r.metric,
            metric_value=r.value,
            task_name=r.task,
        ))
    return out


def _model_source(source):
    """(config, model or None, folder or None) for a model, a config or a checkpoint folder."""
    from transformers import PretrainedConfig, PreTrainedModel

    if isinstance(source, PreTrainedModel):
        return source.config, source, None
    if isinstance(source, PretrainedConfig):
        return source, None, None
    if isinstance(source, (str, os.PathLike)):
        folder = Path(source)
        if not folder.is_dir():
            raise FileNotFoundError(f"checkpoint folder {str(folder)!r} does not exist")
        return load_ssa_config(folder), None, folder
    raise ValueError(f"render_model_card: expected an ssa-hf model, config or checkpoint folder, got {type(source).__name__}")


def render_model_card(
    source,
    *,
    training=None,
    evaluation=None,
    base_preset: str | None = None,
    base_model: str | list[str] | None = None,
    license: str | None = None,
    language: str | list[str] | None = None,
    model_name: str | None = None,
    repo_id: str | None = None,
    conversion: Mapping[str, Any] | None = None,
    template: str | os.PathLike | None = None,
):
    """A `huggingface_hub.ModelCard` for an ssa-hf model, config or checkpoint folder.

    Metadata: library (transformers), pipeline tag, tags, license, language, base model, training data sets,
    evaluation results (model-index) and an `ssa_hf` block (family, class, preset, scoring settings, parameter
    count, ssa-hf version). Text: architecture, scoring settings, the scoring parameters stored in the checkpoint,
    how to load it with and without ssa-hf, training, evaluation (with num_fewshot and baselines), limitations and
    the paper's citation. The card is checked by `validate_model_card` before it is returned.
    """
    from huggingface_hub import ModelCard, ModelCardData

    from . import __version__

    config, model, folder = _model_source(source)
    family = _family(config)
    task = _task(config, model)
    pipeline_tag = PIPELINE_TAGS[task]
    training_info = normalize_training(training)
    results = normalize_evaluation(evaluation)
    settings = _scoring_settings(config)
    parameters = count_parameters(config, task)

    if model is not None:
        values = model.scoring_parameters()
        where = "the model"
    elif folder is not None:
        values = read_scoring_parameters(folder, config)
        where = "this checkpoint's weights"
    else:
        values = None
        where = ""
    scoring_names = sorted(set(config.scoring_per_head()))
    if model_name is None:
        if repo_id:
            model_name = repo_id.split("/")[-1]
        elif folder is not None:
            model_name = folder.resolve().name
        else:
            model_name = f"{family}-{'-'.join(scoring_names)}"
    scoring_label = scoring_names[0] if len(scoring_names) == 1 else "mixed-scoring"
    tags = ["ssa-hf", "attention", f"{scoring_label}-attention".replace("_", "-"), family.replace("_", "-"),
            "llama" if family == "ssa_llama" else "roberta", "custom_code"]
    if "ssa" in scoring_names:
        tags.insert(1, "scaled-signed-averaging")
    ssa_block = {
        "family": family,
        "model_class": MODEL_CLASSES[family][task].__name__,
        "base_preset": base_preset,
        "scoring": settings,
        "parameters": parameters,
        "version": __version__,
    }
    card_data = ModelCardData(
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        license=license,
        language=language,
        base_model=base_model,
        datasets=training_info.get("datasets"),
        model_name=model_name,
        eval_results=_eval_results_metadata(results, pipeline_tag) or None,
        tags=tags,
        ssa_hf={k: v for k, v in ssa_block.items() if v is not None},
    )

    has_tokenizer = folder is not None and any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    summary_scoring = ("**SSA** (Scaled Signed Averaging)" if scoring_names == ["ssa"]
                       else f"`{config.attention_scoring}`")
    size = f"{parameters / 1e6:.1f}M" if parameters >= 1e6 else f"{parameters / 1e3:.1f}k"
    if scoring_names == ["softmax"]:
        summary = (f"A {size}-parameter {ARCHITECTURE_NAMES[family]} (`{MODEL_CLASSES[family][task].__name__}`) "
                   f"with standard softmax attention (`attention_scoring=\"softmax\"`), as used for the softmax "
                   f"baseline of an SSA comparison: the same class with `attention_scoring=\"ssa\"` is its SSA twin.")
    elif not isinstance(config.attention_scoring, str):
        summary = (f"A {size}-parameter {ARCHITECTURE_NAMES[family]} (`{MODEL_CLASSES[family][task].__name__}`) "
                   f"whose attention heads use one scoring function each: {', '.join(config.attention_scoring)}.")
    else:
        summary = (f"A {size}-parameter {ARCHITECTURE_NAMES[family]} (`{MODEL_CLASSES[family][task].__name__}`) "
                   f"whose attention uses {summary_scoring} in place of softmax.")

    if training_info:
        training_section = _kv_table(training_info)
    else:
        training_section = ("No training information was given when this card was written: the weights may be "
                            "randomly initialised or converted without fine-tuning.")
    if results:
        evaluation_section = (
            "Scores as reported to the card renderer; `num_fewshot` is the number of in-context examples and the "
            "baselines are chance and majority-class rates where known.\n\n" + _evaluation_table(results))
    else:
        evaluation_section = "No evaluation results were given when this card was written."

    limitations = [
        "SSA computes `sgn` and `log1p` for every attention score, so it is slower than softmax on kernels built "
        "for softmax; FlashAttention kernels cannot run it (ssa-hf provides eager, FlexAttention and blockwise "
        "implementations)."
    ]
    if conversion and not config.uses_softmax_only:
        limitations.append(
            f"The weights were trained with another attention scoring function ({conversion.get('source_class', 'the source')}"
            f"). Changing the scoring function changes the output of every layer, so the converted model needs "
            f"fine-tuning before its outputs mean anything.")
    if not results:
        limitations.append("No evaluation is reported here; measure before relying on the model.")

    conversion_table = conversion_note = ""
    if conversion:
        conversion_note = (f"Converted with `ssa-hf convert` from a `{conversion.get('source_class', '?')}` checkpoint: "
                           f"every weight was copied, the scoring parameters were initialised from the config.")
        shown = {k: conversion[k] for k in ("source", "source_class", "target_class", "attention_scoring",
                                            "copied_tensors", "initialised_tensors", "output_check")
                 if k in conversion}
        conversion_table = _kv_table(shown)

    learned_table = scoring_parameter_table(values) if values else ""
    initial = {k: settings[k] for k in ("ssa_b_init", "ssa_n_init") if k in settings}
    learned_note = (f"Values read from {where}" + (f" (initial values: {', '.join(f'{k[4]}={v}' for k, v in initial.items())})"
                                                  if initial else "") + ".")

    template_path = Path(template) if template else model_cards_dir() / DEFAULT_TEMPLATE
    if not template_path.is_file():
        raise FileNotFoundError(f"model card template {template_path} does not exist")
    card = ModelCard.from_template(
        card_data,
        template_path=str(template_path),
        title=model_name,
        summary=summary,
        ssa_hf_version=__version__,
        base_preset=base_preset,
        architecture_name=ARCHITECTURE_NAMES[family],
        architecture_table=_architecture_table(config, task, family),
        scoring_table=_scoring_table(settings),
        learned_table=learned_table,
        learned_note=learned_note,
        model_type=config.model_type,
        auto_class=AUTO_CLASSES[task],
        has_tokenizer=has_tokenizer,
        repo_id=repo_id or REPO_ID_PLACEHOLDER,
        conversion_table=conversion_table,
        conversion_note=conversion_note,
        training_section=training_section,
        evaluation_section=evaluation_section,
        limitations="\n".join(f"- {item}" for item in limitations),
        bibtex=BIBTEX,
    )
    validate_model_card(card, expected_results=results)
    return card


REQUIRED_SECTIONS = ("## Model details", "## How to use", "## Training", "## Evaluation", "## Citation")


def validate_model_card(card, expected_results: Sequence[EvaluationResult] | None = None) -> None:
    """Check a card offline; raise ValueError naming the problem.

    `huggingface_hub.ModelCard.validate()` posts the card to the Hub's validation endpoint (it needs the network,
    and `push_to_hub` calls it before uploading). Offline this checks what can be checked locally: the YAML header
    parses and survives a round trip through `ModelCard`/`ModelCardData`, the metadata fields have the types the
    Hub expects, the model-index converts back to the same evaluation results, and the text has its sections.
    """
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    text = str(card)
    match = re.match(r"^---\n(.*?)\n---\n", text, flags=re.S)
    if not match:
        raise ValueError("model card: no YAML metadata header between '---' lines")
    try:
        header = yaml.safe_load(match.group(1))
    except yaml.YAMLError as error:
        raise ValueError(f"model card: the metadata header is not valid YAML: {error}") from None
    if not isinstance(header, dict):
        raise ValueError("model card: the metadata header is not a mapping")
    try:
        reparsed = ModelCard(text)
    except ValueError as error:
        raise ValueError(f"model card metadata rejected by huggingface_hub: {error}") from None
    if reparsed.data.to_dict() != header:
        raise ValueError("model card: the metadata does not survive a round trip through huggingface_hub.ModelCard")
    for key in ("tags", "datasets", "language", "metrics"):
        value = header.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)
                                      or isinstance(value, str) and key in ("datasets", "language")):
            raise ValueError(f"model card metadata: {key!r} must be a list of non-empty strings, got {value!r}")
    for key in ("library_name", "pipeline_tag", "license", "model_name"):
        if key in header and not isinstance(header[key], str):
            raise ValueError(f"model card metadata: {key!r} must be a string, got {header[key]!r}")
    base = header.get("base_model")
    if base is not None and not (isinstance(base, str) or isinstance(base, list) and all(isinstance(b, str) for b in base)):
        raise ValueError(f"model card metadata: 'base_model' must be a Hub repo id or a list of them, got {base!r}")
    for base_id in [base] if isinstance(base, str) else base or []:
        if not re.fullmatch(r"[\w.\-]+(/[\w.\-]+)?", base_id):
            raise ValueError(f"model card metadata: base_model {base_id!r} is not a Hub repo id (namespace/name)")
    if "model-index" in header:
        try:
            name, parsed = model_index_to_eval_results(header["model-index"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"model card metadata: malformed model-index: {error}") from None
        if expected_results is not None:
            got = sorted((r.task_name, r.metric_type, float(r.metric_value)) for r in parsed)
            want = sorted((r.task, r.metric, r.value) for r in expected_results)
            if got != want:
                raise ValueError(f"model card metadata: model-index holds {got}, expected {want}")
    elif expected_results:
        raise ValueError("model card metadata: evaluation results were given but the card has no model-index")
    missing = [s for s in REQUIRED_SECTIONS if s not in text]
    if missing:
        raise ValueError(f"model card: missing sections {missing} (is the template complete?)")


def write_model_card(folder: str | os.PathLike, *, default_name: str | None = None, **card_kwargs):
    """Render the card of a checkpoint folder and write it (atomically) as README.md, with the inputs it was
    rendered from in ssa_hf_card.json (push_to_hub renders it again from them, e.g. with the repo id).
    `default_name`: the title when neither model_name nor repo_id is given (e.g. the final folder name while
    the card is written into a temporary folder); it is not stored."""
    folder = Path(folder)
    inputs = _card_inputs(card_kwargs)
    if default_name and not card_kwargs.get("model_name") and not card_kwargs.get("repo_id"):
        card_kwargs = {**card_kwargs, "model_name": default_name}
    card = render_model_card(folder, **card_kwargs)
    atomic_write_bytes(folder / "README.md", str(card).encode("utf-8"))
    atomic_write_json(folder / CARD_INPUTS_FILE, inputs)
    return card


def _card_inputs(card_kwargs: Mapping[str, Any]) -> dict:
    inputs = {}
    for key, value in card_kwargs.items():
        if value is None or key == "template":
            continue
        if key == "evaluation":
            value = [asdict(r) for r in normalize_evaluation(value)]
        elif key == "training":
            value = normalize_training(value)
        inputs[key] = value
    return inputs


def save_checkpoint_folder(model, folder: str | os.PathLike, tokenizer=None, *, overwrite: bool = False,
                           card: bool = True, extra_files: Mapping[str, bytes | str] | None = None,
                           **card_kwargs) -> Path:
    """Write a Hub-ready checkpoint folder atomically: the model through `save_pretrained` (safetensors, config,
    the remote-code files), the tokenizer, extra files (name -> content) and the model card (README.md)."""
    _family(model.config)
    destination = Path(folder)
    with atomic_folder(destination, overwrite=overwrite) as tmp:
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        for name, content in (extra_files or {}).items():
            atomic_write_bytes(tmp / name, content.encode("utf-8") if isinstance(content, str) else content)
        if card:
            write_model_card(tmp, default_name=destination.resolve().name, **card_kwargs)
    return destination.resolve()


# ------------------------------------------------------------------------------------------------ converting


SOURCE_FAMILIES = {"llama": "ssa_llama", "roberta": "ssa_bert", "bert": "ssa_bert",
                   "ssa_llama": "ssa_llama", "ssa_bert": "ssa_bert"}
SOURCE_ARCHITECTURES = {
    "llama": {"LlamaForCausalLM", "LlamaModel", "LlamaForSequenceClassification"},
    "roberta": {"RobertaForMaskedLM", "RobertaModel", "RobertaForSequenceClassification"},
    "bert": {"BertForMaskedLM", "BertModel"},
    "ssa_llama": {"SSALlamaForCausalLM", "SSALlamaModel", "SSALlamaForSequenceClassification"},
    "ssa_bert": {"SSABertForMaskedLM", "SSABertModel", "SSABertForSequenceClassification"},
}
# config.json keys that describe the source checkpoint, not the model
_NOT_CARRIED = {"model_type", "architectures", "auto_map", "transformers_version", "_name_or_path", "dtype",
                "torch_dtype"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ConversionError(ValueError):
    """A checkpoint that cannot be converted, or a conversion whose check failed."""


@dataclass
class ConversionResult:
    source: str
    destination: str
    source_class: str
    target_class: str
    attention_scoring: str | list[str]
    scoring_settings: dict[str, Any]
    dtype: str
    copied_tensors: int
    initialised_tensors: list[str]
    dropped_tensors: list[str]
    tokenizer_files: list[str]
    output_check: dict[str, Any]

    def to_dict(self) -> dict:
        return asdict(self)


def _source_dtype(raw: dict) -> str:
    value = raw.get("dtype") or raw.get("torch_dtype")
    return value if value in DTYPES else "float32"


def _bert_to_roberta_fields(source_config, task: str) -> dict:
    if getattr(source_config, "is_decoder", False) or getattr(source_config, "add_cross_attention", False):
        raise ConversionError("BERT checkpoint is configured as a decoder (is_decoder/add_cross_attention); "
                              "only BERT encoders convert to SSABert")
    position_type = getattr(source_config, "position_embedding_type", "absolute")
    if position_type not in (None, "absolute"):
        raise ConversionError(f"BERT position_embedding_type={position_type!r}: only absolute positions map to "
                              f"SSABert (RoBERTa-style)")
    if task == "masked_lm" and source_config.hidden_act != "gelu":
        raise ConversionError(f"BERT hidden_act={source_config.hidden_act!r}: the RoBERTa masked-LM head of SSABert "
                              f"always applies exact GELU, so only hidden_act='gelu' converts exactly")
    pad = source_config.pad_token_id
    if pad is None:
        raise ConversionError("BERT config has no pad_token_id; RoBERTa-style positions are numbered from "
                              "pad_token_id + 1, so set it in the source config.json")
    fields = source_config.to_dict()
    # RoBERTa numbers positions pad+1, pad+2, ... (pad tokens get position pad); BERT numbers them 0, 1, ...
    fields["max_position_embeddings"] = source_config.max_position_embeddings + pad + 1
    return fields


def _map_bert_state_dict(state: dict[str, torch.Tensor], pad: int) -> dict[str, torch.Tensor]:
    renames = (("bert.", "roberta."), ("cls.predictions.transform.dense.", "lm_head.dense."),
               ("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
               ("cls.predictions.decoder.", "lm_head.decoder."), ("cls.predictions.bias", "lm_head.bias"))
    out = {}
    for key, tensor in state.items():
        new = key
        for old_prefix, new_prefix in renames:
            if key.startswith(old_prefix):
                new = new_prefix + key[len(old_prefix):]
                break
        if new.endswith("embeddings.position_embeddings.weight"):
            shifted = tensor.new_zeros(tensor.shape[0] + pad + 1, tensor.shape[1])
            shifted[pad + 1:] = tensor  # BERT's position i is RoBERTa's position pad + 1 + i
            tensor = shifted
        out[new] = tensor
    return out


def _check_inputs(config, family: str, generator: torch.Generator) -> dict[str, torch.Tensor]:
    special = {config.pad_token_id} if family == "ssa_bert" and config.pad_token_id is not None else set()
    allowed = torch.tensor([i for i in range(min(config.vocab_size, 4096)) if i not in special])
    # one sequence: sequence-classification heads without a pad token refuse batches larger than one
    ids = allowed[torch.randint(len(allowed), (1, 16), generator=generator)]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _main_output(output) -> torch.Tensor:
    for name in ("logits", "last_hidden_state"):
        value = getattr(output, name, None)
        if value is not None:
            return value
    raise ConversionError("the model returned neither logits nor last_hidden_state")


def convert_checkpoint(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    attention_scoring: str | list[str] = "ssa",
    *,
    dtype: str = "auto",
    overwrite: bool = False,
    check_outputs: bool = True,
    card: bool = True,
    base_model: str | None = None,
    license: str | None = None,
    **scoring_kwargs,
) -> ConversionResult:
    """Convert a checkpoint folder to its ssa-hf twin with `attention_scoring` (and the ssa_* settings in
    `scoring_kwargs`, e.g. ssa_n_init=2.0, ssa_learn_n=False).

    Sources: LlamaForCausalLM / LlamaModel / LlamaForSequenceClassification -> SSALlama*; RobertaForMaskedLM /
    RobertaModel / RobertaForSequenceClassification -> SSABert*; BertForMaskedLM / BertModel -> SSABert* (position
    embeddings shifted to RoBERTa's numbering, which starts at pad_token_id + 1; exact for unpadded and
    right-padded inputs); ssa-hf checkpoints (changes the scoring function). Every weight is copied; the only
    weights not found in the source are the scoring parameters, initialised from the config. With
    `check_outputs`, both models run on a random batch: a softmax target must reproduce the source's outputs.
    Tokenizer files are copied, a card and ssa_conversion.json written; the folder appears atomically.
    `dtype`: "auto" keeps the source's stored dtype, or "float32" / "bfloat16" / "float16".
    """
    import transformers

    src, dst = Path(src).resolve(), Path(dst).resolve()
    if not src.is_dir():
        raise FileNotFoundError(f"source checkpoint folder {str(src)!r} does not exist")
    if dst == src or src in dst.parents:
        raise ValueError(f"destination {dst} must be outside the source folder {src}")
    if dst.exists() and not overwrite:
        raise DestinationExistsError(f"{dst} already exists; remove it or pass overwrite=True (--overwrite)")
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype must be 'auto' or one of {list(DTYPES)}, got {dtype!r}")
    unknown = sorted(set(scoring_kwargs) - SCORING_FIELDS)
    if unknown:
        raise ValueError(f"convert changes only the attention scoring; {unknown} are not scoring settings "
                         f"(allowed: {sorted(SCORING_FIELDS - {'attention_scoring'})})")

    raw = _read_config_json(src)
    model_type = raw.get("model_type")
    if model_type not in SOURCE_FAMILIES:
        raise ConversionError(f"{src}: model_type {model_type!r} cannot be converted; supported: "
                              f"{sorted(SOURCE_FAMILIES)} (Llama, RoBERTa, BERT and ssa-hf checkpoints)")
    architectures = raw.get("architectures") or []
    if len(architectures) != 1 or architectures[0] not in SOURCE_ARCHITECTURES[model_type]:
        raise ConversionError(f"{src}: architectures {architectures} is not supported for {model_type}; "
                              f"supported: {sorted(SOURCE_ARCHITECTURES[model_type])}")
    architecture = architectures[0]
    task = task_of_architecture(architecture)
    family = SOURCE_FAMILIES[model_type]
    is_ssa_source = model_type in FAMILIES

    if is_ssa_source:
        source_cls = MODEL_CLASSES[family][task]
        source = source_cls.from_pretrained(src, dtype=torch.float32)
    else:
        source_cls = getattr(transformers, architecture)
        source = source_cls.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
    source.eval()

    if model_type == "bert":
        fields = _bert_to_roberta_fields(source.config, task)
    else:
        fields = source.config.to_dict()
    target_config_class = FAMILIES[family]
    known = config_field_names(target_config_class)
    fields = {k: v for k, v in fields.items() if k in known and k not in _NOT_CARRIED}
    if is_ssa_source:
        previous = {k: fields.get(k) for k in SCORING_FIELDS}
    fields.update(scoring_kwargs)
    fields["attention_scoring"] = attention_scoring
    check_config_fields(target_config_class, scoring_kwargs, where="convert")
    try:
        target_config = target_config_class(**fields)
    except (TypeError, ValueError) as error:
        raise ConversionError(f"cannot build {target_config_class.__name__}: {error}") from None
    if is_ssa_source and all(previous[k] == getattr(target_config, k) for k in SCORING_FIELDS):
        raise ConversionError(f"{src} already uses attention_scoring={attention_scoring!r} with these settings; "
                              f"nothing to convert")
    target_cls = MODEL_CLASSES[family][task]
    target = target_cls(target_config)
    target.eval()

    state = source.state_dict()
    dropped = []
    if is_ssa_source:
        dropped = sorted(k for k in state if ".scoring." in f".{k}")
        state = {k: v for k, v in state.items() if k not in dropped}
    if model_type == "bert":
        state = _map_bert_state_dict(state, source.config.pad_token_id)
    missing, unexpected = target.load_state_dict(state, strict=False)
    not_scoring = [k for k in missing if ".scoring." not in f".{k}"]
    if unexpected or not_scoring:
        raise ConversionError(f"weights of {architecture} do not map onto {target_cls.__name__}: "
                              f"unexpected {unexpected[:8]}, missing {not_scoring[:8]}")

    output_check: dict[str, Any] = {"performed": False}
    if check_outputs:
        generator = torch.Generator().manual_seed(0)
        inputs = _check_inputs(target_config, family, generator)
        with torch.no_grad():
            reference = _main_output(source(**inputs)).float()
            converted = _main_output(target(**inputs)).float()
        diff = float((reference - converted).abs().max())
        scale = float(reference.abs().max())
        source_softmax = not is_ssa_source or source.config.uses_softmax_only
        must_match = source_softmax and target_config.uses_softmax_only
        tolerance = 1e-4 * max(1.0, scale)
        output_check = {"performed": True, "max_abs_diff": diff, "reference_max_abs": scale,
                        "must_match": must_match, "tolerance": tolerance if must_match else None}
        if must_match and not diff <= tolerance:
            raise ConversionError(f"the converted softmax model's outputs differ from the source's by {diff:.3g} "
                                  f"(tolerance {tolerance:.3g}): the weights did not map correctly")
        logger.info("output check: max |difference| to the source %.3g (%s)", diff,
                    "must match" if must_match else "scoring changed, differences expected")

    save_dtype = _source_dtype(raw) if dtype == "auto" else dtype
    target.to(DTYPES[save_dtype])
    if getattr(source, "generation_config", None) is not None and target.can_generate():
        target.generation_config = copy.deepcopy(source.generation_config)

    result = ConversionResult(
        source=str(src),
        destination=str(dst),
        source_class=architecture,
        target_class=target_cls.__name__,
        attention_scoring=attention_scoring,
        scoring_settings=_scoring_settings(target_config),
        dtype=save_dtype,
        copied_tensors=len(state),
        initialised_tensors=sorted(missing),
        dropped_tensors=dropped,
        tokenizer_files=[],
        output_check=output_check,
    )
    with atomic_folder(dst, overwrite=overwrite) as tmp:
        target.save_pretrained(tmp)
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
                result.tokenizer_files.append(name)
        # the record travels with the checkpoint (also to the Hub): the source by folder name, not local path
        record = {k: v for k, v in result.to_dict().items() if k != "destination"}
        record["source"] = src.name
        atomic_write_json(tmp / CONVERSION_FILE, record)
        if card:
            summary = dict(record)
            summary["initialised_tensors"] = len(result.initialised_tensors)
            summary["output_check"] = (f"max abs difference of outputs to the source {output_check['max_abs_diff']:.3g}"
                                       if output_check.get("performed") else "not run")
            write_model_card(tmp, default_name=dst.name, conversion=summary, base_model=base_model, license=license)
    return result


# ---------------------------------------------------------------------------------------------------- pushing


@dataclass
class PushResult:
    repo_id: str
    folder: str
    files: list[str]
    card_rendered: bool
    dry_run: bool
    url: str | None = None
    commit_url: str | None = None


def _relative_imports(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    return set(re.findall(r"^\s*from\s+\.(\w+)\s+import", text, flags=re.M)) | set(
        re.findall(r"^\s*import\s+\.(\w+)", text, flags=re.M))


def check_checkpoint_folder(folder: str | os.PathLike) -> dict:
    """Check that a folder is a loadable ssa-hf checkpoint: config.json of an ssa-hf model, weights, and the
    remote-code files named by auto_map with every sibling file they import. Returns config.json's content."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {str(folder)!r} does not exist")
    raw = _read_config_json(folder)
    if raw.get("model_type") not in FAMILIES:
        raise ValueError(f"{folder}: model_type {raw.get('model_type')!r} is not an ssa-hf model; "
                         f"convert it first with `ssa-hf convert {folder} DST`")
    if not _weight_files(folder) and not list(folder.glob("pytorch_model*.bin")):
        raise ValueError(f"{folder} has no weights (*.safetensors); save the model with save_pretrained")
    auto_map = raw.get("auto_map")
    if not auto_map:
        raise ValueError(f"{folder}/config.json has no auto_map, so trust_remote_code cannot load it without "
                         f"ssa-hf; save it again after `import ssa_hf` (which registers the classes)")
    todo = {ref.split(".")[0] for ref in auto_map.values() if isinstance(ref, str)}
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        seen.add(module)
        path = folder / f"{module}.py"
        if not path.is_file():
            raise ValueError(f"{folder} lacks {module}.py, needed by the remote code (auto_map); save the model "
                             f"again with save_pretrained after `import ssa_hf`")
        todo |= _relative_imports(path) - seen
    return raw


def _files_to_upload(folder: Path, ignore_patterns: Sequence[str]) -> list[str]:
    from huggingface_hub.utils import filter_repo_objects

    files = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    return list(filter_repo_objects(files, ignore_patterns=list(ignore_patterns)))


class PushError(RuntimeError):
    """A push that the Hub (or the network) refused; the message says what happened and what to do."""


# HTTP status -> what to do about it
_PUSH_ADVICE = {
    401: "the Hub did not accept the token: run `hf auth login` again, or set HF_TOKEN to a valid token",
    403: "the token may not write there: use a token with write access to {namespace}, or a namespace you own",
    404: "the Hub found no {target}: check the repository id{branch_hint}",
    409: "the Hub reported a conflict (another commit or a repository of another type at {repo_id}): retry, or "
         "push to another repository",
    413: "the Hub refused the upload's size: large weights need Git LFS / Xet support (`pip install -U "
         "huggingface_hub`)",
    429: "the Hub is rate-limiting this account: wait a few minutes and run the command again",
}
_NETWORK_ERRORS = {"ConnectionError", "TransportError", "TimeoutException", "Timeout", "ConnectError"}


def explain_push_failure(error: BaseException, repo_id: str, revision: str | None = None) -> str:
    """A message for a failed push: the Hub's own words (first line) and what to do about them."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    detail = (str(error).strip().splitlines() or [""])[0]
    if status in _PUSH_ADVICE:
        advice = _PUSH_ADVICE[status].format(
            namespace=repo_id.split("/")[0] if "/" in repo_id else "your account", repo_id=repo_id,
            target=f"branch {revision!r} in {repo_id}" if revision else f"repository {repo_id}",
            branch_hint=" and create the branch first (or drop --revision)" if revision else "")
    elif {c.__name__ for c in type(error).__mro__} & _NETWORK_ERRORS:
        advice = "could not reach the Hub: check the network connection (and HF_ENDPOINT, if set), then run again"
    else:
        advice = "see the Hub's message; run the command again with -v for details"
    status_text = f", HTTP {status}" if status else ""
    return (f"pushing to {repo_id} failed ({type(error).__name__}{status_text}: {detail}). {advice}. "
            f"The local folder is unchanged.")


@contextlib.contextmanager
def _restored_on_failure(paths: Sequence[Path]) -> Iterator[None]:
    """Put the files back as they were (or absent) if the block does not finish."""
    saved = {path: path.read_bytes() if path.is_file() else None for path in paths}
    try:
        yield
    except BaseException:
        for path, content in saved.items():
            if content is None:
                path.unlink(missing_ok=True)
            elif not path.is_file() or path.read_bytes() != content:
                atomic_write_bytes(path, content)
        raise


def _card_for_push(folder: Path, repo_id: str, refresh_card: bool, card_kwargs: dict):
    """(the card, whether it was rendered anew): rendered and written when the folder has none, with refresh_card
    or with card inputs; else the folder's card, checked offline."""
    from huggingface_hub import ModelCard

    readme = folder / "README.md"
    if refresh_card or card_kwargs or not readme.is_file():
        previous = {}
        if (folder / CARD_INPUTS_FILE).is_file():
            previous = json.loads((folder / CARD_INPUTS_FILE).read_text(encoding="utf-8"))
        return write_model_card(folder, **{**previous, **card_kwargs, "repo_id": repo_id}), True
    card = ModelCard.load(readme)
    validate_model_card(card)
    if REPO_ID_PLACEHOLDER in str(card):
        logger.warning("README.md shows %r in its code snippets; pass refresh_card=True (--refresh-card) to "
                       "render it with the repo id", REPO_ID_PLACEHOLDER)
    return card, False


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    refresh_card: bool = False,
    validate_online: bool = True,
    dry_run: bool = False,
    ignore_patterns: Sequence[str] = DEFAULT_IGNORE_PATTERNS,
    **card_kwargs,
) -> PushResult:
    """Upload a checkpoint folder with its model card to the Hub repository `repo_id` (created if needed).

    The folder is checked first (`check_checkpoint_folder`). The card (README.md) is rendered when the folder has
    none, when `refresh_card` is set, or when card inputs (training=, evaluation=, base_preset=, ...) are given;
    it reuses the inputs of the previous rendering (ssa_hf_card.json) and adds the repo id. An existing card is
    checked offline; before uploading, the Hub validates it (`ModelCard.validate`, skipped with
    validate_online=False). The token comes from `token`, else HF_TOKEN or the stored login; it is never printed.
    `dry_run` does everything except contacting the Hub and returns the files that would be uploaded.
    A push that fails leaves the folder as it was (a card rendered for it is taken back) and raises `PushError`
    (Hub and network failures, with what to do) or ValueError (refused before contacting the Hub).
    """
    from huggingface_hub import HfApi, constants, get_token

    folder = Path(folder)
    if not re.fullmatch(r"[\w.\-]+/[\w.\-]+|[\w.\-]+", repo_id or ""):
        raise ValueError(f"repo_id {repo_id!r} is not a Hub repository id (namespace/name)")
    check_checkpoint_folder(folder)
    card_kwargs = {k: v for k, v in card_kwargs.items() if v is not None}
    with _restored_on_failure([folder / "README.md", folder / CARD_INPUTS_FILE]):
        card, rendered = _card_for_push(folder, repo_id, refresh_card, card_kwargs)
        result = PushResult(repo_id=repo_id, folder=str(folder.resolve()), files=_files_to_upload(folder, ignore_patterns),
                            card_rendered=rendered, dry_run=dry_run)
        if dry_run:
            return result
        if constants.HF_HUB_OFFLINE:
            raise ValueError("HF_HUB_OFFLINE is set: pushing needs the network; unset it, or use a dry run")
        if token is None and get_token() is None:
            raise ValueError("no Hugging Face token: run `hf auth login` or set the HF_TOKEN environment variable")
        try:
            if validate_online:
                card.validate()
        except ValueError as error:
            raise PushError(f"the Hub rejected the model card (README.md): {error}. Fix its metadata (or render it "
                            f"again with --refresh-card), or skip this check with --no-validate-online. The local "
                            f"folder is unchanged.") from error
        except Exception as error:
            raise PushError(explain_push_failure(error, repo_id, revision)) from error
        try:
            api = HfApi(token=token)
            repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
            commit = api.upload_folder(
                repo_id=repo_id, folder_path=str(folder), repo_type="model", revision=revision, create_pr=create_pr,
                commit_message=commit_message or "Upload ssa-hf checkpoint", ignore_patterns=list(ignore_patterns),
            )
        except Exception as error:
            raise PushError(explain_push_failure(error, repo_id, revision)) from error
    result.url = str(repo_url)
    result.commit_url = getattr(commit, "commit_url", None) or (str(commit) if commit is not None else None)
    return result


__all__ = [
    "BIBTEX",
    "ConversionError",
    "ConversionResult",
    "DestinationExistsError",
    "EvaluationResult",
    "PushError",
    "PushResult",
    "atomic_folder",
    "check_checkpoint_folder",
    "convert_checkpoint",
    "load_ssa_config",
    "normalize_evaluation",
    "normalize_training",
    "push_to_hub",
    "read_scoring_parameters",
    "render_model_card",
    "save_checkpoint_folder",
    "validate_model_card",
    "write_model_card",
]
