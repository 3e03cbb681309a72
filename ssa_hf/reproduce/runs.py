"""The runs of `ssa-hf reproduce`, each through an existing pipeline: ssa_hf.icl.run_icl for the ICL experiments,
ssa_hf.train.pretrain for the language models, then ssa_hf.evaluation (Zorro, lm-eval) and window perplexity.

Every language-model run lives in `OUTPUT/<kind>/<arm>-seed<k>/` (train/ is the pretraining run folder, zorro/,
perplexity/, lm_eval/ the evaluations, result.json the figures). A second call reuses what finished: result.json
when its settings are unchanged, a finished training (final/), and resumes an interrupted one from its latest
checkpoint. A folder trained with other settings stops the call with a message instead of being mixed in.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..regular_files import read_json
from ..reporting import atomic_write_bytes, atomic_write_json, open_for_append
from ..options import deep_merge, load_yaml
from .config import LMExperiment, ReproduceConfig

logger = logging.getLogger("ssa_hf.reproduce")

RESULT, TRAIN_KEY = "result.json", "train_key.json"


def _key(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resolve_path(path: str) -> Path:
    """A config path: absolute, or relative to the working directory, else (configs/...) the shipped copy."""
    from ..data.sources import expand_path
    from ..resources import config_file

    return config_file(expand_path(path))


def pretrain_values(experiment: LMExperiment, arm: str, seed: int, run_dir: Path, threads: int | None) -> dict:
    """The pretraining config (a mapping) of one (arm, seed) run: the file, the overrides, the arm's keys."""
    values = deep_merge(deep_merge(load_yaml(resolve_path(experiment.pretrain)), experiment.overrides),
                        experiment.arms[arm])
    values.update(seed=seed, output_dir=str(run_dir / "train"), report_to=["none"], resume="auto",
                  run_name=f"{arm}-seed{seed}")
    if threads is not None:
        values["cpu_threads"] = threads
    return values


def lm_specs(kind: str, experiment: LMExperiment, config: ReproduceConfig, root: Path,
             seeds: list[int] | None = None) -> list[dict]:
    """One picklable job description per (arm, seed) of `experiment` (every arm: the control, the treatment, then
    the others, e.g. a second SSA setting for secondary endpoints; `seeds`: those seeds, by default the
    confirmatory then the exploratory ones). `id` names the run as `--unit` and --emit-commands do."""
    specs = []
    seeds = list(experiment.seeds.confirmatory) + list(experiment.seeds.exploratory) if seeds is None else seeds
    arms = [experiment.control, experiment.treatment] + [a for a in experiment.arms
                                                         if a not in (experiment.control, experiment.treatment)]
    for arm_index, arm in enumerate(arms):
        for seed_index, seed in enumerate(seeds):
            run_dir = root / kind / f"{arm}-seed{seed}"
            train = pretrain_values(experiment, arm, seed, run_dir, config.threads)
            specs.append({"type": "lm", "id": f"{kind}/{arm}-seed{seed}", "kind": kind, "arm": arm, "seed": seed,
                          "run_dir": str(run_dir), "train": train,
                          "arm_index": arm_index, "seed_index": seed_index,
                          "evaluation": experiment.evaluation, "data_dir": config.data_dir, "threads": config.threads,
                          "key": _key({"train": {k: v for k, v in train.items() if k != "resume"},
                                       "evaluation": experiment.evaluation})})
    return specs


def check_train_folders(specs: list[dict]) -> None:
    """Refuse, before anything runs, a run folder whose training used other settings."""
    problems = []
    for spec in specs:
        marker = Path(spec["run_dir"]) / TRAIN_KEY
        if marker.is_file() and read_json(marker).get("key") != _train_key(spec):
            problems.append(f"  {spec['run_dir']}")
    if problems:
        raise ValueError("these run folders were trained with other settings:\n" + "\n".join(problems)
                         + "\nreproduce into another --output-dir, or delete those folders")


def _train_key(spec: dict) -> str:
    return _key({k: v for k, v in spec["train"].items() if k != "resume"})


