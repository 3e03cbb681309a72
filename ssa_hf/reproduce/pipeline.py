"""`ssa-hf reproduce`: every claim of the paper at a stated scale, through the existing pipelines, into RESULTS.md.

    from ssa_hf.reproduce import load_config, run_reproduce
    summary = run_reproduce(load_config("configs/experiments/reproduce_cpu.yaml"), "outputs/reproduce")

The ICL experiments run through ssa_hf.icl.run_icl (each in OUTPUT/icl/<name>/, with its own report.md), the
language models through ssa_hf.train.pretrain and the evaluations (ssa_hf.reproduce.runs). A progress line is
logged per run; a second call on the same folder reuses every finished run and resumes interrupted trainings.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import time
from pathlib import Path
from types import SimpleNamespace

from ..reporting import OutputDir
from .claims import icl_claim, lm_claims
from .config import ReproduceConfig
from .report import results_markdown
from .runs import data_dir_env, describe_lm_result, lm_specs, run_lm_jobs

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
        seeds = f"{len(icl.seeds)} seed{'s' if len(icl.seeds) != 1 else ''}"
        lines.append(f"icl {name}: tasks {icl.tasks}, scoring {icl.attention_scoring} x {seeds} "
                     f"({len(icl.tasks) * len(icl.attention_scoring) * len(icl.seeds)} runs): {m.layers} layers, {m.heads} heads, "
                     f"width {m.width}, {t.steps} steps, batch {t.batch_size}; primary: {icl.stats.primary.describe()}")
    for kind in ("masked", "causal"):
        experiment = getattr(config, kind)
        if experiment is None:
            continue
        for spec in lm_specs(kind, experiment, config, Path("OUTPUT")):
            train = spec["train"]
            overrides = train.get("model", {}).get("overrides", {})
            shape = f" {overrides}" if overrides else ""
            lines.append(f"{kind} {spec['arm']} seed {spec['seed']}: preset {train['model']['preset']}{shape}, "
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


class Progress:
    """What one call has so far: the claims, the runs finished, and RESULTS.md rewritten after each step, so that
    an interrupted call leaves the table of what finished (a second call resumes the rest)."""

    def __init__(self, config: ReproduceConfig, out: OutputDir, meta: dict, results_file=None):
        self.config, self.out, self.meta, self.results_file = config, out, meta, results_file
        self.started = time.perf_counter()
        self.icl: dict[str, dict] = {}
        self.lm: list[dict] = []
        self.runs = self.reused = 0
        self.pending: list[str] = []

    def minutes(self) -> float:
        return (time.perf_counter() - self.started) / 60

    def lm_result(self, index: int, total: int, result: dict) -> None:
        logger.info("[%d/%d, %.1f min] %s", index, total, self.minutes(), describe_lm_result(result))
        self.lm.append(result)
        self.runs += 1
        self.reused += bool(result.get("reused"))
        self.write()

    def claims(self) -> list[dict]:
        claims = [self.icl[name] for name in self.config.icl if name in self.icl]
        for kind in ("masked", "causal"):
            experiment = getattr(self.config, kind)
            if experiment is not None:
                claims += lm_claims(kind, experiment, [r for r in self.lm if r["kind"] == kind], self.config)
        return claims

    def write(self) -> dict:
        claims = self.claims()
        done = {c["id"] for c in claims}
        pending = [name for name in self.expected_claims() if name not in done]
        summary = {**self.meta, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   "minutes": self.minutes(), "runs": self.runs, "reused": self.reused, "level": self.config.level,
                   "alpha": self.config.alpha, "claims": claims, "pending": pending,
                   "notes": notes(self.config)}
        markdown = results_markdown(summary)
        self.out.write_json("results.json", summary)
        self.out.write_markdown("RESULTS.md", markdown)
        if self.results_file is not None:
            OutputDir(Path(self.results_file).parent).write_markdown(Path(self.results_file).name, markdown)
        return summary

    def expected_claims(self) -> list[str]:
        names = [f"icl_{name}" for name in self.config.icl]
        for kind in ("masked", "causal"):
            experiment = getattr(self.config, kind)
            if experiment is not None:
                names += [f"{kind}_{claim}" for claim in experiment.primary]
        return names


def _finished_icl(folder: Path, icl) -> SimpleNamespace | None:
    """The results.json of an ICL experiment run earlier with this configuration, else None."""
    path = folder / "results.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    ignore = ("workers", "threads", "device")
    same = {k: v for k, v in data["config"].items() if k not in ignore} == {k: v for k, v in icl.to_dict().items() if k not in ignore}
    return SimpleNamespace(config=data["config"], runs=data["runs"], paired=data["paired"]) if same else None


def _run_icl(progress: Progress, report_only: bool) -> None:
    from ..icl import run_icl

    config, out = progress.config, progress.out
    for i, (name, experiment) in enumerate(config.icl.items()):
        icl = icl_config(experiment, config)
        count = len(icl.tasks) * len(icl.attention_scoring) * len(icl.seeds)
        folder = out.path / "icl" / name
        if report_only:
            results = _finished_icl(folder, icl)
        else:
            logger.info("[ICL %d/%d, %.1f min] %s: %d runs (%s x %d seeds)", i + 1, len(config.icl), progress.minutes(),
                        name, count, ",".join(icl.attention_scoring), len(icl.seeds))
            progress.reused += len(list(folder.glob("runs/*/result.json")))  # run_icl reuses them if unchanged
            results = run_icl(icl, folder, progress=False, plots=False)
        if results is None:
            continue
        progress.runs += count
        progress.icl[name] = icl_claim(name, experiment, results, config)
        progress.write()


def interleaved_specs(config: ReproduceConfig, root: Path) -> list[dict]:
    """The language-model runs, seed by seed (both arms of a seed, each kind), so that whatever has finished
    when a call stops holds complete pairs."""
    specs = []
    for kind in ("masked", "causal"):
        if getattr(config, kind) is not None:
            specs += lm_specs(kind, getattr(config, kind), config, root)
    order = {kind: i for i, kind in enumerate(("masked", "causal"))}
    return sorted(specs, key=lambda s: (s["seed_index"], order[s["kind"]], s["arm_index"]))


def _finished_lm(specs: list[dict]) -> list[dict]:
    results = []
    for spec in specs:
        path = Path(spec["run_dir"]) / "result.json"
        if path.is_file():
            result = json.loads(path.read_text())
            if result.get("key") == spec["key"]:
                results.append({**result, "reused": True})
    return results


def run_reproduce(config: ReproduceConfig, output_dir: str | os.PathLike, *, command: str = "ssa-hf reproduce",
                  config_path: str = "", results_file: str | os.PathLike | None = None,
                  report_only: bool = False) -> dict:
    """Run every experiment of `config` into `output_dir`; writes RESULTS.md (and results.json) there after each
    finished step, and a copy of RESULTS.md to `results_file` if given. `report_only`: run nothing, tabulate the
    runs that finished earlier. Returns the summary (claims, rows, verdicts, environment)."""
    config.validate()
    data_dir = str(Path(config.data_dir).expanduser().resolve()) if config.data_dir else None
    with data_dir_env(data_dir):  # the presets' data paths read $SSA_HF_DATA_DIR; restored afterwards
        out = OutputDir(output_dir)
        meta = {"scale": config.scale, "description": config.description, "command": command, "config_path": config_path,
                "environment": environment(), "report_only": report_only}
        progress = Progress(config, out, meta, results_file)
        _run_icl(progress, report_only)
        specs = interleaved_specs(config, out.path)
        if report_only:
            for result in _finished_lm(specs):
                progress.lm.append(result)
                progress.runs += 1
        elif specs:
            logger.info("language models: %d runs (train, then evaluate), %d in parallel", len(specs), config.workers)
            run_lm_jobs(specs, config.workers, progress.lm_result)
        meta["environment"]["load_average_end"] = environment()["load_average"]
        summary = progress.write()
        logger.info("wrote %s (%d claims%s) in %.1f min", out.file("RESULTS.md"), len(summary["claims"]),
                    f"; pending: {', '.join(summary['pending'])}" if summary["pending"] else "", summary["minutes"])
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
