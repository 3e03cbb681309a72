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

Every record of the local files is checked before lm-eval reads them (`LocalTask.check`): lm-eval renders prompts
with Jinja, where a missing field is silently empty or false, so a BoolQ record without `answer` would be scored
as "no". A bad record raises a ValueError naming the file and the line.

WinoGrande, COPA, CB and ReCoRD are not in ../shared/data: they read a copy placed under the data folder
(`winogrande/dev.jsonl`, the official WinoGrande 1.1 file; `copa/val.jsonl`, `cb/val.jsonl`, `record/val.jsonl`,
SuperGLUE's) when there is one, else lm-eval's stock task reads
the Hub. Offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) with neither a copy nor a cached download, the run stops
before loading anything, with a message naming the task, why, and what to do (`check_hub_tasks`).

Adding a multiple-choice task: add a `LocalTask` to `LOCAL_TASKS` (stock YAML path inside lm_eval/tasks, the data
files by split, any field overrides, and the record check).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.sources import iter_jsonl_records, iter_lines
from ..regular_files import read_json
from ..reporting import atomic_write_bytes, atomic_write_json
from .config import did_you_mean
from .task_yaml import FunctionRef, dump_task_yaml, load_function, module_definition

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
    # False: ../shared/data has no copy; without the files the stock task reads the Hub (online), or the run stops
    # with a message saying what to do (offline)
    bundled: bool = True
    # what a record must hold for the stock prompt: returns what is wrong with one record, or None
    check: Callable[[dict[str, Any]], str | None] | None = None
    # a module of this package whose DEFINITION (and FUNCTIONS, the keys naming its functions) replaces the stock
    # YAML's include: for a stock task whose own code cannot load under the pinned libraries (ReCoRD)
    definition: str | None = None


# ----------------------------------------------------------------------------------------- record checks
# lm-eval renders the prompt with Jinja, where a missing field is silently empty or false (a BoolQ record
# without `answer` would be scored as "no"): every record is checked before lm-eval sees the files.


