"""lm-evaluation-harness tasks on local copies of their data sets (offline), through lm-eval's own task system.

Each local task is a YAML file that `include`s lm-eval's stock definition of the task (prompt, choices, metrics,
version) by absolute path and overrides only where the data comes from:

    include: /.../lm_eval/tasks/arc/arc_easy.yaml
    task: arc_easy
    dataset_path: json
    dataset_name: null
    dataset_kwargs: {data_files: {train: /abs/ARC-Easy-train.jsonl, validation: ..., test: ...}}
    training_split: train
    validation_split: validation
    test_split: test

plus, where the local layout differs from the Hub copy lm-eval reads, the fields that map it (BoolQ's boolean
`answer`, HellaSwag's pre-processed `query`/`endings`). The files are written with absolute paths (lm-eval resolves
relative data paths against the working directory, not the YAML) into a folder that is passed to lm-eval as
`include_path`; the same folder works with the stock CLI: `lm_eval --include_path DIR --tasks arc_easy ...`.

A task whose files `datasets`' json loader cannot read as they are (PIQA keeps its labels in a separate file) has a
`prepare` step that writes a joined JSON Lines file into that folder; nothing is written next to the data.

Adding a multiple-choice task: add a `LocalTask` to `LOCAL_TASKS` (stock YAML path inside lm_eval/tasks, the data
files by split, and any field overrides).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..reporting import atomic_write_bytes

#: The tag every local task carries: `--tasks ssa_hf_local` runs all of them.
LOCAL_TAG = "ssa_hf_local"


@dataclass(frozen=True)
class LocalTask:
    """A stock lm-eval multiple-choice task, read from local files.

    name: the stock task name (the local task keeps it, so results are keyed alike).
    stock_yaml: the stock definition, relative to the installed `lm_eval/tasks` folder.
    files: split name -> file, relative to the data folder.
    eval_split: the split the stock task reports on; it must be among `files`.
    overrides: YAML keys that map the local layout onto the stock prompt (applied after the include).
    prepare: (data files by split, task folder) -> files by split to read instead (for layouts the json loader
        cannot read as they are); written into the task folder.
    note: how the local copy differs from what the stock task reads, recorded with the results.
    """

    name: str
    stock_yaml: str
    files: dict[str, str]
    eval_split: str
    overrides: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[dict[str, Path], Path], dict[str, Path]] | None = None
    note: str = ""


def _prepare_piqa(files: dict[str, Path], folder: Path) -> dict[str, Path]:
    """PIQA ships its labels in a separate file aligned by line: join them into one JSON Lines file."""
    questions = files["validation"].read_text(encoding="utf-8").splitlines()
    labels_file = files["validation_labels"]
    labels = labels_file.read_text(encoding="utf-8").split()
    questions = [line for line in questions if line.strip()]
    if len(questions) != len(labels):
        raise ValueError(
            f"piqa: {files['validation']} has {len(questions)} records but {labels_file} has {len(labels)} labels; "
            "they must be aligned line by line"
        )
    rows = []
    for line, label in zip(questions, labels):
        record = json.loads(line)
        record["label"] = int(label)
        rows.append(json.dumps(record, ensure_ascii=False))
    out = folder / "data" / "piqa_validation.jsonl"
    atomic_write_bytes(out, ("\n".join(rows) + "\n").encode())
    return {"validation": out}


def _arc(name: str, subset: str) -> LocalTask:
    return LocalTask(
        name=name,
        stock_yaml=f"arc/{name}.yaml",
        files={split: f"arc/{subset}-{split}.jsonl" for split in ("train", "validation", "test")},
        eval_split="test",
    )


LOCAL_TASKS: dict[str, LocalTask] = {
    "arc_easy": _arc("arc_easy", "ARC-Easy"),
    "arc_challenge": _arc("arc_challenge", "ARC-Challenge"),
    "boolq": LocalTask(
        name="boolq",
        stock_yaml="super_glue/boolq/default.yaml",
        files={"validation": "boolq/validation.jsonl"},
        eval_split="validation",
        # the Hub copy (super_glue) has an int `label`, 1 = yes; the local export has a bool `answer`
        overrides={"doc_to_target": "{{ 1 if answer else 0 }}"},
        note="google/boolq validation export (bool `answer`), same 3,270 questions as super_glue/boolq",
    ),
    "hellaswag": LocalTask(
        name="hellaswag",
        stock_yaml="hellaswag/hellaswag.yaml",
        files={"validation": "hellaswag/hellaswag_val.jsonl.gz"},
        eval_split="validation",
        # the local copy is already pre-processed into {query, endings, label}; the stock process_docs needs the
        # original ctx_a/ctx_b/activity_label fields, which it lacks
        overrides={"process_docs": None, "doc_to_text": "{{query}}", "doc_to_choice": "endings", "doc_to_target": "label"},
        note=(
            "text rendering of hellaswag_val.jsonl (klosax/hellaswag_text_data): ctx_b is not capitalised and only "
            "the [header]/[step]/[substeps]/[title] tags are removed, so scores can differ slightly from stock"
        ),
    ),
    "piqa": LocalTask(
        name="piqa",
        stock_yaml="piqa/piqa.yaml",
        files={"validation": "piqa/valid.jsonl", "validation_labels": "piqa/valid-labels.lst"},
        eval_split="validation",
        prepare=_prepare_piqa,
        note="official release files (valid.jsonl + valid-labels.lst), joined at run time",
    ),
}


def stock_task_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


def stock_yaml_path(task: LocalTask) -> Path:
    path = stock_task_dir() / task.stock_yaml
    if not path.is_file():
        import lm_eval

        raise FileNotFoundError(
            f"{task.name}: lm-eval {lm_eval.__version__} has no stock definition at {path}; the local task mirrors it "
            "(update LocalTask.stock_yaml for this lm-eval version)"
        )
    return path


def stock_version(task: LocalTask) -> Any:
    from lm_eval.tasks._yaml_loader import load_yaml

    return (load_yaml(stock_yaml_path(task), resolve_func=False).get("metadata") or {}).get("version")


def resolve_files(task: LocalTask, data_dir: str | Path) -> dict[str, Path]:
    """The task's data files under `data_dir`, or a FileNotFoundError naming each missing file."""
    data_dir = Path(data_dir).expanduser().resolve()
    if not data_dir.is_dir():
        raise FileNotFoundError(f"--data-dir {data_dir} is not a folder (expected the layout of ../shared/data)")
    files = {split: data_dir / rel for split, rel in task.files.items()}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{task.name}: missing data file(s) {', '.join(missing)} (expected under --data-dir {data_dir}: "
            f"{', '.join(task.files.values())})"
        )
    return files


