"""Zero-shot (or few-shot) lm-evaluation-harness runs on a checkpoint folder or a Hub id.

`run_eval(EvalConfig(model=..., tasks=[...]))` runs lm-eval's `simple_evaluate` with the `ssa-hf` model (lm-eval's
HFLM, ssa-hf classes loaded natively), on lm-eval's stock tasks (Hub data) or, with `data_dir`, on the same task
definitions reading local files (`lm_tasks`). The results record what a score needs beside it to be read: the
number of shots, the lm-eval version and task versions, where the data came from, the model's config and a hash of
its weights, and each task's chance and majority baselines on the documents that were scored.
"""

from __future__ import annotations

import glob
import logging
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..data.tokenizer import check_tokenizer_source
from ..regular_files import check_model_folder
from ..reporting import OutputDir
from .config import DEFAULT_TASKS, EvalConfig, expand_task_names  # noqa: F401  (their home before)
from .checkpoint import checkpoint_info, default_name, start_model_run

log = logging.getLogger(__name__)

@dataclass
class EvalResults:
    """What `run_eval` returns (and writes as eval.json): `tasks[name]` holds metrics (value, stderr), baselines,
    version, shots, document counts and the data source."""

    name: str
    model: dict[str, Any]
    settings: dict[str, Any]
    versions: dict[str, Any]
    tasks: dict[str, dict[str, Any]]
    wall_time_s: float
    kind: str = "lm_eval"
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def metric(self, task: str, metric: str = "acc") -> float | None:
        entry = self.tasks.get(task, {}).get("metrics", {}).get(metric)
        return None if entry is None else entry["value"]

    def table(self) -> str:
        from .report import lm_eval_table

        return lm_eval_table([self.to_dict()])


def _split_metric_key(key: str) -> tuple[str, str] | None:
    if "," not in key:
        return None
    metric, filter_name = key.split(",", 1)
    return metric, filter_name


