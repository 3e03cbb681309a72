"""`ssa-hf reproduce`: every claim of the paper at a stated scale, through the existing pipelines, into RESULTS.md.

    from ssa_hf.reproduce import load_config, run_reproduce
    summary = run_reproduce(load_config("configs/experiments/reproduce_cpu.yaml"), "outputs/reproduce")

The ICL experiments run through ssa_hf.icl.run_icl (each in OUTPUT/icl/<name>/, with its own report.md), the
language models through ssa_hf.train.pretrain and the evaluations (ssa_hf.reproduce.runs). A progress line is
logged per run; a second call on the same folder reuses every finished run and resumes interrupted trainings.
"""

from __future__ import annotations

import datetime
import logging
import os
import platform
import time
from pathlib import Path

from ..reporting import OutputDir
from .claims import icl_claim, lm_claims
from .config import ReproduceConfig
from .report import results_markdown
from .runs import describe_lm_result, lm_specs, run_lm_jobs

logger = logging.getLogger("ssa_hf.reproduce")


def icl_config(experiment, config: ReproduceConfig):
    """The ssa_hf.icl config of one experiment; the reproduce config's workers, threads and device apply unless
    the experiment sets its own."""
    from ..icl import config_from_dict

    data = dict(experiment.config)
    data.setdefault("workers", config.workers)
    data.setdefault("threads", config.threads)
    data.setdefault("device", config.device)
    return config_from_dict(data)


def plan(config: ReproduceConfig) -> list[str]:
    """One line per run this config makes (what `--scale paper` prints)."""
    lines = []
    for name, experiment in config.icl.items():
        icl = icl_config(experiment, config)
        m, t = icl.model, icl.train
        lines.append(f"icl {name}: tasks {icl.tasks}, scoring {icl.scoring} x {len(icl.seeds)} seeds "
                     f"({len(icl.tasks) * len(icl.scoring) * len(icl.seeds)} runs): {m.layers} layers, {m.heads} heads, "
                     f"width {m.width}, {t.steps} steps, batch {t.batch_size}; primary: {icl.stats.primary.describe()}")
    for kind in ("masked", "causal"):
        experiment = getattr(config, kind)
        if experiment is None:
            continue
        for spec in lm_specs(kind, experiment, config, Path("OUTPUT")):
            train = spec["train"]
            overrides = train.get("model", {}).get("overrides", {})
            lines.append(f"{kind} {spec['arm']} seed {spec['seed']}: preset {train['model']['preset']} {overrides or ''}, "
                         f"{train['max_steps']} steps, evaluations {sorted(k for k, v in experiment.evaluation.items() if v)}")
        for claim, endpoint in experiment.primary.items():
            lines.append(f"{kind} claim {claim}: primary {endpoint.metric}, {experiment.treatment} minus "
                         f"{experiment.control} expected {endpoint.direction} ({endpoint.interval} interval)")
    return lines


def environment() -> dict:
    import torch
    import transformers

    try:
        import lm_eval

        lm_eval_version = lm_eval.__version__
    except ImportError:
        lm_eval_version = None
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "lm_eval": lm_eval_version, "load_average": load,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _progress_line(started: float):
    def report(index: int, total: int, result: dict) -> None:
        logger.info("[%d/%d, %.1f min] %s", index, total, (time.perf_counter() - started) / 60, describe_lm_result(result))
    return report


def _run_icl(config: ReproduceConfig, out: OutputDir, started: float) -> tuple[list[dict], int, int]:
    from ..icl import run_icl

    claims, runs, reused = [], 0, 0
    for i, (name, experiment) in enumerate(config.icl.items()):
        icl = icl_config(experiment, config)
        count = len(icl.tasks) * len(icl.scoring) * len(icl.seeds)
        logger.info("[ICL %d/%d, %.1f min] %s: %d runs (%s x %d seeds)", i + 1, len(config.icl),
                    (time.perf_counter() - started) / 60, name, count, ",".join(icl.scoring), len(icl.seeds))
        folder = out.path / "icl" / name
        reused += len(list(folder.glob("runs/*/result.json")))  # finished earlier (run_icl reuses them if unchanged)
        results = run_icl(icl, folder, progress=False, plots=False)
        runs += count
        claims.append(icl_claim(name, experiment, results, config))
    return claims, runs, reused


def run_reproduce(config: ReproduceConfig, output_dir: str | os.PathLike, *, command: str = "ssa-hf reproduce",
                  config_path: str = "", results_file: str | os.PathLike | None = None) -> dict:
    """Run every experiment of `config` into `output_dir`; writes RESULTS.md (and results.json) there, and a copy
    of RESULTS.md to `results_file` if given. Returns the summary (claims, rows, verdicts, environment)."""
    config.validate()
    if config.data_dir:
        os.environ["SSA_HF_DATA_DIR"] = str(Path(config.data_dir).expanduser().resolve())
    started = time.perf_counter()
    out = OutputDir(output_dir)
    env = environment()
    claims, runs, reused = _run_icl(config, out, started)
    specs = []
    for kind in ("masked", "causal"):
        if getattr(config, kind) is not None:
            specs += lm_specs(kind, getattr(config, kind), config, out.path)
    if specs:
        logger.info("language models: %d runs (train, then evaluate), %d in parallel", len(specs), config.workers)
    results = run_lm_jobs(specs, config.workers, _progress_line(started))
    runs += len(results)
    reused += sum(1 for r in results if r.get("reused"))
    for kind in ("masked", "causal"):
        experiment = getattr(config, kind)
        if experiment is not None:
            claims += lm_claims(kind, experiment, [r for r in results if r["kind"] == kind], config)
    env["load_average_end"] = environment()["load_average"]
    summary = {"scale": config.scale, "description": config.description, "command": command,
               "config_path": config_path, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "minutes": (time.perf_counter() - started) / 60, "runs": runs, "reused": reused, "level": config.level,
               "alpha": config.alpha, "environment": env, "claims": claims, "notes": notes(config)}
    markdown = results_markdown(summary)
    out.write_json("results.json", summary)
    out.write_markdown("RESULTS.md", markdown)
    if results_file is not None:
        OutputDir(Path(results_file).parent).write_markdown(Path(results_file).name, markdown)
    logger.info("wrote %s (%d claims) in %.1f min", out.file("RESULTS.md"), len(claims), summary["minutes"])
    return summary


def notes(config: ReproduceConfig) -> list[str]:
    """What differs from the paper at this scale, stated in RESULTS.md."""
    out = []
    if config.causal is not None:
        lm_eval = config.causal.evaluation.get("lm_eval") or {}
        out.append("lm-eval: the paper also reports winogrande and copa; ../shared/data holds no copy, so offline "
                   "they do not run (`ssa-hf eval --tasks paper` runs them where the Hub is reachable)."
                   if "winogrande" not in (lm_eval.get("tasks") or []) else "")
        out.append("Perplexity 'in distribution' is the held-out documents of the decoder's training corpus "
                   "(web text, the offline stand-in for FineWeb-Edu); 'out of distribution' is the configured "
                   "corpus (WikiText, Wikipedia text, for the paper's Wikipedia windows).")
    if config.masked is not None:
        out.append("Zorro: holistic scoring (BabyBERTa's), ties broken at random as Zorro does; the paper reports "
                   "its best SSA variant per paradigm, ours is one SSA setting declared in the config.")
    return [n for n in out if n]
