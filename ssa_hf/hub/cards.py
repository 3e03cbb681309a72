"""Model cards: `render_model_card(model | folder | config, training=..., evaluation=..., base_preset=...)` fills
the template in `model_cards/` and returns a `huggingface_hub.ModelCard` whose metadata has been checked locally
(`validate_model_card`); `write_model_card(folder, ...)` writes it as the folder's README.md. What a family
contributes to its card (architecture name, tags, extra rows) comes from the family table."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from ..models.settings import card_fields_by_scoring
from ..models.configuration_common import ScoringConfigMixin
from ..models.families import FAMILIES, TASKS, FamilySpec
from ..presets import count_parameters
from ..resources import MODEL_CARDS_ENV, model_cards_dir
from ..reporting import atomic_write_bytes, atomic_write_json, markdown_table
from .card_inputs import EvaluationResult, normalize_evaluation, normalize_training
from .folders import (
    family_spec,
    format_value,
    load_ssa_config,
    read_scoring_parameters,
    scoring_parameter_table,
    task_of,
)

DEFAULT_TEMPLATE = "ssa_model_card.md"
CARD_INPUTS_FILE = "ssa_hf_card.json"  # what the card was rendered from, so that push can render it again
REPO_ID_PLACEHOLDER = "path/to/this/checkpoint"
TOKENIZER_MARKERS = ("tokenizer.json", "tokenizer_config.json")  # a folder with either has a tokenizer
# the same URLs as pyproject.toml's [project.urls] (a test keeps them equal); a card on the Hub links absolutely
REPOSITORY_URL = "https://github.com/ssa-hf/ssa-hf"
PAPER_URL = "https://arxiv.org/abs/2508.14685"
INSTALL_LINE = f"pip install git+{REPOSITORY_URL}"


def docs_url(page: str) -> str:
    """The absolute address of a page of the repository's docs/ (relative links break on the Hub)."""
    return f"{REPOSITORY_URL}/blob/main/docs/{page}"

# read from the family table (ssa_hf/models/families.py)
PIPELINE_TAGS = {name: task.pipeline_tag for name, task in TASKS.items()}
AUTO_CLASSES = {name: task.auto_class.__name__ for name, task in TASKS.items()}
ARCHITECTURE_NAMES = {name: spec.architecture for name, spec in FAMILIES.items()}
SCORING_FIELDS = {f for f in ScoringConfigMixin.__dataclass_fields__}
SCORING_FIELDS_SHOWN = card_fields_by_scoring()  # derived from the scoring entries' declared parameters

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


def card_template(template: str | os.PathLike | None = None) -> Path:
    """The card template file (`template`, else model_cards/ssa_model_card.md as shipped), or FileNotFoundError
    saying what to do. Commands that write a card at their end (pretrain, convert) call it before any work."""
    path = Path(template) if template else model_cards_dir() / DEFAULT_TEMPLATE
    if not path.is_file():
        raise FileNotFoundError(f"model card template {path} does not exist; give an existing template file")
    return path


def _architecture_table(config, task: str, spec: FamilySpec) -> str:
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    rows = [
        ["model class", spec.model_class(task).__name__],
        ["architecture", spec.architecture],
        ["layers", config.num_hidden_layers],
        ["hidden size", config.hidden_size],
        ["feed-forward size", spec.feed_forward_size(config)],
        ["attention heads", heads],
        ["key-value heads", kv],
        ["head dimension", head_dim],
        ["vocabulary", config.vocab_size],
        ["max positions", config.max_position_embeddings],
        ["tied input/output embeddings", bool(getattr(config, "tie_word_embeddings", False))],
    ]
    rows.extend(spec.card_rows(config))
    rows.append(["parameters", f"{count_parameters(config, task):,}"])
    return markdown_table(["", ""], rows)


def scoring_settings(config) -> dict[str, Any]:
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


def _documents(r: EvaluationResult) -> str:
    if r.documents is None:
        return "not given"
    return f"{r.documents:,} of {r.documents_total:,}" if r.documents_total is not None else f"{r.documents:,}"