def local_task_config(task: LocalTask, data_dir: str | Path, folder: Path) -> dict[str, Any]:
    """The YAML mapping of one local task (its data prepared into `folder` when needed)."""
    files = resolve_files(task, data_dir)
    if task.prepare is not None:
        files = task.prepare(files, folder)
    if task.eval_split not in files:
        raise ValueError(f"{task.name}: the stock task reports on {task.eval_split!r}, which the local files lack")
    config: dict[str, Any] = {
        "include": str(stock_yaml_path(task)),
        "task": task.name,
        "tag": [LOCAL_TAG],
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {split: str(path) for split, path in files.items()}},
        # name every split the stock task uses: a split the local copy lacks is switched off, never looked up
        "training_split": "train" if "train" in files else None,
        "validation_split": "validation" if "validation" in files else None,
        "test_split": "test" if "test" in files else None,
    }
    config.update(task.overrides)
    config["metadata"] = {"version": stock_version(task), "local_data": str(Path(data_dir).expanduser().resolve())}
    if task.note:
        config["metadata"]["local_data_note"] = task.note
    return config


def write_local_tasks(data_dir: str | Path, folder: str | Path, tasks: list[str] | None = None) -> Path:
    """Write local task YAMLs for `tasks` (default: every task in LOCAL_TASKS) into `folder`; returns the folder,
    ready for `TaskManager(include_path=folder)` or `lm_eval --include_path folder`."""
    import yaml

    names = list(LOCAL_TASKS) if tasks is None else list(tasks)
    unknown = [name for name in names if name not in LOCAL_TASKS]
    if unknown:
        raise ValueError(
            f"unknown task(s) {unknown} for --data-dir: local copies exist for {sorted(LOCAL_TASKS)} "
            "(without --data-dir any lm-eval task runs from the Hub)"
        )
    folder = Path(folder).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        config = local_task_config(LOCAL_TASKS[name], data_dir, folder)
        text = "# written by ssa-hf: lm-eval's stock task, reading local files\n" + yaml.safe_dump(
            config, sort_keys=False, allow_unicode=True
        )
        atomic_write_bytes(folder / f"{name}.yaml", text.encode())
    return folder


def task_manager(data_dir: str | Path | None, tasks: list[str], folder: str | Path | None = None):
    """An lm-eval TaskManager for `tasks`: local copies under `data_dir` (written into `folder`), or lm-eval's stock
    tasks when `data_dir` is None. Unknown task names raise ValueError."""
    from lm_eval.tasks import TaskManager

    if data_dir is not None:
        if folder is None:
            raise ValueError("task_manager: a folder for the generated task YAMLs is needed with data_dir")
        include = write_local_tasks(data_dir, folder, tasks)
        # only the local tasks: faster to index, and a stock task can never be picked up by mistake
        return TaskManager(include_path=str(include), include_defaults=False)
    manager = TaskManager()
    unknown = [name for name in tasks if name not in manager.all_tasks]
    if unknown:
        raise ValueError(f"unknown lm-eval task(s) {unknown}; list them with `lm_eval ls tasks`")
    return manager