def _wrong_fields(record: dict[str, Any], **types: type | tuple[type, ...]) -> str | None:
    for name, kind in types.items():
        if name not in record:
            return f"has no field {name!r} (fields: {sorted(record)})"
        value = record[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            wanted = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            return f"field {name!r} is {type(value).__name__} {value!r:.40}, expected {wanted}"
    return None


def _string_list(value: Any, name: str, minimum: int = 2) -> str | None:
    if not isinstance(value, list) or len(value) < minimum or not all(isinstance(v, str) for v in value):
        return f"field {name!r} must be a list of at least {minimum} strings, got {value!r:.60}"
    return None


def _check_arc(record: dict[str, Any]) -> str | None:
    problem = _wrong_fields(record, question=str, choices=dict, answerKey=str)
    if problem:
        return problem
    choices = record["choices"]
    problem = _string_list(choices.get("text"), "choices.text") or _string_list(choices.get("label"), "choices.label")
    if problem:
        return problem
    if len(choices["text"]) != len(choices["label"]):
        return f"choices.text has {len(choices['text'])} entries but choices.label {len(choices['label'])}"
    repeated = sorted({label for label in choices["label"] if choices["label"].count(label) > 1})
    if repeated:  # the answer key would name two choices; lm-eval would score the first
        return f"choices.label {choices['label']} names {', '.join(map(repr, repeated))} twice"
    if record["answerKey"] not in choices["label"]:
        return f"answerKey {record['answerKey']!r} is not one of choices.label {choices['label']}"
    return None


def _check_boolq(record: dict[str, Any]) -> str | None:
    return _wrong_fields(record, question=str, passage=str, answer=bool)


def _check_hellaswag(record: dict[str, Any]) -> str | None:
    problem = _wrong_fields(record, query=str, endings=list, label=int) or _string_list(record["endings"], "endings")
    if problem:
        return problem
    if not 0 <= record["label"] < len(record["endings"]):
        return f"label {record['label']} is not an index of its {len(record['endings'])} endings"
    return None


def _check_piqa(record: dict[str, Any]) -> str | None:
    return _wrong_fields(record, goal=str, sol1=str, sol2=str)


def _check_winogrande(record: dict[str, Any]) -> str | None:
    problem = _wrong_fields(record, sentence=str, option1=str, option2=str, answer=str)
    if problem:
        return problem
    if "_" not in record["sentence"]:
        return "field 'sentence' has no blank '_' for the options"
    if record["answer"] not in ("1", "2"):
        return f"field 'answer' is {record['answer']!r}, expected '1' or '2'"
    return None


def _check_copa(record: dict[str, Any]) -> str | None:
    problem = _wrong_fields(record, premise=str, choice1=str, choice2=str, question=str, label=int)
    if problem:
        return problem
    if record["question"] not in ("cause", "effect"):
        return f"field 'question' is {record['question']!r}, expected 'cause' or 'effect'"
    if record["label"] not in (0, 1):
        return f"field 'label' is {record['label']}, expected 0 or 1"
    return None


def _check_cb(record: dict[str, Any]) -> str | None:
    problem = _wrong_fields(record, premise=str, hypothesis=str, label=int)
    if problem:
        return problem
    if record["label"] not in (0, 1, 2):
        return f"field 'label' is {record['label']}, expected 0 (entailment), 1 (contradiction) or 2 (neutral)"
    return None


def _check_record(record: dict[str, Any]) -> str | None:
    problem = _wrong_fields(record, passage=str, query=str, entities=list, answers=list)
    if problem:
        return problem
    if not record["entities"] or not all(isinstance(e, str) for e in record["entities"]):
        return "field 'entities' must be a non-empty list of strings"
    if not all(isinstance(a, str) for a in record["answers"]):
        return "field 'answers' must be a list of strings"
    return None


def check_task_file(task: LocalTask, path: Path) -> int:
    """Check every record of one JSON Lines data file of `task`; the number of records. A ValueError names the
    file, the line and what is wrong; a file without records is an error too."""
    count = 0
    for number, record in iter_jsonl_records(path):
        problem = task.check(record) if task.check else None
        if problem:
            raise ValueError(f"{path}, line {number}: {task.name} record {problem}; fix or remove the record")
        count += 1
    if count == 0:
        raise ValueError(f"{path}: no {task.name} records (the file is empty); point --data-dir at the data")
    return count


def _is_jsonl(path: Path) -> bool:
    return path.name.lower().endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz"))


def _prepare_piqa(files: dict[str, Path], folder: Path) -> dict[str, Path]:
    """PIQA ships its labels in a separate file aligned by line: join them into one JSON Lines file."""
    records = [record for _, record in iter_jsonl_records(files["validation"])]  # checked by check_task_file
    labels_file = files["validation_labels"]
    labels = [(number, line.strip()) for number, line in iter_lines(labels_file) if line.strip()]
    if len(records) != len(labels):
        raise ValueError(
            f"piqa: {files['validation']} has {len(records)} records but {labels_file} has {len(labels)} labels; "
            "they must be aligned line by line"
        )
    rows = []
    for record, (number, label) in zip(records, labels):
        if label not in ("0", "1"):
            raise ValueError(f"{labels_file}, line {number}: label {label!r} is not 0 or 1")
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
        check=_check_arc,
    )


def _validation_task(name: str, stock_yaml: str, file: str, check, note: str, **more: Any) -> LocalTask:
    """A task scored on its validation split, read from `file` (relative to the data folder); `more`: the other
    fields of `LocalTask` (`files` adds to the validation file)."""
    files = {"validation": file, **more.pop("files", {})}
    return LocalTask(name=name, stock_yaml=stock_yaml, files=files, eval_split="validation", check=check, note=note,
                     **more)


