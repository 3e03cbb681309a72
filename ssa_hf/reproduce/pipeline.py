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

from ..regular_files import read_json
from ..options import ConfigError
from ..reporting import OutputDir, atomic_write_json
from .claims import apply_multiplicity, expected_claims, icl_baseline_evaluations, icl_claims, icl_settings, lm_claims
from .config import ReproduceConfig
from .report import figures_from_summary, results_markdown
from .runs import data_dir_env, describe_lm_result, lm_specs, run_units, uses_launch

logger = logging.getLogger("ssa_hf.reproduce")

# RESULTS.md's figures, per claim, beside the RESULTS.md written with --results-file (the docs' tests read it)
SUMMARY_FILE = "results_summary.json"


def icl_config(experiment, config: ReproduceConfig, seeds: list[int] | None = None):
    """The ssa_hf.icl config of one experiment with `seeds` (default: its confirmatory then exploratory seeds);
    the reproduce config's workers, threads and device apply unless the experiment sets its own."""
    from ..icl import config_from_dict

    data = dict(experiment.config)
    data["seeds"] = list(experiment.seeds.confirmatory) + list(experiment.seeds.exploratory) if seeds is None else seeds
    data.setdefault("workers", config.workers)
    data.setdefault("threads", config.threads)
    data.setdefault("device", config.device)
    return config_from_dict(data)


def plan(config: ReproduceConfig) -> list[str]:
    """One line per run group and claim this config makes (what `--plan` and `--scale paper` print)."""
    lines = []
    for name, experiment in config.icl.items():
        icl = icl_config(experiment, config)
        m, t = icl.model, icl.train
        seeds = experiment.seeds
        lines.append(f"icl {name}: tasks {icl.tasks}, scoring {icl.attention_scoring} x {len(seeds.confirmatory)} "
                     f"confirmatory + {len(seeds.exploratory)} exploratory seeds "
                     f"({len(icl.tasks) * len(icl.attention_scoring) * len(icl.seeds)} runs): {m.backbone} backbone, "
                     f"{m.layers} layers, {m.heads} heads, width {m.width}, {t.steps} steps, batch {t.batch_size}")
        for claim_name, claim in experiment.claims.items():
            lines.append(f"icl {name} claim {claim_name}: primary {_describe_endpoint(claim.primary)}")
    for kind in ("masked", "causal"):
        experiment = getattr(config, kind)
        if experiment is None:
            continue
        for spec in lm_specs(kind, experiment, config, Path("OUTPUT")):
            train = spec["train"]
            overrides = train.get("model", {}).get("overrides", {})
            shape = f" {overrides}" if overrides else ""
            lines.append(f"{kind} {spec['arm']} seed {spec['seed']} "
                         f"({'confirmatory' if spec['seed'] in experiment.seeds.confirmatory else 'exploratory'}): "
                         f"preset {train['model']['preset']}{shape}, {train['max_steps']} steps, "
                         f"evaluations {sorted(k for k, v in experiment.evaluation.items() if v)}")
        for claim_name, claim in experiment.claims.items():
            lines.append(f"{kind} claim {claim_name}: primary {_describe_endpoint(claim.primary)}, "
                         f"{experiment.treatment} minus {experiment.control}")
    return lines


def launch_lines(config: ReproduceConfig) -> list[str]:
    """How the runs are started (what --plan prints first)."""
    lines = [f"workers: {config.workers} runs at a time"
             + (f", one per device of {', '.join(config.devices)}" if config.devices else f" (device {config.device})")]
    kinds = ", ".join((config.launch or {}).get("kinds") or ["masked", "causal"])
    if uses_launch(config.launch):
        lines.append(f"{kinds} trainings: `accelerate launch --config_file {config.launch['config_file']} "
                     f"--num_processes {config.launch['num_processes']}`, one run after the other")
    elif config.launch:
        lines.append(f"{kinds} trainings: launch {config.launch} (num_processes null: every visible GPU; "
                     "one process trains in the worker's process)")
    return lines