def _evaluation_table(results: Sequence[EvaluationResult]) -> str:
    rows = []
    for r in results:
        baselines = ", ".join(f"{k} {format_value(v)}" for k, v in sorted(r.baselines.items())) or "not given"
        rows.append([_cell(r.task), _cell(r.dataset or ""), _cell(r.split or ""), _cell(r.metric), format_value(r.value),
                     format_value(r.stderr) if r.stderr is not None else "",
                     r.num_fewshot if r.num_fewshot is not None else "not given", _documents(r), _cell(baselines),
                     _cell(r.source or "")])
    return markdown_table(["task", "data set", "split", "metric", "value", "stderr", "num_fewshot", "documents",
                           "baselines", "source"], rows)


def _subset_note(results: Sequence[EvaluationResult]) -> str:
    """One sentence per task scored on a subset (lm-eval's --limit), empty when every task used its whole split."""
    subsets = {r.task: r for r in results if r.is_subset}
    if not subsets:
        return ""
    parts = ", ".join(f"{task} on {r.documents:,} of its {r.documents_total:,} documents" for task, r in subsets.items())
    return (f"**These scores come from a subset** (lm-eval's `--limit`): {parts}. They are noisier than full-split "
            f"scores and not comparable with published figures.\n\n")


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


def _card_name(model_name, repo_id, folder, family: str, scoring_names: list[str]) -> str:
    if model_name is not None:
        return model_name
    if repo_id:
        return repo_id.split("/")[-1]
    if folder is not None:
        return folder.resolve().name
    return f"{family}-{'-'.join(scoring_names)}"


def _card_tags(spec: FamilySpec, scoring_names: list[str]) -> list[str]:
    scoring_label = scoring_names[0] if len(scoring_names) == 1 else "mixed-scoring"
    tags = ["ssa-hf", "attention", f"{scoring_label}-attention".replace("_", "-"), spec.name.replace("_", "-"),
            *spec.card_tags, "custom_code"]
    if "ssa" in scoring_names:
        tags.insert(1, "scaled-signed-averaging")
    return tags


def _card_summary(config, spec: FamilySpec, task: str, parameters: int) -> str:
    scoring_names = sorted(set(config.scoring_per_head()))
    size = f"{parameters / 1e6:.1f}M" if parameters >= 1e6 else f"{parameters / 1e3:.1f}k"
    model = f"A {size}-parameter {spec.architecture} (`{spec.model_class(task).__name__}`)"
    if scoring_names == ["softmax"]:
        return (f"{model} with standard softmax attention (`attention_scoring=\"softmax\"`), as used for the softmax "
                f"baseline of an SSA comparison: the same class with `attention_scoring=\"ssa\"` is its SSA twin.")
    if not isinstance(config.attention_scoring, str):
        return f"{model} whose attention heads use one scoring function each: {', '.join(config.attention_scoring)}."
    summary_scoring = ("**SSA** (Scaled Signed Averaging)" if scoring_names == ["ssa"]
                       else f"`{config.attention_scoring}`")
    return f"{model} whose attention uses {summary_scoring} in place of softmax."


def _attention_text(config) -> str:
    """What each `attn_implementation` runs for this checkpoint (the alias table of docs/models.md)."""
    aliases = getattr(config, "attn_implementation_aliases", None)
    if config.uses_softmax_only and aliases == {}:
        return ("This softmax model has no implementation aliases (`attn_implementation_aliases={}`): transformers' "
                "standard names (`\"sdpa\"`, `\"eager\"`, `\"flash_attention_2\"`) run transformers' own softmax "
                "implementations, and ssa-hf's (`\"ssa_auto\"`, `\"ssa_eager\"`) remain available.")
    text = ("The model runs its attention through ssa-hf's own implementations of its scoring function, never through "
            "softmax: the default and `attn_implementation=\"sdpa\"` run `ssa_auto` (the fast backend for the device), "
            "`\"eager\"` runs `ssa_eager` (materialised weights; `output_attentions=True` returns them) and "
            "`\"flex_attention\"` runs `ssa_flex`; `model.config._attn_implementation` shows what runs. ")
    if config.uses_softmax_only:
        text += ("As a softmax model it also accepts transformers' softmax kernels (`\"flash_attention_2\"`, paged "
                 "attention).")
    else:
        text += ("transformers' softmax kernels (`\"flash_attention_2\"`, paged attention) are refused with a message, "
                 "since they cannot compute this scoring function.")
    return text + f" Details: [attention implementations]({docs_url('models.md')})."


