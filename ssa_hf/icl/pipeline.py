"""The ICL experiment end to end: train every (task, scoring function, seed), evaluate under distribution shift,
aggregate across seeds, write results.json, report.md and the plots.

Each run lives in `OUTPUT/runs/<task>-<scoring>-seed<k>/` with its checkpoint and `result.json`; a second call on
the same folder resumes unfinished training (also to more steps) and reuses finished runs whose configuration has
not changed. A run folder that cannot serve the new configuration (other settings, or more steps trained than
asked for) stops the call before anything is trained, with a message that says how to reuse it.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..regular_files import read_json
from ..reporting import OutputDir, atomic_write_json
from .config import EvalConfig, ICLConfig
from .evaluate import baselines_for, evaluate_task, in_distribution_check, model_predictor, probe
from .registry import get_task
from .stats import mean_ci, paired_comparisons
from .train import RunSpec, find_checkpoint, resolve_device, resume_problem, train_run, upgrade_saved_spec

logger = logging.getLogger("ssa_hf.icl")

RESULT = "result.json"


@dataclass
class ICLResults:
    """What `run_icl` returns (and writes to results.json)."""

    config: dict
    runs: list[dict]
    baselines: dict
    summary: dict
    environment: dict
    seconds: float
    files: dict = field(default_factory=dict)
    # comparisons of scoring functions paired by seed, and the declared primary endpoint (stats.paired_comparisons)
    paired: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def failed_runs(self) -> list[str]:
        """Runs that did not pass the in-distribution check."""
        return [r["name"] for r in self.runs if r.get("check") is not None and not r["check"]["passed"]]


def run_specs(config: ICLConfig) -> list[RunSpec]:
    return [
        RunSpec(task, scoring, seed, config.model, config.train)
        for task in config.tasks
        for scoring in config.attention_scoring
        for seed in config.seeds
    ]


def run_folder(runs_dir: Path, spec: RunSpec) -> Path:
    """`runs_dir/<task>-<scoring>-seed<k>`; a run trained before its task was renamed keeps its old folder."""
    folder = runs_dir / spec.name
    if not folder.exists():
        for alias in get_task(spec.task).aliases:
            legacy = runs_dir / f"{alias}-{spec.attention_scoring}-seed{spec.seed}"
            if legacy.is_dir():
                return legacy
    return folder


def _eval_key(spec: RunSpec, eval_cfg: EvalConfig, length: int) -> dict:
    return json.loads(json.dumps({"spec": spec.to_dict(), "eval": asdict(eval_cfg), "length": length}))


def eval_chunk(heads: int, points: int, batch_size: int, budget: int = 2_000_000) -> int:
    """Prompts per forward pass in evaluation: keep one attention tensor near `budget` elements (cache-friendly
    on CPU; materialised attention grows with the square of the prompt length)."""
    return max(1, min(batch_size, budget // (heads * (2 * points) ** 2)))


def run_one(spec: RunSpec, eval_cfg: EvalConfig, length: int, run_dir: str, device: str = "auto",
            threads: int | None = None, progress: bool = True, position: int = 0) -> dict:
    """Train (or resume) and evaluate one run; writes and returns its result. Reuses a finished result."""
    if threads is not None:
        torch.set_num_threads(threads)
    run_dir = Path(run_dir)
    key = _eval_key(spec, eval_cfg, length)
    cached = run_dir / RESULT
    if cached.is_file():
        previous = read_json(cached)
        if isinstance(previous.get("key"), dict) and "spec" in previous["key"]:
            previous["key"]["spec"] = upgrade_saved_spec(previous["key"]["spec"])
        if previous.get("key") == key:
            previous["reused"] = True
            return previous
    device = resolve_device(device)
    model, trained = train_run(spec, run_dir, device=device, progress=progress, position=position)
    started = time.perf_counter()
    model.set_attn_implementation("ssa_eager")  # the same maths; no compilation, and cheapest at these sizes

    def predict(prompts):
        chunk = eval_chunk(spec.model.heads, prompts.points, eval_cfg.batch_size)
        return model_predictor(model, device, chunk)(prompts)

    evaluation = evaluate_task(spec.task, predict, eval_cfg, length)
    quantifier = get_task(spec.task).is_quantifier
    check = in_distribution_check(evaluation, eval_cfg) if quantifier else None
    probe_result = probe(model, spec.task, device) if eval_cfg.probe and quantifier else None
    result = {
        "name": spec.name,
        "task": spec.task,
        "scoring": spec.attention_scoring,
        "seed": spec.seed,
        "key": key,
        "config": spec.to_dict(),
        "train": trained.to_dict(),
        "eval": evaluation,
        "check": check,
        "probe": probe_result,
        "eval_seconds": time.perf_counter() - started,
    }
    atomic_write_json(cached, result)
    return result


def finished_runs(config: ICLConfig, output_dir: str | os.PathLike) -> list[dict]:
    """The runs of `config` that finished earlier in `output_dir` with these settings (result.json with the same
    key), without training anything: what a report of a partly finished experiment can use."""
    runs = []
    for spec in run_specs(config):
        path = run_folder(Path(output_dir) / "runs", spec) / RESULT
        if path.is_file():
            result = read_json(path)
            if isinstance(result.get("key"), dict) and "spec" in result["key"]:
                result["key"]["spec"] = upgrade_saved_spec(result["key"]["spec"])
            if result.get("key") == _eval_key(spec, config.eval, config.eval_length):
                runs.append(result)
    return runs


def _log_result(result: dict) -> None:
    train, check = result["train"], result.get("check")
    verdict = ""
    if check is not None:
        balanced = check["balanced_sequence_error"]
        verdict = (f", individual error {100 * check['individual_error']:.2f}%, balanced sequence error "
                   f"{'n/a' if balanced is None else f'{100 * balanced:.1f}%'} -> "
                   f"{'learned the rule' if check['passed'] else 'DID NOT LEARN THE RULE'}")
    reused = " (finished earlier, reused)" if result.get("reused") else ""
    logger.info("%s: %d steps, loss %s%s%s", result["name"], train["steps"],
                "n/a" if train["final_loss"] is None else f"{train['final_loss']:.4f}", verdict, reused)


def _steps_in_result(run_dir: Path) -> int | None:
    """Steps of a finished run from its result.json (checkpoints of older versions do not record them)."""
    try:
        return int(read_json(run_dir / RESULT)["train"]["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_existing_runs(config: ICLConfig, runs_dir: Path) -> None:
    """Refuse, before anything is trained, run folders that `config` can neither resume nor reuse."""
    problems = []
    for spec in run_specs(config):
        folder = run_folder(runs_dir, spec)
        checkpoint = find_checkpoint(folder)
        if checkpoint is not None:
            problem = resume_problem(checkpoint, spec) or resume_problem(checkpoint, spec, _steps_in_result(folder))
            if problem:
                problems.append(f"  {spec.name}: {problem}")
    if problems:
        raise ValueError(
            f"{runs_dir} holds runs trained with other settings:\n" + "\n".join(problems)
            + "\nReuse them with those settings, or train anew into another --output-dir (or delete those folders)."
        )


def _run_all(config: ICLConfig, out: OutputDir, progress: bool) -> list[dict]:
    specs = run_specs(config)
    runs_dir = out.folder("runs")  # (checked, like every run folder below: a link there is refused, not followed)
    folders = [out.file(run_folder(runs_dir, spec).relative_to(out.path)) for spec in specs]
    check_existing_runs(config, runs_dir)
    args = [
        (spec, config.eval, config.eval_length, str(folder), config.device, config.threads)
        for spec, folder in zip(specs, folders)
    ]
    if config.workers == 1 or len(specs) == 1:
        results = []
        for a in args:
            results.append(run_one(*a, progress=progress))
            _log_result(results[-1])
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if resolve_device(config.device) == "cuda":
        raise ValueError("workers > 1 runs on CPU only; set workers: 1 for a GPU")
    threads = config.threads or max(1, (os.cpu_count() or 1) // config.workers)
    args = [a[:-1] + (threads,) for a in args]
    with ProcessPoolExecutor(config.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        # runs start in order, so run i shares the screen with runs i +- 1: one progress-bar line per worker
        futures = [pool.submit(run_one, *a, progress=progress, position=i % config.workers) for i, a in enumerate(args)]
        results = []
        for future in futures:
            results.append(future.result())
            _log_result(results[-1])
        return results


def _aggregate_cells(cells_per_seed: list[list[dict]], metric: str, bounds) -> list[dict]:
    return [mean_ci([cells[i][metric] for cells in cells_per_seed], bounds=bounds) for i in range(len(cells_per_seed[0]))]


def _aggregate_positions(cells_per_seed: list[list[dict]], bounds) -> list[list[dict]]:
    out = []
    for i in range(len(cells_per_seed[0])):
        positions = len(cells_per_seed[0][i]["per_position"])
        out.append([mean_ci([cells[i]["per_position"][p] for cells in cells_per_seed], bounds=bounds) for p in range(positions)])
    return out


def aggregate(task: str, evaluations: list[dict]) -> dict:
    """Mean and 95% interval across seeds of every figure of `task` (evaluations: one per seed, or one baseline)."""
    if not get_task(task).is_quantifier:
        grids = [e["grid"] for e in evaluations]
        rows, cols = len(grids[0]["sigmas_x"]), len(grids[0]["sigmas_ab"])
        return {
            "grid": {
                "length": grids[0]["length"],
                "sigmas_x": grids[0]["sigmas_x"],
                "sigmas_ab": grids[0]["sigmas_ab"],
                "mse": [[mean_ci([g["mse"][r][c] for g in grids], bounds=(0.0, float("inf"))) for c in range(cols)] for r in range(rows)],
            }
        }
    unit = (0.0, 1.0)
    out = {}
    for sweep in ("sigma_sweep", "length_sweep"):
        first = evaluations[0][sweep]
        entry = {k: v for k, v in first.items() if k not in ("standard", "balanced")}
        for test_set in ("standard", "balanced"):
            if test_set not in first:
                continue
            cells = [e[sweep][test_set] for e in evaluations]
            entry[test_set] = {
                "sequence_error": _aggregate_cells(cells, "sequence_error", unit),
                "individual_error": _aggregate_cells(cells, "individual_error", unit),
                "per_position": _aggregate_positions(cells, unit),
            }
        out[sweep] = entry
    return out


def _aggregate_probe(probes: list[dict]) -> dict:
    layers = len(probes[0]["large_token_weight"])
    return {
        "tokens": probes[0]["tokens"],
        "labels": probes[0]["labels"],
        "correct_per_position": [sum(p["correct"][i] for p in probes) / len(probes) for i in range(len(probes[0]["correct"]))],
        "outputs": [p["outputs"] for p in probes],
        "large_token_weight": [
            mean_ci([sum(p["large_token_weight"][layer]) / len(p["large_token_weight"][layer]) for p in probes], bounds=(0.0, 1.0))
            for layer in range(layers)
        ],
    }


def summarise(config: ICLConfig, runs: list[dict]) -> tuple[dict, dict]:
    """(baselines, summary): the baselines' figures per task and every scoring function's figures across seeds."""
    baselines, summary = {}, {}
    for task in config.tasks:
        baselines[task] = {
            name: aggregate(task, [evaluate_task(task, fn, config.eval, config.eval_length)])
            for name, fn in baselines_for(task).items()
        }
        summary[task] = {}
        for scoring in config.attention_scoring:
            task_runs = [r for r in runs if r["task"] == task and r["scoring"] == scoring]
            entry = aggregate(task, [r["eval"] for r in task_runs])
            entry["seeds"] = [r["seed"] for r in task_runs]
            entry["train_seconds"] = mean_ci([r["train"]["train_seconds"] for r in task_runs])
            entry["seconds_per_step"] = mean_ci([r["train"]["seconds_per_step"] or 0.0 for r in task_runs])
            if get_task(task).is_quantifier:
                entry["passed"] = sum(bool(r["check"]["passed"]) for r in task_runs)
                if all(r.get("probe") for r in task_runs):
                    entry["probe"] = _aggregate_probe([r["probe"] for r in task_runs])
            summary[task][scoring] = entry
    return baselines, summary


def environment() -> dict:
    import accelerate
    import transformers

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _cpu_seconds() -> float | None:
    """CPU time (user + system) of this process and of its finished child processes (the workers)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def run_icl(config: ICLConfig, output_dir: str | os.PathLike, progress: bool = True, plots: bool = True) -> ICLResults:
    """Run the whole experiment into `output_dir` (results.json, report.md, PNG plots, runs/)."""
    from .report import write_plots, write_report

    config.validate()
    started, cpu_started, load_before = time.perf_counter(), _cpu_seconds(), _load_average()
    out = OutputDir(output_dir, "ICL output folder", owned=True)  # (a link leading out of it: refused at once)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    runs = _run_all(config, out, progress)
    baselines, summary = summarise(config, runs)
    results = ICLResults(
        config=config.to_dict(),
        runs=[{k: v for k, v in r.items() if k not in ("key", "reused")} for r in runs],
        baselines=baselines,
        summary=summary,
        environment=environment(),
        seconds=0.0,
        paired=paired_comparisons(config, runs),
    )
    if plots:
        results.files["plots"] = [str(p) for p in write_plots(results, out)]
    results.seconds = time.perf_counter() - started
    cpu = _cpu_seconds()
    results.environment["cpu_seconds"] = None if cpu is None or cpu_started is None else cpu - cpu_started
    # the machine's 1-minute load average before and after (other users' work slows a shared machine down)
    results.environment["load_average"] = [load_before, _load_average()]
    results.files["report"] = str(write_report(results, out))
    results.files["results"] = str(out.file("results.json"))
    out.write_json("results.json", results.to_dict())
    return results
