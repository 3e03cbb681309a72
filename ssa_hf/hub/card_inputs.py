"""What a model card is rendered from besides the model: evaluation results (a list of results, the eval.json that
`ssa-hf eval` writes, or lm-evaluation-harness's results JSON) and training information, given as Python objects or
JSON/YAML files, checked and normalised."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..options import yaml_error_line
from ..regular_files import read_text


def _read_mapping(value: Mapping | str | os.PathLike | None, what: str) -> dict | None:
    """A dict given directly, or read from a JSON/YAML file."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return dict(value)
    path = Path(value)
    if not path.exists():
        raise FileNotFoundError(f"{what} file {str(path)!r} does not exist")
    try:
        text = read_text(path, f"{what} file")  # (a folder, a FIFO: one line; a FIFO would block the read)
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f"{what} file {path}: cannot parse it: {yaml_error_line(error)}") from None
    if not isinstance(data, (dict, list)):
        raise ValueError(f"{what} file {path}: expected a mapping or a list at the top level")
    return data



@dataclass
class EvaluationResult:
    """One score for the card (and its model-index metadata).

    `task`: the benchmark (e.g. lm-eval's "arc_easy"); `metric`: e.g. "acc_norm"; `value`: the score;
    `dataset`: Hub id of the data set ("allenai/ai2_arc"), `dataset_name`, `dataset_config`, `split`;
    `num_fewshot`: examples in the prompt; `stderr`; `baselines`: e.g. {"chance": 0.25, "majority": 0.27};
    `source`: what produced the figure ("lm-evaluation-harness 0.4.13"); `task_type`: Hub task of the
    model-index entry (defaults to the model's pipeline tag); `documents` / `documents_total`: how many documents
    were scored and how many the split holds (fewer under lm-eval's --limit).
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
    documents: int | None = None
    documents_total: int | None = None

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
        for key in ("documents", "documents_total"):
            count = getattr(self, key)
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
                raise ValueError(f"evaluation result {self.task}/{self.metric}: {key!r} must be an integer >= 0")
        if not isinstance(self.baselines, dict):
            raise ValueError(f"evaluation result {self.task}/{self.metric}: 'baselines' must be a mapping "
                             f"such as {{'chance': 0.25, 'majority': 0.27}}")
        self.value = float(self.value)

    @property
    def is_subset(self) -> bool:
        """Scored on fewer documents than the split holds (lm-eval's --limit)."""
        return self.documents is not None and self.documents_total is not None and self.documents < self.documents_total


_RESULT_FIELDS = set(EvaluationResult.__dataclass_fields__)


def _count(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _from_lm_eval(data: dict) -> list[EvaluationResult]:
    """lm-evaluation-harness's own results JSON: {"results": {task: {"acc,none": .., "acc_stderr,none": ..,
    "alias": .., "sample_len": ..}}, "n-shot": {task: k}, "n-samples": {task: {"original": N, "effective": n}},
    "configs": {task: {"dataset_path": ..}}, "lm_eval_version"?: ..}. Only "metric,filter" keys are metrics: the
    task's bookkeeping (alias, sample_len, sample_count) is not."""
    results = []
    n_shot = data.get("n-shot") or {}
    n_samples = data.get("n-samples") or {}
    configs = data.get("configs") or {}
    version = data.get("lm_eval_version")
    source = f"lm-evaluation-harness {version}" if version else "lm-evaluation-harness"
    for task, metrics in data["results"].items():
        if not isinstance(metrics, dict):
            raise ValueError(f"lm-eval results: task {task!r} does not map to a dict of metrics")
        task_config = configs.get(task) or {}
        counts = n_samples.get(task) or {}
        for key, value in metrics.items():
            name, comma, filter_name = key.partition(",")
            if not comma or name.endswith("_stderr") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            stderr = metrics.get(f"{name}_stderr,{filter_name}")
            shots = n_shot.get(task, task_config.get("num_fewshot"))
            results.append(EvaluationResult(
                task=task, metric=name if filter_name == "none" else key, value=value,
                dataset=task_config.get("dataset_path"), dataset_config=task_config.get("dataset_name"),
                split=task_config.get("test_split") or task_config.get("validation_split"),
                num_fewshot=int(shots) if isinstance(shots, (int, float)) else None,
                stderr=float(stderr) if isinstance(stderr, (int, float)) and math.isfinite(stderr) else None,
                source=source,
                documents=_count(counts.get("effective", metrics.get("sample_len"))),
                documents_total=_count(counts.get("original")),
            ))
    return results


def _from_ssa_eval(data: dict) -> list[EvaluationResult]:
    """The eval.json that `ssa-hf eval` writes: {"kind": "lm_eval", "tasks": {task: {"metrics": {name: {"value",
    "stderr"}}, "num_fewshot", "n", "n_total", "baselines": {"chance", "majority", ..}, "data": {..}}}, "versions"}."""
    version = (data.get("versions") or {}).get("lm_eval")
    source = f"ssa-hf eval (lm-evaluation-harness {version})" if version else "ssa-hf eval"
    results = []
    for task, entry in data["tasks"].items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("metrics"), Mapping):
            raise ValueError(f"ssa-hf eval results: task {task!r} has no 'metrics' mapping")
        data_source = entry.get("data") or {}
        dataset = data_source.get("dataset_path")
        baselines = {k: float(v) for k, v in (entry.get("baselines") or {}).items()
                     if k in ("chance", "majority") and isinstance(v, (int, float))}
        shots = entry.get("num_fewshot")
        for name, metric in entry["metrics"].items():
            value = metric.get("value") if isinstance(metric, Mapping) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            stderr = metric.get("stderr")
            results.append(EvaluationResult(
                task=task, metric=name, value=value,
                dataset=dataset if dataset and dataset != "json" else None,  # "json": a local copy, no Hub id
                dataset_config=data_source.get("dataset_name"), split=data_source.get("split"),
                num_fewshot=int(shots) if isinstance(shots, (int, float)) else None,
                stderr=float(stderr) if isinstance(stderr, (int, float)) and math.isfinite(stderr) else None,
                baselines=baselines, source=source,
                documents=_count(entry.get("n")), documents_total=_count(entry.get("n_total")),
            ))
    return results


def normalize_evaluation(evaluation) -> list[EvaluationResult]:
    """Evaluation results from: a list of EvaluationResult or of dicts with its fields; a dict {"results": [...]};
    the eval.json that `ssa-hf eval` writes; lm-evaluation-harness's results JSON (a dict whose "results" is a
    mapping task -> metrics); or a path to a JSON/YAML file holding any of these."""
    if evaluation is None:
        return []
    if isinstance(evaluation, (str, os.PathLike)):
        evaluation = _read_mapping(evaluation, "evaluation")
    if isinstance(evaluation, Mapping):
        if evaluation.get("kind") == "lm_eval" and isinstance(evaluation.get("tasks"), Mapping):
            return _from_ssa_eval(dict(evaluation))
        if evaluation.get("kind") == "lm_eval_comparison":
            raise ValueError("evaluation: this is a comparison of several models (eval_comparison.json); give the "
                             "eval.json of the model being pushed (in its own run's folder)")
        if isinstance(evaluation.get("results"), Mapping):
            return _from_lm_eval(dict(evaluation))
        if isinstance(evaluation.get("results"), list):
            evaluation = evaluation["results"]
        else:
            raise ValueError("evaluation: expected a list of results, {'results': [...]}, the eval.json of "
                             "`ssa-hf eval`, or lm-eval's results JSON")
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


__all__ = ["EvaluationResult", "normalize_evaluation", "normalize_training"]