LOCAL_TASKS: dict[str, LocalTask] = {
    "arc_easy": _arc("arc_easy", "ARC-Easy"),
    "arc_challenge": _arc("arc_challenge", "ARC-Challenge"),
    # the Hub copy (super_glue) has an int `label`, 1 = yes; the local export has a bool `answer`
    "boolq": _validation_task(
        "boolq", "super_glue/boolq/default.yaml", "boolq/validation.jsonl", _check_boolq,
        "google/boolq validation export (bool `answer`), same 3,270 questions as super_glue/boolq",
        overrides={"doc_to_target": "{{ 1 if answer else 0 }}"}),
    # the local copy is already pre-processed into {query, endings, label}; the stock process_docs needs the
    # original ctx_a/ctx_b/activity_label fields, which it lacks
    "hellaswag": _validation_task(
        "hellaswag", "hellaswag/hellaswag.yaml", "hellaswag/hellaswag_val.jsonl.gz", _check_hellaswag,
        "text rendering of hellaswag_val.jsonl (klosax/hellaswag_text_data): ctx_b is not capitalised and only "
        "the [header]/[step]/[substeps]/[title] tags are removed, so scores can differ slightly from stock",
        overrides={"process_docs": None, "doc_to_text": "{{query}}", "doc_to_choice": "endings", "doc_to_target": "label"}),
    "piqa": _validation_task(
        "piqa", "piqa/piqa.yaml", "piqa/valid.jsonl", _check_piqa,
        "official release files (valid.jsonl + valid-labels.lst), joined at run time",
        files={"validation_labels": "piqa/valid-labels.lst"}, prepare=_prepare_piqa),
    # not in ../shared/data: from the Hub when online, or from a copy placed under --data-dir
    "winogrande": _validation_task(
        "winogrande", "winogrande/default.yaml", "winogrande/dev.jsonl", _check_winogrande,
        "official WinoGrande 1.1 dev.jsonl (the 1,267 questions of allenai/winogrande winogrande_xl validation)",
        bundled=False),
    "copa": _validation_task(
        "copa", "super_glue/copa/default.yaml", "copa/val.jsonl", _check_copa,
        "SuperGLUE COPA val.jsonl (the 100 questions of super_glue/copa validation)", bundled=False),
    "cb": _validation_task(
        "cb", "super_glue/cb/default.yaml", "cb/val.jsonl", _check_cb,
        "SuperGLUE CommitmentBank val.jsonl (the 56 questions of super_glue/cb validation; acc and f1)", bundled=False),
    "record": _validation_task(
        "record", "super_glue/record/default.yaml", "record/val.jsonl", _check_record,
        "SuperGLUE ReCoRD val.jsonl in the Hub layout (passage, query, entities, answers; f1 and em); scored by "
        "ssa_hf.evaluation.record_task (the stock prompt, SQuAD-style f1 / em of this package: the stock scorer "
        "imports transformers.data.metrics.squad_metrics, which transformers 5 removed)", bundled=False,
        definition="ssa_hf.evaluation.record_task"),
}

#: The eight lm-eval tasks of the paper's table (REFERENCE.md section 4), in its order; `--tasks paper` runs them.
PAPER_TASKS = ["arc_easy", "arc_challenge", "boolq", "hellaswag", "winogrande", "copa", "cb", "record"]