def parse_metrics(task_results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """lm-eval's {"acc,none": v, "acc_stderr,none": s, ...} -> {"acc": {"value": v, "stderr": s}, ...}; a filter
    other than "none" stays in the name ("exact_match,strict-match")."""
    metrics: dict[str, dict[str, Any]] = {}
    for key, value in task_results.items():
        parsed = _split_metric_key(key)
        if parsed is None:
            continue
        metric, filter_name = parsed
        stderr = metric.endswith("_stderr")
        base = metric[: -len("_stderr")] if stderr else metric
        name = base if filter_name == "none" else f"{base},{filter_name}"
        entry = metrics.setdefault(name, {"value": None, "stderr": None})
        if isinstance(value, str):  # lm-eval writes "N/A" where it has no stderr
            value = None
        entry["stderr" if stderr else "value"] = value
    return metrics


def baseline_stats(golds: list[int], choices: list[list[str]]) -> dict[str, Any] | None:
    """Chance (mean of 1/number of choices) and majority (always answering the most frequent gold position) of a
    multiple-choice task, from each document's gold index and choices."""
    if not golds or any(not isinstance(g, int) or isinstance(g, bool) for g in golds):
        return None
    n = len(golds)
    position, hits = Counter(golds).most_common(1)[0]
    fixed = all(list(c) == list(choices[0]) for c in choices)
    if fixed and position < len(choices[0]) and choices[0][position] is not None:
        label = str(choices[0][position]).strip()  # the same choices everywhere (boolq: "yes")
    else:
        label = f"choice {chr(ord('A') + position)}" if position < 26 else f"choice {position + 1}"
    return {
        "chance": sum(1.0 / len(c) for c in choices) / n,
        "majority": hits / n,
        "majority_answer": label,
        "num_choices": sorted({len(c) for c in choices}),
        "n": n,
    }


def baselines(samples: list[dict[str, Any]], task: str | None = None) -> dict[str, Any] | None:
    """`baseline_stats` on the documents lm-eval scored (its logged samples: gold `target`, one request per
    choice in `arguments`; for a task in GOLD_INDEX_FROM_DOC the gold is read from the logged document); None when
    they are not single-gold multiple choice."""
    from .lm_tasks import GOLD_INDEX_FROM_DOC

    if not samples or any(not sample.get("arguments") for sample in samples):
        return None
    gold_from_doc = GOLD_INDEX_FROM_DOC.get(task or "")
    if gold_from_doc is not None:
        try:
            golds = [gold_from_doc(s["doc"]) for s in samples]
        except (KeyError, TypeError):
            return None
        # one continuation scored after each context: the contexts are the choices
        choices = [[arg[0] if isinstance(arg, (list, tuple)) else None for arg in s["arguments"]] for s in samples]
        return baseline_stats(golds, choices)
    choices = [[arg[1] if isinstance(arg, (list, tuple)) and len(arg) > 1 else None for arg in s["arguments"]] for s in samples]
    return baseline_stats([s.get("target") for s in samples], choices)


def task_baselines(tasks: list[str], data_dir: str | None = None, limit: int | float | None = None,
                   output_dir: str | None = None) -> dict[str, dict[str, Any] | None]:
    """Chance and majority baselines of tasks from their documents alone (no model): the first `limit` documents
    (all by default) of the split lm-eval scores. With output_dir, baselines.json and baselines.md."""
    from ..reporting import markdown_table
    from .lm_tasks import task_manager

    with tempfile.TemporaryDirectory(prefix="ssa_hf_tasks_") as scratch:
        loaded = task_manager(data_dir, list(tasks), scratch).load(list(tasks))["tasks"]
        result: dict[str, dict[str, Any] | None] = {}
        for name, task in loaded.items():
            if task.OUTPUT_TYPE != "multiple_choice":
                result[name] = None
                continue
            docs = list(task.eval_docs)
            if limit is not None:
                docs = docs[: int(limit if limit >= 1 else round(limit * len(docs)))]
            choices = [list(task.doc_to_choice(doc)) for doc in docs]
            # multiple-input tasks (winogrande) score one continuation after each choice: the gold is doc_to_text
            gold = task.doc_to_text if getattr(task, "multiple_input", False) else task.doc_to_target
            result[name] = baseline_stats([gold(doc) for doc in docs], choices)
            if result[name] is not None:
                result[name]["n_total"] = len(list(task.eval_docs))
    if output_dir:
        out = OutputDir(output_dir, writes=["baselines.json", "baselines.md"])
        rows = [[name, b["n"], ", ".join(map(str, b["num_choices"])), b["chance"], b["majority"], b["majority_answer"]]
                for name, b in result.items() if b]
        import lm_eval

        out.write_json("baselines.json", {"kind": "baselines", "lm_eval_version": lm_eval.__version__,
                                          "data": "local" if data_dir else "hub",
                                          "data_dir": data_dir, "limit": limit, "tasks": result})
        out.write_markdown("baselines.md", "# Chance and majority baselines\n\n"
                           + markdown_table(["task", "documents", "choices", "chance", "majority", "majority answer"], rows, ".4f"))
    return result


def _data_source(task_config: dict[str, Any]) -> dict[str, Any]:
    source = {"dataset_path": task_config.get("dataset_path"), "dataset_name": task_config.get("dataset_name")}
    for key in ("test_split", "validation_split"):
        if task_config.get(key):
            source["split"] = task_config[key]
            break
    fewshot = (task_config.get("fewshot_config") or {}).get("split") or task_config.get("training_split") or (
        task_config.get("validation_split") or task_config.get("test_split")
    )
    source["fewshot_split"] = fewshot  # where few-shot examples come from (the scored document is excluded)
    kwargs = task_config.get("dataset_kwargs") or {}
    if "data_files" in kwargs:
        source["data_files"] = kwargs["data_files"]
    metadata = task_config.get("metadata") or {}
    if "local_data_note" in metadata:
        source["note"] = metadata["local_data_note"]
    return source


def data_kind(tasks: dict[str, dict[str, Any]]) -> str:
    """"local" when every task read local files, "hub" when none did, else "local+hub"."""
    local = {(entry.get("data") or {}).get("dataset_path") == "json" for entry in tasks.values()}
    return "local+hub" if len(local) > 1 else ("local" if local == {True} else "hub")


def load_lm(config: EvalConfig, model: str):
    """The `ssa-hf` lm-eval model for `model`, or a ValueError that says why it cannot be loaded."""
    from ..hub.folders import PickledWeightsError, WeightsError
    from .lm_eval_model import SSAHFLM, MaskedLMError

    kwargs = dict(config.model_args)
    if config.tokenizer:
        kwargs["tokenizer"] = config.tokenizer
    if config.attn_implementation:
        kwargs["attn_implementation"] = config.attn_implementation
    try:
        return SSAHFLM(
            pretrained=model,
            device=config.device,
            dtype=config.dtype,
            batch_size=int(config.batch_size),
            trust_remote_code=config.trust_remote_code,
            allow_weight_mismatch=config.allow_weight_mismatch,
            allow_nonfinite_weights=config.allow_nonfinite_weights,
            **kwargs,
        )
    except (MaskedLMError, PickledWeightsError, WeightsError):
        raise
    except (OSError, ValueError, ImportError) as error:
        raise ValueError(
            f"cannot load model {model!r}: {error}".rstrip()
            + " (a checkpoint folder needs config.json, weights and a tokenizer; a Hub id needs network access "
            "or a cached copy when HF_HUB_OFFLINE=1)"
        ) from error


def _task_entries(raw: dict[str, Any], samples: dict[str, list]) -> dict[str, dict[str, Any]]:
    """One entry per task of lm-eval's raw results: metrics, version, few-shot count, sizes, baselines, data."""
    tasks: dict[str, dict[str, Any]] = {}
    for task, task_results in raw["results"].items():
        task_config = raw.get("configs", {}).get(task, {})
        n_samples = raw.get("n-samples", {}).get(task, {})
        multiple_choice = task_config.get("output_type") == "multiple_choice"
        tasks[task] = {
            "metrics": parse_metrics(task_results),
            "version": raw.get("versions", {}).get(task),
            "num_fewshot": raw.get("n-shot", {}).get(task, task_config.get("num_fewshot")),
            "n": n_samples.get("effective"),
            "n_total": n_samples.get("original"),
            "output_type": task_config.get("output_type"),
            "baselines": baselines(samples.get(task, []), task) if multiple_choice else None,
            "data": _data_source(task_config),
        }
    return tasks


def run_eval(config: EvalConfig) -> EvalResults:
    """Run lm-eval on one model and return (and, with output_dir, write) its results."""
    import lm_eval
    import torch
    import transformers
    from datasets.exceptions import DatasetNotFoundError

    import ssa_hf

    from .lm_tasks import task_manager

    start = time.time()
    model, is_local = start_model_run(config)
    if is_local:
        check_model_folder(model)  # (a FIFO, a JSON list, sizes < 1: one line, before transformers reads them)
    if config.tokenizer:
        check_tokenizer_source(config.tokenizer)
    name = config.name or default_name(model)
    out = OutputDir(config.output_dir, writes=["eval*.json", "eval.md", "eval.png", "lm_eval_tasks"]) \
        if config.output_dir else None
    with tempfile.TemporaryDirectory(prefix="ssa_hf_tasks_") as scratch:
        folder = out.file("lm_eval_tasks") if out is not None else Path(scratch)
        manager = task_manager(config.data_dir, list(config.tasks), folder)
        if config.data_dir is not None:
            log.info("local tasks written to %s (usable as lm_eval --include_path)", folder)
        lm = load_lm(config, model)
        log.info("evaluating %s on %s (num_fewshot=%s, limit=%s)", name, ",".join(config.tasks), config.num_fewshot, config.limit)
        try:
            raw = lm_eval.simple_evaluate(
                model=lm,
                tasks=list(config.tasks),
                num_fewshot=int(config.num_fewshot),
                limit=config.limit,
                task_manager=manager,
                log_samples=True,
                random_seed=config.seed,
                numpy_random_seed=config.seed,
                torch_random_seed=config.seed,
                fewshot_random_seed=config.seed,
            )
        except (ConnectionError, DatasetNotFoundError) as error:
            hint = (
                "; offline? give --data-dir with local copies (the layout of ../shared/data)"
                if config.data_dir is None
                else ""
            )
            raise ValueError(f"the data of {','.join(config.tasks)} could not be loaded: {error}{hint}") from error
    if raw is None:  # only non-zero ranks of a distributed run get None
        raise RuntimeError("lm-eval returned no results (not the main process?)")
    samples = raw.pop("samples", {})
    tasks = _task_entries(raw, samples)
    model_info = checkpoint_info(model, is_local, lm.model, lm.weight_problems)
    results = EvalResults(
        name=name,
        model=model_info,
        settings={
            "tasks": list(config.tasks),
            "num_fewshot": int(config.num_fewshot),
            "limit": config.limit,
            "batch_size": int(config.batch_size),
            "device": str(lm.device),
            "dtype": str(next(lm.model.parameters()).dtype),
            "attn_implementation": getattr(lm.model.config, "_attn_implementation", None),
            "data": data_kind(tasks),
            "data_dir": str(Path(config.data_dir).resolve()) if config.data_dir else None,
            "seed": config.seed,
            "lm_eval_model": "ssa-hf",
        },
        versions={
            "lm_eval": lm_eval.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "ssa_hf": ssa_hf.__version__,
        },
        tasks=tasks,
        wall_time_s=round(time.time() - start, 2),
    )
    if out is not None:
        write_eval_results(out, results, samples if config.log_samples else None)
    return results


def write_eval_results(out: OutputDir, results: EvalResults, samples: dict[str, list] | None = None) -> None:
    from .report import lm_eval_figure, lm_eval_markdown

    results.files["json"] = str(out.file("eval.json"))
    results.files["markdown"] = str(out.file("eval.md"))
    if samples is not None:
        results.files["samples"] = str(out.file("eval_samples.json"))
        out.write_json("eval_samples.json", samples)
    results.files["plot"] = str(out.file("eval.png"))
    out.write_json("eval.json", results.to_dict())
    out.write_markdown("eval.md", lm_eval_markdown([results.to_dict()]))
    out.save_figure("eval.png", lm_eval_figure([results.to_dict()]))


def unique_names(models: list[str]) -> list[str]:
    """Display names for several models: `default_name` (the folder name, or the run of RUN/final), widened with
    parent folders where two would clash."""
    names = [default_name(m) for m in models]
    if len(set(names)) == len(names):
        return names
    parts = [Path(str(m).rstrip("/")).parts for m in models]
    depth = 1
    while True:
        names = ["-".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names) or depth >= max(len(p) for p in parts):
            break
        depth += 1
    if len(set(names)) != len(names):
        names = [f"{n}-{i}" for i, n in enumerate(names)]
    return names


def check_run_names(names: list[str], count: int) -> None:
    """Display names given for several models, each also the name of its results folder (OUT/<name>): one per
    model, none empty, none twice (one run's eval.json would replace the other's), none a path."""
    if len(names) != count:
        raise ValueError(f"--names: {len(names)} names for {count} models")
    for position, name in enumerate(names, 1):
        if not str(name).strip():
            raise ValueError(f"--names: name {position} of {len(names)} is empty; give one name per model "
                             f"(e.g. --names ssa,softmax)")
        if name in (".", "..") or "/" in name or "\\" in name or name != name.strip():
            raise ValueError(f"--names: {name!r} cannot name a results folder (no '/', '\\', '.', '..' or spaces "
                             f"around it)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"--names: {', '.join(map(repr, repeated))} given twice; each model needs its own name (its "
                         f"results go to OUT/<name>)")


def run_eval_models(config: EvalConfig, models: list[str], names: list[str] | None = None) -> list[EvalResults]:
    """`run_eval` for each model (each into output_dir/<name> when there are several) and, with output_dir, a
    side-by-side table (eval.md / eval_comparison.json) of all of them."""
    if not models:
        raise ValueError("give at least one model")
    if names is not None:
        check_run_names(names, len(models))
    names = names or unique_names(models)
    if len(models) == 1:
        single = EvalConfig(**{**asdict(config), "model": models[0], "name": config.name or names[0]})
        return [run_eval(single)]
    results = []
    if config.output_dir:  # each model's folder checked before any is written (a link there is refused)
        OutputDir(config.output_dir, writes=["eval_comparison.json", "eval.md", "eval.png", *map(glob.escape, names)])
    for model, name in zip(models, names):
        sub_out = str(Path(config.output_dir) / name) if config.output_dir else None
        results.append(run_eval(EvalConfig(**{**asdict(config), "model": model, "name": name, "output_dir": sub_out})))
    if config.output_dir:
        from .report import lm_eval_figure, lm_eval_markdown

        out = OutputDir(config.output_dir)
        out.write_json("eval_comparison.json", {"kind": "lm_eval_comparison", "runs": [r.to_dict() for r in results]})
        out.write_markdown("eval.md", lm_eval_markdown([r.to_dict() for r in results]))
        out.save_figure("eval.png", lm_eval_figure([r.to_dict() for r in results]))
    return results
