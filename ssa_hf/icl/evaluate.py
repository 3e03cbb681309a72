"""Evaluation under distribution shift: metrics, the trivial baselines, the grids and the single-large-value probe.

Definitions (REFERENCE §3; positions are 1-based, position i is the prediction of y_i at x_i):
- quantifiers: a prediction is sign(output) (output > 0: +1, else -1). *Sequence error*: the share of prompts
  with any wrong prediction at positions >= `from_position` (4). *Individual error*: the share of wrong
  predictions over all positions. *Error per position*: the share of prompts wrong at each position.
- linear: *MSE*: the mean squared error of the predictions at positions >= `from_position`.
- baselines: quantifiers: always predict the majority label of each position (taken from the labels of the cell's
  own test prompts, so it is the best constant-per-position answer there); linear: always predict 0, and least
  squares on the points seen so far (exact for noise-free lines from 3 points on).

Every cell (task, test set, sigma, length) draws its prompts from a generator seeded by `EvalConfig.seed` and the
cell, so every model and baseline is scored on the same prompts.
"""

from __future__ import annotations

import zlib
from typing import Callable

import torch
from torch import Tensor

from .config import EvalConfig
from .tasks import PROBE_VALUES, Prompts, is_quantifier, probe_prompts, sample, sample_linear_shared_inputs

Predictor = Callable[[Prompts], Tensor]  # prompts -> outputs at the input positions [N, L]


# --------------------------------------------------------------------------------------------------
# Metrics and baselines
# --------------------------------------------------------------------------------------------------


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


BASELINES = {
    "quantifier": {"majority": majority_baseline},
    "linear": {"zero": zero_baseline, "least_squares": least_squares_baseline},
}


def baselines_for(task: str) -> dict[str, Predictor]:
    return BASELINES["quantifier" if is_quantifier(task) else "linear"]


# --------------------------------------------------------------------------------------------------
# Test prompts of one cell, and a model as a predictor
# --------------------------------------------------------------------------------------------------


def linear_paper_prompts(sigma_x: float, sigma_ab: float, cfg: EvalConfig) -> Prompts:
    """The authors' linear test cell: `linear_functions` lines (a, b ~ N(0, sigma_ab)), each applied to the same
    `batch_size` x-sequences of `linear_points` points (x ~ N(0, sigma_x)); prompts ordered function by function."""
    key = f"icl-eval-linear-paper|{cfg.seed}|{float(sigma_x)}|{float(sigma_ab)}|{cfg.linear_points}|{cfg.linear_functions}"
    generator = torch.Generator().manual_seed(zlib.crc32(key.encode()))
    return sample_linear_shared_inputs(cfg.batch_size, cfg.linear_functions, cfg.linear_points, float(sigma_x),
                                       float(sigma_ab), generator)


def cell_prompts(task: str, balanced: bool, sigma: float, points: int, cfg: EvalConfig, sigma_ab: float = 1.0) -> Prompts:
    """All test prompts of one cell (`cfg.batches` x `cfg.batch_size`), the same for every model."""
    key = f"icl-eval|{cfg.seed}|{task}|{'balanced' if balanced else 'standard'}|{float(sigma)}|{int(points)}|{float(sigma_ab)}"
    generator = torch.Generator().manual_seed(zlib.crc32(key.encode()))
    return sample(task, cfg.batches * cfg.batch_size, int(points), float(sigma), generator, balanced, float(sigma_ab))


def model_predictor(model, device: torch.device | str, chunk: int = 64) -> Predictor:
    """The model's outputs at the input positions, computed without gradients in chunks of `chunk` prompts."""

    def predict(prompts: Prompts) -> Tensor:
        features = prompts.features()
        outs = []
        with torch.inference_mode():
            for start in range(0, features.shape[0], chunk):
                out = model(features[start : start + chunk].to(device))
                outs.append(out[:, 0::2].float().cpu())
        return torch.cat(outs)

    return predict


# --------------------------------------------------------------------------------------------------
# Grids
# --------------------------------------------------------------------------------------------------


def _score(task: str, predict: Predictor, prompts: Prompts, cfg: EvalConfig) -> dict:
    outputs = predict(prompts)
    if is_quantifier(task):
        return quantifier_metrics(outputs, prompts.ys, cfg.from_position)
    return linear_metrics(outputs, prompts.ys, cfg.from_position)