#: Where each stock task reads its gold answer when `doc_to_target` is not the index of the right choice
#: (WinoGrande scores two contexts against one continuation: the gold is the option number).
GOLD_INDEX_FROM_DOC: dict[str, Callable[[dict[str, Any]], int]] = {
    "winogrande": lambda doc: {"1": 0, "2": 1}[str(doc["answer"])],
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


def own_definition(task: LocalTask) -> dict[str, Any]:
    """What replaces the stock YAML: `include` of the stock definition, or this package's own (`definition`)."""
    return {"include": str(stock_yaml_path(task))} if task.definition is None else module_definition(task.definition)


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
    for path in files.values():
        if _is_jsonl(path):
            check_task_file(task, path)
    if task.prepare is not None:
        files = task.prepare(files, folder)
    if task.eval_split not in files:
        raise ValueError(f"{task.name}: the stock task reports on {task.eval_split!r}, which the local files lack")
    config: dict[str, Any] = {
        **own_definition(task),
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


def hub_is_offline() -> bool:
    """True when huggingface_hub or datasets is told to stay offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)."""
    import datasets.config
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE or datasets.config.HF_DATASETS_OFFLINE)


def stock_dataset(task: LocalTask) -> tuple[str, str | None]:
    """(dataset_path, dataset_name) the stock task reads from the Hub."""
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(stock_yaml_path(task), resolve_func=False)
    return config.get("dataset_path"), config.get("dataset_name")


def hub_copy_cached(task: LocalTask) -> bool:
    """Whether the stock task's Hub data set can be opened now (offline: from the datasets cache)."""
    import datasets

    path, name = stock_dataset(task)
    try:
        datasets.load_dataset_builder(path, name)
    except Exception:  # any failure means lm-eval could not read it either; the caller says what to do
        return False
    return True


def unavailable_message(task: LocalTask, data_dir: str | Path | None) -> str:
    """Why `task` cannot run offline and what to do, in one message."""
    path, name = stock_dataset(task)
    hub = f"{path}" + (f" ({name})" if name else "")
    expected = ", ".join(task.files.values())
    if task.bundled:
        local = f"give --data-dir with the layout of ../shared/data (it holds {expected})"
    elif data_dir is not None:
        local = f"put a local copy at {Path(data_dir).expanduser().resolve() / expected} ({task.note})"
    else:
        local = f"pass --data-dir DIR with a local copy at DIR/{expected} ({task.note})"
    return (
        f"lm-eval task {task.name!r} cannot run: it reads {hub} from the Hub, which is switched off "
        f"(HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) and not in the datasets cache"
        + ("" if task.bundled or data_dir is None else f", and --data-dir {data_dir} has no copy of it")
        + f". To run it, go online (unset HF_HUB_OFFLINE and HF_DATASETS_OFFLINE) or {local}."
    )


def check_hub_tasks(names: list[str], data_dir: str | Path | None = None) -> None:
    """Offline, a ValueError naming every task of `names` that would read the Hub and cannot (see
    `unavailable_message`); online, or for tasks this package does not know, nothing (lm-eval reports)."""
    if not hub_is_offline():
        return
    problems = [unavailable_message(LOCAL_TASKS[n], data_dir) for n in names if n in LOCAL_TASKS
                and not hub_copy_cached(LOCAL_TASKS[n])]
    if problems:
        raise ValueError("\n".join(problems))


def has_local_copy(task: LocalTask, data_dir: str | Path) -> bool:
    root = Path(data_dir).expanduser().resolve()
    return all((root / rel).is_file() for rel in task.files.values())


def hub_task_config(task: LocalTask) -> dict[str, Any]:
    """The stock task unchanged (it reads the Hub), for a run whose other tasks read local files; a task with its
    own definition reads the stock task's Hub data set through it."""
    config = {**own_definition(task), "task": task.name, "tag": [LOCAL_TAG]}
    if task.definition is not None:
        path, name = stock_dataset(task)
        config.update(dataset_path=path, dataset_name=name, validation_split=task.eval_split)
    config["metadata"] = {"version": stock_version(task), "local_data_note": "no local copy: read from the Hub"
                          + (f"; {task.note}" if task.definition else "")}
    return config


TASKS_MANIFEST = "ssa_hf_tasks.json"  # the files ssa-hf wrote into a task folder, with their sha256


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fresh_task_folder(folder: Path) -> Path:
    """An empty folder for this run's task files. lm-eval indexes every YAML under its include path (and runs the
    `!function` code they name), so a folder holding anything ssa-hf did not write there is refused; one holding
    only what an earlier run wrote (listed in its manifest, hashes matching) is emptied."""
    if folder.is_symlink():
        raise ValueError(f"task folder {folder} is a symbolic link; ssa-hf writes its lm-eval tasks only into a real "
                         "folder it creates: remove the link or use another output folder")
    if folder.exists():
        if not folder.is_dir():
            raise ValueError(f"task folder {folder} is a file; remove it or use another output folder")
        try:
            written = read_json(folder / TASKS_MANIFEST)["files"]  # (a FIFO there is refused, never waited on)
        except (OSError, ValueError, KeyError, TypeError):
            written = {}
        foreign = []
        for path in sorted(folder.rglob("*")):
            name = path.relative_to(folder).as_posix()
            if path.is_symlink() or not (path.is_file() or path.is_dir()) or (path.is_file() and name != TASKS_MANIFEST
                                     and (not isinstance(written, dict) or written.get(name) != _digest(path))):
                foreign.append(name)
        if foreign:
            listed = ", ".join(foreign[:5]) + (f" (and {len(foreign) - 5} more)" if len(foreign) > 5 else "")
            raise ValueError(
                f"task folder {folder} holds files ssa-hf did not write there ({listed}): lm-eval would index them "
                "as tasks, and run the code they name. Remove them (or the folder), or use another output folder")
        for child in folder.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write_local_tasks(data_dir: str | Path, folder: str | Path, tasks: list[str] | None = None) -> Path:
    """Write local task YAMLs for `tasks` (default: every task in LOCAL_TASKS) into `folder`; returns the folder,
    ready for `TaskManager(include_path=folder)` or `lm_eval --include_path folder`. The folder is made empty
    first (`fresh_task_folder`): the TaskManager indexes only what this call wrote. A task that ../shared/data does
    not hold (winogrande, copa) reads its local copy when `data_dir` has one, else the Hub: offline that is a
    ValueError saying what to do."""
    names = list(LOCAL_TASKS) if tasks is None else list(tasks)
    unknown = [name for name in names if name not in LOCAL_TASKS]
    if unknown:
        # what this data folder holds, and what it could hold (a task ../shared/data lacks reads a copy put there)
        present = sorted(n for n, t in LOCAL_TASKS.items() if has_local_copy(t, data_dir))
        absent = {n: " and ".join(t.files.values()) for n, t in LOCAL_TASKS.items() if n not in present}
        raise ValueError(
            f"unknown task(s) {unknown}{did_you_mean(unknown, LOCAL_TASKS)} for --data-dir: {data_dir} holds local "
            f"copies for {present or 'none'}"
            + (f"; {', '.join(f'{n} runs from a copy at DATA_DIR/{f}' for n, f in absent.items())}" if absent else "")
            + " (without --data-dir any lm-eval task runs from the Hub)"
        )
    from_hub = [n for n in names if not LOCAL_TASKS[n].bundled and not has_local_copy(LOCAL_TASKS[n], data_dir)]
    if tasks is None:  # the default set: only what can run here
        names = [n for n in names if n not in from_hub]
        from_hub = []
    check_hub_tasks(from_hub, data_dir)
    folder = Path(folder).expanduser()
    folder = fresh_task_folder(folder.parent.resolve() / folder.name)
    for name in names:
        if name in from_hub:
            config = hub_task_config(LOCAL_TASKS[name])
            header = "# written by ssa-hf: lm-eval's stock task, reading the Hub (no local copy)\n"
        else:
            config = local_task_config(LOCAL_TASKS[name], data_dir, folder)
            header = "# written by ssa-hf: lm-eval's stock task, reading local files\n"
        text = header + dump_task_yaml(config)
        atomic_write_bytes(folder / f"{name}.yaml", text.encode())
    return _write_manifest(folder)


def _write_manifest(folder: Path) -> Path:
    files = {p.relative_to(folder).as_posix(): _digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    atomic_write_json(folder / TASKS_MANIFEST, {"written_by": "ssa-hf eval", "files": files})
    return folder


def check_task_code(names: list[str]) -> None:
    """A ValueError for a task whose code cannot load with the installed libraries: the stock definition is loaded
    with its `!function` code imported (lm-eval 0.4.13's stock ReCoRD scorer, for one, imports
    transformers.data.metrics.squad_metrics, which transformers 5 removed: `record` is therefore scored by this
    package's own definition, ssa_hf.evaluation.record_task). Tasks this package does not know: nothing."""
    from lm_eval.tasks._yaml_loader import load_yaml

    problems = []
    for task in [LOCAL_TASKS[name] for name in names if name in LOCAL_TASKS]:
        try:
            if task.definition is None:
                load_yaml(stock_yaml_path(task), resolve_func=True)
            for function in [f for f in own_definition(task).values() if isinstance(f, FunctionRef)]:
                load_function(function)
        except (ImportError, AttributeError, FileNotFoundError) as error:
            problems.append(f"lm-eval task {task.name!r} cannot load its code here ({error}); leave it out of the "
                            "tasks, or run it where the installed libraries support it")
    if problems:
        raise ValueError("\n".join(problems))


def _own_hub_tasks(tasks: list[str], folder: str | Path) -> Path:
    """A folder holding this package's own definitions of `tasks` reading the Hub (they take precedence over the
    stock tasks of the same name in a TaskManager that indexes it)."""
    folder = Path(folder).expanduser()
    folder = fresh_task_folder(folder.parent.resolve() / folder.name)
    for name in tasks:
        text = "# written by ssa-hf: its own definition of the task, reading the Hub\n"
        atomic_write_bytes(folder / f"{name}.yaml", (text + dump_task_yaml(hub_task_config(LOCAL_TASKS[name]))).encode())
    return _write_manifest(folder)


def task_manager(data_dir: str | Path | None, tasks: list[str], folder: str | Path | None = None):
    """An lm-eval TaskManager for `tasks`: local copies under `data_dir` (written into `folder`), or lm-eval's stock
    tasks when `data_dir` is None. Unknown task names, and tasks whose code cannot load here
    (`check_task_code`), raise ValueError."""
    from lm_eval.tasks import TaskManager

    check_task_code(list(tasks))
    if data_dir is not None:
        if folder is None:
            raise ValueError("task_manager: a folder for the generated task YAMLs is needed with data_dir")
        include = write_local_tasks(data_dir, folder, tasks)
        # only the local tasks: faster to index, and a stock task can never be picked up by mistake
        return TaskManager(include_path=str(include), include_defaults=False)
    own = [name for name in tasks if name in LOCAL_TASKS and LOCAL_TASKS[name].definition is not None]
    if own and folder is None:
        raise ValueError(f"task_manager: a folder for the task YAMLs of {own} is needed")
    manager = TaskManager(include_path=str(_own_hub_tasks(own, folder))) if own else TaskManager()
    unknown = [name for name in tasks if name not in manager.all_tasks]
    if unknown:
        raise ValueError(
            f"unknown lm-eval task(s) {unknown}{did_you_mean(unknown, manager.all_tasks)}; "
            "list them with `lm_eval ls tasks`"
        )
    check_hub_tasks(list(tasks), None)
    return manager