def _train(spec: dict, device: str | None = None, launch: dict | None = None, log=None) -> tuple[Path, dict]:
    """Train (or resume, or reuse) the run's model; (its final folder, its metrics). device "cpu": on the CPU
    (the run's key does not change); launch {config_file, num_processes > 1}: through `accelerate launch`."""
    from ..train import load_config, pretrain

    run_dir = Path(spec["run_dir"])
    final = run_dir / "train" / "final"
    marker = run_dir / TRAIN_KEY
    finished = marker.is_file() and read_json(marker).get("finished")
    if not (finished and (final / "metrics.json").is_file()):
        atomic_write_json(marker, {"key": _train_key(spec), "finished": False})
        values = {**spec["train"], **({"cpu": True} if device == "cpu" else {})}
        if launch and int(launch.get("num_processes") or 1) > 1:
            launch_training(values, run_dir, launch, log)
        else:
            pretrain(load_config(None, values))
        atomic_write_json(marker, {"key": _train_key(spec), "finished": True})
    return final, read_json(final / "metrics.json")


def launch_command(config_path: Path, launch: dict) -> list[str]:
    """`accelerate launch` of `ssa-hf pretrain --config config_path` over launch's processes."""
    import sys

    from ..resources import config_file

    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(config_file(str(launch["config_file"]))), "--num_processes", str(int(launch["num_processes"])),
            "-m", "ssa_hf.cli", "pretrain", "--config", str(config_path)]


def launch_training(values: dict, run_dir: Path, launch: dict, log=None) -> None:
    """One training through `accelerate launch` (its config beside the run: pretrain.yaml); its output to `log`.
    A failed launch raises RuntimeError naming the run and its log."""
    import subprocess

    import yaml

    path = run_dir / "pretrain.yaml"
    atomic_write_bytes(path, yaml.safe_dump(values, sort_keys=False).encode())
    command = launch_command(path, launch)
    if log is not None:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
    done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT if log is not None else None,
                          env=dict(os.environ), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{run_dir}: `accelerate launch` of the training exited with {done.returncode} "
                           f"(its output: {run_dir / 'run.log'})")


def _cached(path: Path, key: str, compute) -> Any:
    """compute(), stored in `path` with `key`; reused while the key is unchanged."""
    if path.is_file():
        stored = read_json(path)
        if stored.get("key") == key:
            return stored["value"]
    value = compute()
    atomic_write_json(path, {"key": key, "value": value})
    return value


def _zorro(final: Path, spec: dict) -> dict:
    from ..evaluation import ProbeConfig, run_probe

    settings = spec["evaluation"].get("zorro") or {}
    probe = ProbeConfig(model=str(final), zorro_dir=str(resolve_path(settings.get("zorro_dir", "${SSA_HF_DATA_DIR}/zorro"))),
                        methods=settings.get("methods", ["holistic"]), limit=settings.get("limit"),
                        batch_size=settings.get("batch_size", 128), threads=spec["threads"], device="cpu"
                        if settings.get("device") == "cpu" else None, output_dir=str(Path(spec["run_dir"]) / "zorro"),
                        name=f"{spec['arm']}-seed{spec['seed']}", version=settings.get("version", "sentences"))
    result = run_probe(probe, progress=False)
    method = probe.methods[0]
    return {"method": method, "mean": result.mean[method],
            "paradigms": {p: r[method]["accuracy"] for p, r in result.paradigms.items()},
            "pairs": result.settings["pairs_per_paradigm"]}


def _perplexity(final: Path, spec: dict) -> dict:
    from ..evaluation.perplexity import evaluate_perplexity

    settings = spec["evaluation"].get("perplexity") or {}
    out_of = settings.get("out_of_distribution")
    name = settings.get("out_of_distribution_name")  # a Hub data set's configuration
    data = [out_of if name or _is_hub_name(out_of) else str(resolve_path(out_of))] if out_of else None
    results = evaluate_perplexity(str(final), data=data, name=name, heldout=True,
                                  windows=settings.get("windows", 200), window_length=settings.get("window_length"),
                                  seed=settings.get("seed", 0), batch_size=settings.get("batch_size", 16),
                                  device=settings.get("device"), output_dir=str(Path(spec["run_dir"]) / "perplexity"),
                                  progress=False)
    out = {"nll_in": results[0].mean_nll, "ppl_in": results[0].perplexity, "data_in": results[0].data,
           "window_length": results[0].window_length, "windows": results[0].windows}
    if out_of:
        out.update(nll_out=results[1].mean_nll, ppl_out=results[1].perplexity, data_out=results[1].data)
    return out


