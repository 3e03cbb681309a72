"""Evaluation under distribution shift: the grids of each task kind and the single-large-value probe (the metrics
and baselines are in `ssa_hf.icl.metrics`, which task uses which in `ssa_hf.icl.registry`).

Every cell (task, test set, sigma, length) draws its prompts from a generator seeded by `EvalConfig.seed` and the
cell, so every model and baseline is scored on the same prompts.
"""

from __future__ import annotations

import zlib

import torch
from torch import Tensor

from .config import EvalConfig
from .metrics import (  # noqa: F401  (re-exported: the metrics and baselines were defined here)
    Predictor,
    least_squares_baseline,
    linear_metrics,
    majority_baseline,
    quantifier_metrics,
    quantifier_predictions,
    zero_baseline,
)
from .registry import QUANTIFIER, get_task
from .tasks import PROBE_VALUES, Prompts, probe_prompts, sample, sample_linear_shared_inputs


def baselines_for(task: str) -> dict[str, Predictor]:
    return get_task(task).baselines


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
    name = get_task(task).seed_name  # (a renamed task keeps its test prompts)
    key = f"icl-eval|{cfg.seed}|{name}|{'balanced' if balanced else 'standard'}|{float(sigma)}|{int(points)}|{float(sigma_ab)}"
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
    return get_task(task).metrics(predict(prompts), prompts.ys, cfg.from_position)


def evaluate_task(task: str, predict: Predictor, cfg: EvalConfig, length: int) -> dict:
    """Every grid of `task` for one predictor (a model or a baseline): the layout of the task's kind."""
    if get_task(task).kind != QUANTIFIER:
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
