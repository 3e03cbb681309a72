"""Metrics and trivial baselines of the ICL tasks (REFERENCE §3; positions are 1-based, position i is the
prediction of y_i at x_i).

- quantifiers: a prediction is sign(output) (output > 0: +1, else -1). *Sequence error*: the share of prompts
  with any wrong prediction at positions >= `from_position` (4). *Individual error*: the share of wrong
  predictions over all positions. *Error per position*: the share of prompts wrong at each position.
- regression: *MSE*: the mean squared error of the predictions at positions >= `from_position`.
- baselines: quantifiers: always predict the majority label of each position (taken from the labels of the cell's
  own test prompts, so it is the best constant-per-position answer there); regression: always predict 0, and
  least squares on the points seen so far (exact for noise-free lines from 3 points on).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .tasks import Prompts

Predictor = Callable[[Prompts], Tensor]  # prompts -> outputs at the input positions [N, L]




def quantifier_predictions(outputs: Tensor) -> Tensor:
    return torch.where(outputs > 0, 1.0, -1.0)


def quantifier_metrics(outputs: Tensor, labels: Tensor, from_position: int = 4) -> dict:
    """Sequence error (any wrong prediction at positions >= from_position), individual error, error per position."""
    if outputs.shape != labels.shape or outputs.dim() != 2:
        raise ValueError(f"outputs and labels must both be [prompts, points], got {tuple(outputs.shape)} and {tuple(labels.shape)}")
    wrong = quantifier_predictions(outputs) != labels
    counted = wrong[:, from_position - 1 :]
    return {
        "sequence_error": float(counted.any(-1).float().mean()) if counted.shape[1] else 0.0,
        "individual_error": float(wrong.float().mean()),
        "per_position": wrong.float().mean(0).tolist(),
    }


def linear_metrics(outputs: Tensor, labels: Tensor, from_position: int = 4) -> dict:
    """MSE over positions >= from_position, and the squared error per position."""
    if outputs.shape != labels.shape or outputs.dim() != 2:
        raise ValueError(f"outputs and labels must both be [prompts, points], got {tuple(outputs.shape)} and {tuple(labels.shape)}")
    squared = (outputs.double() - labels.double()) ** 2
    counted = squared[:, from_position - 1 :]
    return {"mse": float(counted.mean()) if counted.numel() else 0.0, "per_position": squared.mean(0).tolist()}


def majority_baseline(prompts: Prompts) -> Tensor:
    """Always answer the label that is most frequent at each position among these prompts (ties: -1)."""
    majority = torch.where(prompts.ys.mean(0) > 0, 1.0, -1.0)
    return majority.expand_as(prompts.ys).clone()


def zero_baseline(prompts: Prompts) -> Tensor:
    return torch.zeros_like(prompts.ys)


def least_squares_baseline(prompts: Prompts) -> Tensor:
    """Predict y_i by the least-squares line through (x_1, y_1)..(x_{i-1}, y_{i-1}) (0 at i = 1, the mean at i = 2)."""
    xs, ys = prompts.xs.double(), prompts.ys.double()
    out = torch.zeros_like(xs)
    for i in range(1, xs.shape[1]):
        if i == 1:
            out[:, 1] = ys[:, 0]
            continue
        design = torch.stack([xs[:, :i], torch.ones_like(xs[:, :i])], dim=-1)  # [N, i, 2]
        coef = torch.linalg.lstsq(design, ys[:, :i, None]).solution  # [N, 2, 1]
        out[:, i] = coef[:, 0, 0] * xs[:, i] + coef[:, 1, 0]
    return out.to(prompts.ys.dtype)