def _is_hub_name(path: str) -> bool:
    """`owner/name` that is no local path (a Hub data set)."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~", "$")) and not resolve_path(path).exists()


def _lm_eval(final: Path, spec: dict) -> dict:
    from ..evaluation import EvalConfig, run_eval

    settings = dict(spec["evaluation"].get("lm_eval") or {})
    data_dir = settings.pop("data_dir", None) or spec["data_dir"] or "${SSA_HF_DATA_DIR}"
    # winogrande and copa have no offline copy: lm-eval reads them from the Hub when it is reachable
    config = EvalConfig(model=str(final), data_dir=str(resolve_path(data_dir)), threads=spec["threads"],
                        output_dir=str(Path(spec["run_dir"]) / "lm_eval"), name=f"{spec['arm']}-seed{spec['seed']}",
                        **settings)
    result = run_eval(config)
    return {"tasks": {task: {"metrics": {m: v["value"] for m, v in entry["metrics"].items()},
                             "baselines": entry.get("baselines"), "num_fewshot": entry.get("num_fewshot"),
                             "n": entry.get("n")}
                      for task, entry in result.tasks.items()},
            "lm_eval_version": result.versions.get("lm_eval"), "num_fewshot": result.settings["num_fewshot"]}


EVALUATIONS = {"masked": {"zorro": _zorro}, "causal": {"perplexity": _perplexity, "lm_eval": _lm_eval}}


@contextlib.contextmanager
def data_dir_env(path):
    """$SSA_HF_DATA_DIR set to `path` (the presets' data paths read it) for the duration of one run, then restored:
    runs may execute in the caller's process (workers: 1)."""
    saved = os.environ.get("SSA_HF_DATA_DIR")
    if path:
        os.environ["SSA_HF_DATA_DIR"] = str(path)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("SSA_HF_DATA_DIR", None)
        else:
            os.environ["SSA_HF_DATA_DIR"] = saved


def run_lm_job(spec: dict, device: str | None = None, launch: dict | None = None) -> dict:
    """Train and evaluate one (arm, seed) run (in a worker process); its result, also written to result.json.
    The pipelines' own output (progress bars, warnings) goes to the run's run.log. device, launch: `_train`."""
    import torch

    run_dir = Path(spec["run_dir"])
    cached = run_dir / RESULT
    if cached.is_file():
        previous = read_json(cached)
        if previous.get("key") == spec["key"]:
            return {**previous, "reused": True}
    if spec["threads"]:
        torch.set_num_threads(int(spec["threads"]))
    started = time.perf_counter()
    # (run_dir is OUT/<kind>/<arm>-seed<k>: no link from OUT down to the log, never appended through one)
    with open_for_append(run_dir.parents[1], run_dir / "run.log", "reproduce output folder") as log, \
            contextlib.redirect_stderr(log), \
            data_dir_env(spec["data_dir"]):
        final, metrics = _train(spec, device, launch, log)
        evaluations = {}
        for name, evaluate in EVALUATIONS[spec["kind"]].items():
            if spec["evaluation"].get(name) is not None:
                evaluations[name] = _cached(run_dir / f"{name}.result.json", _key(spec["evaluation"][name]),
                                            lambda: evaluate(final, spec))
    result = {"kind": spec["kind"], "arm": spec["arm"], "seed": spec["seed"], "key": spec["key"],
              "final": str(final), "train": {k: metrics.get(k) for k in ("steps", "final_train_loss", "eval_loss",
                                                                        "eval_perplexity", "train_seconds")},
              "evaluations": evaluations, "seconds": time.perf_counter() - started}
    atomic_write_json(cached, result)
    return result


def describe_lm_result(result: dict) -> str:
    """The progress line of one finished language-model run."""
    parts = [f"{result['train'].get('steps')} steps"]
    loss = result["train"].get("eval_loss")
    if loss is not None:
        parts.append(f"validation loss {loss:.3f}")
    zorro = result["evaluations"].get("zorro")
    if zorro:
        parts.append(f"Zorro mean {100 * zorro['mean']:.1f}%")
    ppl = result["evaluations"].get("perplexity")
    if ppl:
        parts.append(f"perplexity in {ppl['ppl_in']:.1f}" + (f", out {ppl['ppl_out']:.1f}" if "ppl_out" in ppl else ""))
    lm_eval = result["evaluations"].get("lm_eval")
    if lm_eval:
        parts.append(f"lm-eval on {len(lm_eval['tasks'])} tasks")
    timing = "finished earlier, reused" if result.get("reused") else f"{result['seconds'] / 60:.1f} min"
    return f"{result['kind']} {result['arm']} seed {result['seed']}: {', '.join(parts)} ({timing})"


_WORKER_DEVICE: str | None = None  # the device a worker process took (`_take_device`)


def _take_device(devices: list[str], counter) -> None:
    """Worker initializer: take the next of `devices`; a GPU is made the only one the worker sees (so that every
    library's "cuda" is that GPU), a CPU worker sees none."""
    global _WORKER_DEVICE
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    device = devices[index % len(devices)]
    if device.startswith("cuda"):
        os.environ["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1] if ":" in device else "0"
        device = "cuda"
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    _WORKER_DEVICE = device


def run_unit(unit: dict, launch: dict | None = None) -> dict:
    """Run one independent unit (an ICL run or a language-model run) on this worker's device; its result."""
    device = _WORKER_DEVICE or unit.get("device")
    if unit["type"] == "icl":
        from ..icl.pipeline import run_one

        spec, eval_cfg, length, run_dir = unit["args"]
        return run_one(spec, eval_cfg, length, run_dir, device or "auto", unit.get("threads"), progress=False)
    return run_lm_job(unit, device, launch)


def uses_launch(launch: dict | None, kind: str | None = None) -> bool:
    """Whether trainings (of `kind`) go through `accelerate launch`: more than one process, and the kind listed."""
    return (bool(launch) and int(launch.get("num_processes") or 1) > 1
            and (kind is None or launch.get("kinds") is None or kind in launch["kinds"]))


def run_units(units: list[dict], workers: int, progress, devices: list[str] | None = None,
              launch: dict | None = None) -> list[dict]:
    """Run `units`, each independent (its own folder; a finished one is reused, an interrupted one resumes):
    `workers` at a time in worker processes, each taking one of `devices` in turn (or in this process: one
    worker and no devices). Language-model runs under `launch` (accelerate, several processes each) run one
    after the other from this process, each over all the devices. progress(index, total, result) after each."""
    check_train_folders([u for u in units if u["type"] == "lm"])
    launched = [u for u in units if u["type"] == "lm" and uses_launch(launch, u["kind"])]
    pooled = [u for u in units if u not in launched]
    results, total = [], len(units)

    def done(result):
        results.append(result)
        progress(len(results), total, result)

    if pooled and (workers > 1 or devices):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")
        counter = context.Value("i", 0)
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_take_device,
                                 initargs=(list(devices or ["cpu"]) if devices else [_default_device(pooled)], counter)) as pool:
            for future in as_completed([pool.submit(run_unit, unit) for unit in pooled]):
                done(future.result())
    else:
        for unit in pooled:
            done(run_unit(unit))
    for unit in launched:
        done(run_unit(unit, launch))
    return results


def _default_device(units: list[dict]) -> str:
    """Workers without --devices: the config's device (auto: a GPU if there is one, else the CPU)."""
    device = next((u.get("device") for u in units if u.get("device")), "auto")
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def run_lm_jobs(specs: list[dict], workers: int, progress) -> list[dict]:
    """The language-model runs alone (`run_units`)."""
    return run_units(specs, workers, progress)