def _training_summary(training_info: Mapping[str, Any]) -> str:
    """One paragraph saying how the weights were trained, generated from the run's record."""
    if not training_info:
        return "How it was trained: not recorded (no training information was given when this card was written)."
    get = training_info.get
    parts = [f"How it was trained: with {get('trained_with') or 'an unrecorded trainer'}"]
    if get("uptrained_from"):
        parts.append(f" (the weights it started from: {get('uptrained_from')})")
    if get("steps") is not None:
        tokens = f" ({get('tokens'):,} tokens)" if isinstance(get("tokens"), int) else ""
        parts.append(f", for {get('steps'):,} steps{tokens}")
    if get("data"):
        parts.append(f" on {get('data')}")
    shape = [f"{k.replace('_', ' ')} {get(k)}" for k in ("sequence_length", "global_batch_size", "learning_rate")
             if get(k) is not None]
    if shape:
        parts.append(f"; {', '.join(shape)}")
    if get("processes"):
        parts.append(f"; {get('processes')} process{'es' if get('processes') != 1 else ''}")
    if get("mixed_precision"):
        parts.append(f", mixed precision {get('mixed_precision')}")
    parts.append(". ")
    if get("validation_loss") is not None:
        parts.append(f"Validation loss at the end: {get('validation_loss')}. ")
    parts.append(f"Every recorded setting is in the table below; the training guide: [pretraining]({docs_url('pretraining.md')}).")
    return "".join(parts)


def _training_and_evaluation(training_info: dict, results: Sequence[EvaluationResult]) -> tuple[str, str]:
    if training_info:
        training_section = _kv_table(training_info)
    else:
        training_section = ("No training information was given when this card was written: the weights may be "
                            "randomly initialised or converted without fine-tuning.")
    if results:
        evaluation_section = (
            _subset_note(results)
            + "Scores as reported to the card renderer; `num_fewshot` is the number of in-context examples, "
            "`documents` how many of the split's documents were scored, and the baselines are chance and "
            "majority-class rates where known.\n\n" + _evaluation_table(results))
    else:
        evaluation_section = "No evaluation results were given when this card was written."
    return training_section, evaluation_section


def _limitations(config, conversion, results) -> str:
    limitations = [
        "SSA computes `sgn` and `log1p` for every attention score, so it is slower than softmax on kernels built "
        "for softmax; FlashAttention kernels cannot run it (ssa-hf provides eager, FlexAttention and blockwise "
        "implementations)."
    ]
    matched = (conversion or {}).get("init", {}).get("method") == "matched"
    if conversion and matched:
        limitations.append(
            "The scoring parameters start softmax-matched (small b, n = 1/b): until training moves b and n, this "
            "model computes its source's softmax attention (within the tolerance in the conversion table), not "
            f"SSA's polynomial weighting; see [uptraining]({docs_url('uptraining.md')}).")
    elif conversion and not config.uses_softmax_only:
        limitations.append(
            f"The weights were trained with another attention scoring function ({conversion.get('source_class', 'the source')}"
            f"). Changing the scoring function changes the output of every layer, so the converted model needs "
            f"fine-tuning before its outputs mean anything.")
    if not results:
        limitations.append("No evaluation is reported here; measure before relying on the model.")
    return "\n".join(f"- {item}" for item in limitations)


def _conversion_text(conversion) -> tuple[str, str]:
    """(table, note) of the conversion record, empty when the model was not converted."""
    if not conversion:
        return "", ""
    init = conversion.get("init") or {"method": "config"}
    how = "initialised from the config"
    if init.get("method") == "matched":
        how = (f"softmax-matched (`--init matched`: b = {init['b']:g}, n = {init['n']:g}, b n = {init['c']:g}, so the "
               f"model starts as its source's softmax at temperature 1)")
    note = (f"Converted with `ssa-hf convert` from a `{conversion.get('source_class', '?')}` checkpoint: "
            f"every weight was copied, the scoring parameters were {how}.")
    shown = {k: conversion[k] for k in ("source", "source_class", "target_class", "attention_scoring",
                                        "copied_tensors", "initialised_tensors", "output_check")
             if k in conversion}
    shown["init"] = init.get("method", "config")
    return _kv_table(shown), note


