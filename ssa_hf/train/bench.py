"""Training throughput of SSA and softmax on the same config, in one run (a benchmark, not a test).

Each variant trains the same model on the same data for the same steps through `pretrain` (the real loop: data,
forward, backward, AdamW), `repeats` times, alternating the variants so that a change in the machine's load hits
them alike. Throughput is measured per step from the run's log, leaving out the first `warmup_steps` steps; the
median over the repeats is reported, with the SSA / softmax ratio.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..reporting import OutputDir, markdown_table

DEFAULT_VARIANTS = ("ssa", "softmax", "softmax@sdpa")


@dataclass
class BenchConfig:
    """config: the pretraining config to time (a tiny_ config); variants: "scoring" or "scoring@attn_implementation";
    steps: timed steps per run (after warmup_steps); repeats: runs per variant; overrides: more config overrides."""

    config: str = "configs/pretrain/tiny_causal.yaml"
    variants: list[str] = field(default_factory=lambda: list(DEFAULT_VARIANTS))
    steps: int = 20
    warmup_steps: int = 3
    repeats: int = 2
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchResult:
    config: dict[str, Any]
    machine: dict[str, Any]
    rows: list[dict[str, Any]]
    ratio_ssa_over_softmax: float | None
    table: str


def machine_description() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {
        "cpu": cpu,
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        info["load_average_1min"] = round(os.getloadavg()[0], 2)
    except OSError:
        pass
    return info


def _tokens_per_second(history: list[dict[str, Any]], warmup: int) -> float:
    tokens = seconds = 0.0
    for record in history:
        if "seconds_per_step" in record and record["step"] > warmup:
            tokens += record["tokens_per_second"] * record["seconds_per_step"]
            seconds += record["seconds_per_step"]
    if seconds == 0:
        raise ValueError("no timed steps: raise steps above warmup_steps")
    return tokens / seconds


def benchmark_training(bench: BenchConfig, output_dir: str | None = None) -> BenchResult:
    from ..models.attention import own_implementation_overrides
    from .config import load_config
    from .loop import pretrain

    if bench.steps < 1 or bench.repeats < 1 or bench.warmup_steps < 0:
        raise ValueError("steps and repeats must be >= 1, warmup_steps >= 0")
    samples: dict[str, list[float]] = {v: [] for v in bench.variants}
    details: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_train_") as scratch:
        for repeat in range(bench.repeats):
            for variant in bench.variants:
                scoring, _, implementation = variant.partition("@")
                overrides = {
                    "output_dir": str(Path(scratch) / f"{variant.replace('@', '_')}_{repeat}"),
                    "max_steps": bench.warmup_steps + bench.steps,
                    "logging_steps": 1,
                    "eval_steps": 0,
                    "save_steps": 0,
                    "report_to": ["none"],
                    "model.attention_scoring": scoring,
                    **({"model.attn_implementation": implementation} if implementation else {}),
                    **{f"model.overrides.{k}": v for k, v in own_implementation_overrides(implementation).items()},
                    **bench.overrides,
                }
                result = pretrain(load_config(bench.config, overrides))
                ran = result.metrics["attn_implementation"]
                if ran != (implementation or "ssa_auto"):  # a baseline must be what its row says it is
                    raise RuntimeError(f"variant {variant!r} asked for {implementation or 'ssa_auto'!r}, the run used {ran!r}")
                samples[variant].append(_tokens_per_second(result.log_history, bench.warmup_steps))
                details[variant] = {"parameters": result.metrics["parameters"],
                                    "global_batch_size": result.metrics["global_batch_size"]}
    rows = []
    for variant, values in samples.items():
        scoring, _, implementation = variant.partition("@")
        rows.append({"scoring": scoring, "attn_implementation": implementation or "ssa_auto",
                     "tokens_per_second": statistics.median(values), "runs": values, **details[variant]})
    by_variant = {f"{r['scoring']}@{r['attn_implementation']}": r["tokens_per_second"] for r in rows}
    ssa, softmax = by_variant.get("ssa@ssa_auto"), by_variant.get("softmax@ssa_auto")
    ratio = ssa / softmax if ssa and softmax else None
    headers = ["scoring", "attention implementation", "tokens/s (median)", "runs", "relative to softmax (ssa_auto)"]
    table = markdown_table(headers, [
        [r["scoring"], r["attn_implementation"], f"{r['tokens_per_second']:.0f}",
         ", ".join(f"{v:.0f}" for v in r["runs"]), f"{r['tokens_per_second'] / softmax:.3f}" if softmax else "-"]
        for r in rows
    ])
    result = BenchResult(config=asdict(bench), machine=machine_description(), rows=rows, ratio_ssa_over_softmax=ratio,
                         table=table)
    if output_dir is not None:
        out = OutputDir(output_dir, writes=["bench_train.json", "bench_train.md"])
        out.write_json("bench_train.json", asdict(result))
        machine = ", ".join(f"{k} {v}" for k, v in result.machine.items() if v is not None)
        out.write_markdown("bench_train.md", f"# Training throughput: SSA vs softmax\n\nconfig `{bench.config}`, "
                           f"{bench.steps} timed steps after {bench.warmup_steps} warm-up steps, {bench.repeats} runs "
                           f"per variant (median).\n\nMachine: {machine}.\n\n{table}\n\nSSA / softmax (same kernel "
                           f"family, ssa_auto): {ratio:.3f}" if ratio else table)
    return result