def _describe_endpoint(endpoint) -> str:
    from .claims import _icl_label

    label = _icl_label(endpoint) if endpoint.sweep or endpoint.metric in ("sequence_error", "mse", "log_mse_ratio") \
        else endpoint.label or endpoint.metric
    return (f"{label} ({endpoint.treatment} minus {endpoint.control} expected "
            f"{endpoint.direction}; {endpoint.test} test, {endpoint.interval} interval)")


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
        self.started = self.group_started = time.perf_counter()
        self.icl: dict[str, list[dict]] = {}
        self.lm: list[dict] = []
        self.runs = self.reused = 0

    def minutes(self) -> float:
        return (time.perf_counter() - self.started) / 60

    def lm_result(self, index: int, total: int, result: dict) -> None:
        elapsed = (time.perf_counter() - self.group_started) / 60
        left = elapsed / index * (total - index) if index else 0.0
        logger.info("[%d/%d, %.1f min, about %.0f min left in this group] %s", index, total, self.minutes(), left,
                    describe_lm_result(result))
        self.lm = [r for r in self.lm if (r["kind"], r["arm"], r["seed"]) != (result["kind"], result["arm"], result["seed"])]
        self.lm.append(result)
        self.runs += 1
        self.reused += bool(result.get("reused"))
        self.write()

    def claims(self) -> list[dict]:
        claims = [c for name in self.config.icl for c in self.icl.get(name, [])]
        for kind in ("masked", "causal"):
            experiment = getattr(self.config, kind)
            if experiment is not None:
                claims += lm_claims(kind, experiment, [r for r in self.lm if r["kind"] == kind], self.config)
        apply_multiplicity(claims, self.config)
        return claims

    def write(self) -> dict:
        claims = self.claims()
        done = {c["id"] for c in claims}
        pending = [name for name in expected_claims(self.config) if name not in done]
        summary = {**self.meta, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   "minutes": self.minutes(), "runs": self.runs, "reused": self.reused, "level": self.config.level,
                   "alpha": self.config.alpha, "multiplicity": self.config.multiplicity, "claims": claims,
                   "pending": pending, "notes": notes(self.config)}
        markdown = results_markdown(summary)
        self.out.write_json("results.json", summary)
        self.out.write_markdown("RESULTS.md", markdown)
        figures = figures_from_summary(summary)  # everything results.md's claims part renders from
        self.out.write_json(SUMMARY_FILE, figures)
        if self.results_file is not None:
            folder = OutputDir(Path(self.results_file).parent)
            folder.write_markdown(Path(self.results_file).name, markdown)
            atomic_write_json(folder.file(SUMMARY_FILE), figures)
        return summary