def evaluate_task(task: str, predict: Predictor, cfg: EvalConfig, length: int) -> dict:
    """Every grid of `task` for one predictor (a model or a baseline)."""
    if not is_quantifier(task):
        paper = cfg.linear_protocol == "paper"
        length = cfg.linear_points if paper else length
        mse, per_position = [], []
        for sx in cfg.linear_sigmas_x:
            row, row_pos = [], []
            for sab in cfg.linear_sigmas_ab:
                prompts = linear_paper_prompts(sx, sab, cfg) if paper else cell_prompts(task, False, sx, length, cfg, sab)
                cell = _score(task, predict, prompts, cfg)
                row.append(cell["mse"])
                row_pos.append(cell["per_position"])
            mse.append(row)
            per_position.append(row_pos)
        return {
            "grid": {
                "length": length,
                "protocol": cfg.linear_protocol,
                "prompts_per_cell": cfg.linear_functions * cfg.batch_size if paper else cfg.batches * cfg.batch_size,
                "sigmas_x": list(cfg.linear_sigmas_x),
                "sigmas_ab": list(cfg.linear_sigmas_ab),
                "mse": mse,
                "per_position": per_position,
            }
        }
    cache: dict = {}

    def cell(balanced: bool, sigma: float, points: int) -> dict:
        key = (balanced, float(sigma), int(points))
        if key not in cache:
            cache[key] = _score(task, predict, cell_prompts(task, balanced, sigma, points, cfg), cfg)
        return cache[key]

    sets = [False, True] if cfg.balanced else [False]
    result = {
        "sigma_sweep": {"length": length, "values": list(cfg.sigmas)},
        "length_sweep": {"sigma": cfg.length_sweep_sigma, "values": list(cfg.lengths)},
    }
    for balanced in sets:
        name = "balanced" if balanced else "standard"
        result["sigma_sweep"][name] = [cell(balanced, s, length) for s in cfg.sigmas]
        result["length_sweep"][name] = [cell(balanced, cfg.length_sweep_sigma, n) for n in cfg.lengths]
    in_dist = {"sigma": 1.0, "length": length, "standard": cell(False, 1.0, length)}
    if cfg.balanced:
        in_dist["balanced"] = cell(True, 1.0, length)
    result["in_distribution"] = in_dist
    return result


def in_distribution_check(result: dict, cfg: EvalConfig) -> dict:
    """Whether a run learned the rule: individual error (standard set) and sequence error (balanced set) at sigma 1."""
    in_dist = result["in_distribution"]
    individual = in_dist["standard"]["individual_error"]
    balanced = in_dist.get("balanced", {}).get("sequence_error")
    passed = individual <= cfg.max_individual_error and (balanced is None or balanced <= cfg.max_balanced_sequence_error)
    return {
        "individual_error": individual,
        "balanced_sequence_error": balanced,
        "max_individual_error": cfg.max_individual_error,
        "max_balanced_sequence_error": cfg.max_balanced_sequence_error,
        "passed": bool(passed),
    }


# --------------------------------------------------------------------------------------------------
# The single-large-value probe
# --------------------------------------------------------------------------------------------------


def probe(model, task: str, device, values=PROBE_VALUES) -> dict:
    """Run the prompt x = values (with the true labels interleaved, ending at the last x) through the model with
    materialised attention (backend `ssa_eager`): outputs, correctness at each position, every layer's maps."""
    prompts = probe_prompts(task, values)
    features = prompts.features()[:, :-1]  # ends at x_L: the model must predict y_L
    previous = model.backbone.config._attn_implementation
    model.set_attn_implementation("ssa_eager")
    try:
        with torch.inference_mode():
            outputs, attentions = model(features.to(device), output_attentions=True)
    finally:
        model.set_attn_implementation(previous)
    outputs = outputs[0, 0::2].float().cpu()
    labels = prompts.ys[0]
    maps = [a[0].float().cpu() for a in attentions]  # per layer [heads, T, T]
    last = features.shape[1] - 1
    tokens = [f"x{i // 2 + 1}={values[i // 2]:g}" if i % 2 == 0 else f"y{i // 2 + 1}={int(labels[i // 2])}" for i in range(last + 1)]
    return {
        "values": list(values),
        "labels": labels.tolist(),
        "outputs": outputs.tolist(),
        "correct": (quantifier_predictions(outputs) == labels).tolist(),
        "tokens": tokens,
        # weight of the last query (x_L, the large value) on itself, per layer and head
        "large_token_weight": [m[:, last, last].tolist() for m in maps],
        "attention": [m.tolist() for m in maps],
    }
