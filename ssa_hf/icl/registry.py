"""The ICL task table: one `Task` record per task, the only place that says what a task is.

A record holds the task's kind, its sampler, labels, training loss, metrics and baselines, the sweeps and metrics
its primary endpoint may use, and the name its seeds are derived from. Everything else (training, evaluation,
aggregation, statistics, report, plots) reads the record, so a new task of an existing kind is one entry here plus
its sampler (see docs/dev/architecture.md, "How to add an ICL task"). The kind says which evaluation layout the task
gets: `quantifier` (labels +1/-1: sigma and length sweeps on a standard and a balanced test set, the
in-distribution check, the single-large-value probe) or `regression` (real labels: an MSE grid over sigma_x x
sigma_ab).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import torch.nn.functional as F
from torch import Tensor

from .metrics import Predictor, least_squares_baseline, linear_metrics, majority_baseline, quantifier_metrics, zero_baseline
from .tasks import Prompts, quantifier_labels, sample_linear, sample_quantifier

QUANTIFIER, REGRESSION = "quantifier", "regression"


def sign_loss(outputs: Tensor, labels: Tensor) -> Tensor:
    """Binary cross-entropy on sigmoid(output) vs (y + 1) / 2, for labels +1 / -1."""
    return F.binary_cross_entropy_with_logits(outputs, (labels + 1) / 2)


@dataclass(frozen=True)
class Task:
    """One ICL task.

    name: canonical name. kind: QUANTIFIER or REGRESSION (the evaluation layout, see the module doc).
    sample: (batch, points, sigma, generator, sigma_ab) -> Prompts, the training and standard test distribution.
    labels: inputs [..., L] -> labels (tasks whose labels are a function of the inputs alone; else None).
    loss: (outputs, labels) -> the training loss. metrics: (outputs, labels, from_position) -> a cell's figures.
    baselines: name -> predictor, scored like a model on every cell.
    sweeps, endpoint_metrics: what a primary endpoint on this task may select.
    seed_name: the name its prompt generators are seeded with (kept when a task is renamed, so seeds give the
        same prompts). aliases: old names still accepted.
    """

    name: str
    kind: str
    sample: Callable[..., Prompts]
    labels: Callable[[Tensor], Tensor] | None
    loss: Callable[[Tensor, Tensor], Tensor]
    metrics: Callable[..., dict]
    baselines: dict[str, Predictor]
    sweeps: tuple[str, ...]
    endpoint_metrics: tuple[str, ...]
    seed_name: str = ""
    aliases: tuple[str, ...] = field(default=())

    @property
    def is_quantifier(self) -> bool:
        return self.kind == QUANTIFIER


def _quantifier(name: str) -> Task:
    return Task(
        name=name, kind=QUANTIFIER, sample=partial(sample_quantifier, name), labels=partial(quantifier_labels, task=name),
        loss=sign_loss, metrics=quantifier_metrics, baselines={"majority": majority_baseline},
        sweeps=("sigma_sweep", "length_sweep"), endpoint_metrics=("sequence_error", "individual_error"), seed_name=name,
    )


TASKS: dict[str, Task] = {
    "every": _quantifier("every"),
    "some": _quantifier("some"),
    "linear_regression": Task(
        name="linear_regression", kind=REGRESSION, sample=sample_linear, labels=None, loss=F.mse_loss,
        metrics=linear_metrics, baselines={"zero": zero_baseline, "least_squares": least_squares_baseline},
        sweeps=("grid",), endpoint_metrics=("mse",), seed_name="linear", aliases=("linear",),
    ),
}
ALIASES = {alias: task.name for task in TASKS.values() for alias in task.aliases}


def get_task(name: str | Task) -> Task:
    """The record of task `name` (an old name gives the renamed task), or a ValueError listing the tasks."""
    if isinstance(name, Task):
        return name
    task = TASKS.get(ALIASES.get(name, name))
    if task is None:
        raise ValueError(f"unknown ICL task {name!r}; choose from {list(TASKS)}")
    return task