def icl_units(config: ReproduceConfig, root: Path, seeds_kind: str | None = None) -> list[dict]:
    """One independent unit per ICL run (task, arm, seed) of every experiment, in its own folder
    (`root/icl/<name>/runs/<task>-<arm>-seed<k>`); seeds_kind: confirmatory, exploratory or both (None)."""
    from ..icl.pipeline import run_folder, run_specs

    units = []
    threads = config.threads or max(1, (os.cpu_count() or 1) // max(1, config.workers))
    for name, experiment in config.icl.items():
        seeds = None if seeds_kind is None else list(getattr(experiment.seeds, seeds_kind))
        if seeds == []:
            continue
        icl = icl_config(experiment, config, seeds)
        for spec in run_specs(icl):
            run_dir = run_folder(root / "icl" / name / "runs", spec)
            units.append({"type": "icl", "id": f"icl/{name}/{spec.name}", "experiment": name, "threads": threads,
                          "device": icl.device, "args": (spec, icl.eval, icl.eval_length, str(run_dir))})
    return units


def all_units(config: ReproduceConfig, root: Path, confirmatory_only: bool = False) -> list[dict]:
    """Every run of `config` as an independent unit: ICL then language models, confirmatory seeds first."""
    kinds = ["confirmatory"] + ([] if confirmatory_only else ["exploratory"])
    return ([u for k in kinds for u in icl_units(config, root, k)]
            + [u for k in kinds for u in _specs(config, root, k)])


def _run_icl_units(progress: Progress, units: list[dict], confirmatory_only: bool) -> None:
    """ICL runs as units on the workers' devices (--devices), then each experiment's own report (run_icl reuses
    every finished run)."""
    from ..icl import run_icl
    from ..icl.pipeline import check_existing_runs

    config, out = progress.config, progress.out
    for name, experiment in config.icl.items():
        check_existing_runs(icl_config(experiment, config), out.path / "icl" / name / "runs")

    def report(index, total, result):
        logger.info("[ICL %d/%d, %.1f min] %s%s", index, total, progress.minutes(), result.get("name"),
                    " (finished earlier, reused)" if result.get("reused") else "")
        progress.runs += 1
        progress.reused += bool(result.get("reused"))

    run_units(units, config.workers, report, config.devices)
    for name, experiment in config.icl.items():
        run_icl(_icl_for_report(experiment, config, confirmatory_only), out.path / "icl" / name, progress=False,
                plots=False)
        _tabulate_icl(progress, name, experiment)


def _icl_for_report(experiment, config: ReproduceConfig, confirmatory_only: bool):
    """The experiment's ICL config for its report: every run is finished, so one worker reuses them all."""
    icl = icl_config(experiment, config, list(experiment.seeds.confirmatory) if confirmatory_only else None)
    icl.workers = 1
    return icl


def _run_icl(progress: Progress, report_only: bool, confirmatory_only: bool) -> None:
    """Every ICL experiment: its confirmatory runs first (all experiments), then the exploratory ones."""
    from ..icl import run_icl
    from ..icl.pipeline import finished_runs

    config, out = progress.config, progress.out
    if config.devices and not report_only:
        units = [u for k in ["confirmatory"] + ([] if confirmatory_only else ["exploratory"])
                 for u in icl_units(config, out.path, k)]
        _run_icl_units(progress, units, confirmatory_only)
        return
    passes = [("confirmatory", lambda e: list(e.seeds.confirmatory))]
    if not confirmatory_only:
        passes.append(("exploratory", lambda e: list(e.seeds.exploratory)))
    for kind, seeds_of in ([] if report_only else passes):
        for i, (name, experiment) in enumerate(config.icl.items()):
            seeds = seeds_of(experiment)
            if not seeds:
                continue
            icl = icl_config(experiment, config, seeds)
            count = len(icl.tasks) * len(icl.attention_scoring) * len(icl.seeds)
            logger.info("[ICL %s %d/%d, %.1f min] %s: %d runs (%s x %d seeds)", kind, i + 1, len(config.icl),
                        progress.minutes(), name, count, ",".join(icl.attention_scoring), len(icl.seeds))
            progress.reused += len(finished_runs(icl, out.path / "icl" / name))  # run_icl reuses them
            run_icl(icl, out.path / "icl" / name, progress=False, plots=False)
            progress.runs += count
            _tabulate_icl(progress, name, experiment)
    for name, experiment in config.icl.items():
        _tabulate_icl(progress, name, experiment)


def _tabulate_icl(progress: Progress, name: str, experiment) -> None:
    """The claims of one ICL experiment from every finished run in its folder (confirmatory and exploratory)."""
    from ..icl.pipeline import finished_runs

    icl = icl_config(experiment, progress.config)
    runs = finished_runs(icl, progress.out.path / "icl" / name)
    progress.icl[name] = icl_claims(name, experiment, runs, icl_baseline_evaluations(icl), icl_settings(icl),
                                    progress.config) if runs else []
    progress.write()


def _specs(config: ReproduceConfig, root: Path, kind_of_seeds: str) -> list[dict]:
    """The language-model runs of one kind of seeds, seed by seed (both arms of a seed, each kind), so that
    whatever has finished when a call stops holds complete pairs."""
    specs = []
    for kind in ("masked", "causal"):
        experiment = getattr(config, kind)
        if experiment is not None:
            specs += lm_specs(kind, experiment, config, root, list(getattr(experiment.seeds, kind_of_seeds)))
    order = {kind: i for i, kind in enumerate(("masked", "causal"))}
    return sorted(specs, key=lambda s: (s["seed_index"], order[s["kind"]], s["arm_index"]))


def _finished_lm(specs: list[dict]) -> list[dict]:
    results = []
    for spec in specs:
        path = Path(spec["run_dir"]) / "result.json"
        if path.is_file():
            result = read_json(path)
            if result.get("key") == spec["key"]:
                results.append({**result, "reused": True})
    return results


def run_reproduce(config: ReproduceConfig, output_dir: str | os.PathLike, *, command: str = "ssa-hf reproduce",
                  config_path: str = "", results_file: str | os.PathLike | None = None,
                  report_only: bool = False, confirmatory_only: bool = False, commit: str | None = None,
                  note: str | None = None, units: list[str] | None = None) -> dict:
    """Run every experiment of `config` into `output_dir`: the confirmatory runs of every experiment first, then
    (unless `confirmatory_only`) the exploratory ones; writes RESULTS.md, results.json and results_summary.json
    there after each finished step, and RESULTS.md (with results_summary.json beside it) to `results_file` if
    given. `report_only`: run nothing, tabulate the runs that finished earlier; `note`: a sentence for the header
    (how and where the runs were made). Returns the summary. `units`: run only these runs (ids as
    `all_units` names them, e.g. from --emit-commands), write no report, return {"units": their results}.
    Every setting that can be checked before the first step is (`checks.preflight`): a problem stops the call
    with a ConfigError before anything runs."""
    from .checks import preflight

    config.validate()
    data_dir = str(Path(config.data_dir).expanduser().resolve()) if config.data_dir else None
    with data_dir_env(data_dir):  # the presets' data paths read $SSA_HF_DATA_DIR; restored afterwards
        if not report_only:
            preflight(config)
        out = OutputDir(output_dir, "reproduce output folder", owned=True)  # (a link leading out: refused at once)
        if units is not None:
            return {"units": _run_named_units(config, out.path, units)}
        meta = {"scale": config.scale, "description": config.description, "command": command, "config_path": config_path,
                "environment": environment(), "report_only": report_only, "commit": commit or source_commit(),
                "note": note}
        progress = Progress(config, out, meta, results_file)
        _run_icl(progress, report_only, confirmatory_only)
        every = _specs(config, out.path, "confirmatory") + _specs(config, out.path, "exploratory")
        for result in _finished_lm(every):
            progress.lm.append(result)
        if not report_only:
            groups = [("confirmatory", _specs(config, out.path, "confirmatory"))]
            if not confirmatory_only:
                groups.append(("exploratory", _specs(config, out.path, "exploratory")))
            for kind, specs in groups:
                if specs:
                    logger.info("language models, %s seeds: %d runs (train, then evaluate), %d in parallel", kind,
                                len(specs), config.workers)
                    progress.group_started = time.perf_counter()
                    run_units(specs, config.workers, progress.lm_result, config.devices, config.launch)
        meta["environment"]["load_average_end"] = environment()["load_average"]
        summary = progress.write()
        logger.info("wrote %s (%d claims%s) in %.1f min", out.file("RESULTS.md"), len(summary["claims"]),
                    f"; pending: {', '.join(summary['pending'])}" if summary["pending"] else "", summary["minutes"])
    return summary


def _run_named_units(config: ReproduceConfig, root: Path, names: list[str]) -> list[dict]:
    """The units named (one cluster job each, --unit), one after the other in this process."""
    every = {u["id"]: u for u in all_units(config, root)}
    unknown = [n for n in names if n not in every]
    if unknown:
        raise ConfigError(f"--unit: unknown run(s) {unknown}; this config's runs are named like "
                          f"{', '.join(list(every)[:3])} (--emit-commands DIR lists them all)")
    chosen = [every[n] for n in names]
    icl = {u["experiment"] for u in chosen if u["type"] == "icl"}
    if icl:
        from ..icl.pipeline import check_existing_runs

        for name in icl:
            check_existing_runs(icl_config(config.icl[name], config), root / "icl" / name / "runs")

    def report(index, total, result):
        logger.info("[%d/%d] %s", index, total, describe_lm_result(result) if "kind" in result else result.get("name"))

    return run_units(chosen, 1, report, None, config.launch)


SLURM_SCRIPT = """#!/bin/bash
# One SLURM array task per run of {config}: `sbatch {folder}/slurm_array.sh` (edit the #SBATCH lines for your
# cluster: a GPU per ICL task; a language-model run under `launch` uses the node's GPUs). Each run is independent,
# in its own folder under {output}; a preempted task resumes where it stopped when it runs again
# (`scontrol requeue`, or the same sbatch). When every task has finished: bash {folder}/report.sh
#SBATCH --job-name=ssa-hf-reproduce
#SBATCH --array=1-{count}
#SBATCH --output={folder}/logs/%A_%a.out
#SBATCH --requeue
#SBATCH --gres=gpu:1
set -euo pipefail
line=$(sed -n "${{SLURM_ARRAY_TASK_ID}}p" {folder}/commands.txt)
echo "$line"
eval "$line"
"""


def emit_commands(config: ReproduceConfig, output_dir: str | os.PathLike, folder: str | os.PathLike,
                  confirmatory_only: bool = False, program: str = "ssa-hf") -> dict:
    """Write, for a cluster scheduler: `folder/reproduce.yaml` (this config, as run), `commands.txt` (one
    `ssa-hf reproduce --unit ID` command per run), `slurm_array.sh` (a SLURM job array running line i as task
    i) and `report.sh` (RESULTS.md from the finished runs: --report-only). Returns {"count", "files"}."""
    import shlex

    import yaml

    from .checks import preflight
    from .config import config_to_dict

    target = OutputDir(folder, "commands folder")
    target.folder("logs", owned=False)  # (SLURM opens each task's --output file before the script runs)
    out = Path(output_dir).expanduser().resolve()
    data_dir = str(Path(config.data_dir).expanduser().resolve()) if config.data_dir else None
    with data_dir_env(data_dir):
        preflight(config)
    config_path = target.file("reproduce.yaml")
    header = "# written by `ssa-hf reproduce --emit-commands`: the config the commands beside it run\n"
    config_path.write_text(header + yaml.safe_dump(config_to_dict(config), sort_keys=False), encoding="utf-8")
    units = all_units(config, out, confirmatory_only)
    base = f"{program} reproduce --config {shlex.quote(str(config_path))} --output-dir {shlex.quote(str(out))}"
    lines = [f"{base} --unit {shlex.quote(u['id'])}" for u in units]
    target.file("commands.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    quoted = shlex.quote(str(target.path))
    target.file("slurm_array.sh").write_text(SLURM_SCRIPT.format(config=config_path.name, folder=quoted,
                                                                 output=shlex.quote(str(out)), count=len(units)),
                                             encoding="utf-8")
    target.file("report.sh").write_text(f"#!/bin/bash\nset -euo pipefail\n{base} --report-only\n", encoding="utf-8")
    return {"count": len(units), "files": [str(target.file(n)) for n in
                                           ("reproduce.yaml", "commands.txt", "slurm_array.sh", "report.sh")]}


def source_commit() -> str | None:
    """The git commit of the source tree that runs (None outside a checkout), with '+changes' if it is dirty."""
    import subprocess

    root = Path(__file__).resolve().parents[2]  # the checkout holding ssa_hf/ (an installed package has no .git)
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+changes" if dirty else "") if commit else None


def notes(config: ReproduceConfig) -> list[str]:
    """What differs from the paper at this scale, stated in RESULTS.md."""
    out = []
    if config.causal is not None:
        lm_eval = config.causal.evaluation.get("lm_eval") or {}
        missing = [t for t in ("winogrande", "copa", "cb", "record") if t not in (lm_eval.get("tasks") or [])]
        if missing:
            out.append("lm-eval: the paper's table has eight tasks (arc_easy, arc_challenge, boolq, hellaswag, winogrande, "
                       "copa, cb acc / f1, ReCoRD f1 / em); the data folder holds no copy of "
                       f"{', '.join(missing)}, so offline they are not run here (`ssa-hf eval --tasks paper` runs all eight "
                       "where the Hub is reachable).")
        out.append("Perplexity 'in distribution' is the held-out documents of the decoder's training corpus "
                   "(web text, the offline stand-in for FineWeb-Edu); 'out of distribution' is the configured "
                   "corpus (WikiText, Wikipedia text, for the paper's Wikipedia windows).")
    if config.masked is not None:
        best_of = any(e.best_of for c in config.masked.claims.values() for e in c.secondary)
        out.append("Zorro: holistic scoring (BabyBERTa's), ties broken at random as Zorro does; the paper reports "
                   "its best SSA variant per paradigm, ours decides on one SSA setting declared in the config"
                   + (" (the best-of row, chosen per paradigm on the same figures, is exploratory)." if best_of else "."))
    return [n for n in out if n]