def _learned_values(model, folder, config, settings: dict[str, Any]) -> tuple[str, str]:
    """(table, note) of the scoring parameters stored in the model or checkpoint (empty for a bare config)."""
    if model is not None:
        values, where = model.scoring_parameters(), "the model"
    elif folder is not None:
        values, where = read_scoring_parameters(folder, config), "this checkpoint's weights"
    else:
        values, where = None, ""
    initial = {k: settings[k] for k in ("ssa_b_init", "ssa_n_init") if k in settings}
    shown = f" (initial values: {', '.join(f'{k[4]}={v}' for k, v in initial.items())})" if initial else ""
    return (scoring_parameter_table(values) if values else ""), f"Values read from {where}{shown}."


def _card_data(config, spec: FamilySpec, task: str, *, model_name: str, training_info: dict, results, base_preset,
               base_model, license, language, version: str):
    from huggingface_hub import ModelCardData

    pipeline_tag = PIPELINE_TAGS[task]
    ssa_block = {"family": spec.name, "model_class": spec.model_class(task).__name__, "base_preset": base_preset,
                 "scoring": scoring_settings(config), "parameters": count_parameters(config, task),
                 "version": version}
    return ModelCardData(
        library_name="transformers",
        pipeline_tag=pipeline_tag,
        license=license,
        language=language,
        base_model=base_model,
        datasets=training_info.get("datasets"),
        model_name=model_name,
        eval_results=_eval_results_metadata(results, pipeline_tag) or None,
        tags=_card_tags(spec, sorted(set(config.scoring_per_head()))),
        ssa_hf={k: v for k, v in ssa_block.items() if v is not None},
    )


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
    from huggingface_hub import ModelCard

    from .. import __version__

    config, model, folder = _model_source(source)
    spec, task = family_spec(config), task_of(config, model)
    training_info, results = normalize_training(training), normalize_evaluation(evaluation)
    settings = scoring_settings(config)
    model_name = _card_name(model_name, repo_id, folder, spec.name, sorted(set(config.scoring_per_head())))
    card_data = _card_data(config, spec, task, model_name=model_name, training_info=training_info, results=results,
                           base_preset=base_preset, base_model=base_model, license=license, language=language,
                           version=__version__)
    training_section, evaluation_section = _training_and_evaluation(training_info, results)
    conversion_table, conversion_note = _conversion_text(conversion)
    learned_table, learned_note = _learned_values(model, folder, config, settings)
    template_path = card_template(template)
    card = ModelCard.from_template(
        card_data,
        template_path=str(template_path),
        title=model_name,
        repository_url=REPOSITORY_URL,
        paper_url=PAPER_URL,
        install_line=INSTALL_LINE,
        attention_text=_attention_text(config),
        training_summary=_training_summary(training_info),
        summary=_card_summary(config, spec, task, count_parameters(config, task)),
        ssa_hf_version=__version__,
        base_preset=base_preset,
        architecture_name=spec.architecture,
        architecture_table=_architecture_table(config, task, spec),
        scoring_table=_scoring_table(settings),
        learned_table=learned_table,
        learned_note=learned_note,
        model_type=config.model_type,
        auto_class=AUTO_CLASSES[task],
        has_tokenizer=folder is not None and any((folder / f).is_file() for f in TOKENIZER_MARKERS),
        repo_id=repo_id or REPO_ID_PLACEHOLDER,
        conversion_table=conversion_table,
        conversion_note=conversion_note,
        training_section=training_section,
        evaluation_section=evaluation_section,
        limitations=_limitations(config, conversion, results),
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


__all__ = ["BIBTEX", "PAPER_URL", "REPOSITORY_URL", "render_model_card", "validate_model_card", "write_model_card"]
