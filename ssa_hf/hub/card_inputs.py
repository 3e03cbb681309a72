"""What a model card is rendered from besides the model: evaluation results (ours, or lm-evaluation-harness's
results JSON) and training information, given as Python objects or JSON/YAML files, checked and normalised."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml


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


__all__ = ["EvaluationResult", "normalize_evaluation", "normalize_training"]
