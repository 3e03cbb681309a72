"""Local lm-eval tasks: the stock definitions, reading the made-up files through lm-eval's own task system."""

from __future__ import annotations

import shutil

import pytest
import yaml

from ssa_hf.evaluation.lm_tasks import LOCAL_TASKS, stock_version, task_manager, write_local_tasks

from .fixtures import EXPECTED

TASKS = ["arc_easy", "arc_challenge", "boolq", "hellaswag", "piqa"]


@pytest.fixture(scope="module")
def loaded_tasks(data_dir, tmp_path_factory):
    manager = task_manager(data_dir, TASKS, tmp_path_factory.mktemp("tasks"))
    return manager.load(TASKS)["tasks"]


@pytest.mark.parametrize("name", TASKS)
def test_local_task_reads_the_local_documents(loaded_tasks, name):
    task = loaded_tasks[name]
    docs = list(task.eval_docs)
    expected = EXPECTED[name]
    assert [task.doc_to_target(doc) for doc in docs] == expected["gold"]
    assert [len(task.doc_to_choice(doc)) for doc in docs] == expected["num_choices"]
    assert list(task.doc_to_choice(docs[0])) == expected["first_choices"]
    # the stock definition is kept: output type, metrics, version
    assert task.OUTPUT_TYPE == "multiple_choice"
    assert task.config.metadata["version"] == stock_version(LOCAL_TASKS[name])
    assert "acc" in [m["metric"] for m in task.config.metric_list]


def test_stock_prompts_are_kept(loaded_tasks):
    arc = loaded_tasks["arc_easy"]
    assert arc.doc_to_text(list(arc.eval_docs)[0]) == "Question: Which thing is hot?\nAnswer:"
    boolq = loaded_tasks["boolq"]
    assert boolq.doc_to_text(list(boolq.eval_docs)[0]) == "The sun is a hot star.\nQuestion: is the sun hot?\nAnswer:"
    hellaswag = loaded_tasks["hellaswag"]
    assert hellaswag.doc_to_text(list(hellaswag.eval_docs)[0]) == "Cooking: A man cuts bread. he"
    # ARC reports on the test split, the others on validation, as the stock tasks do
    assert arc.config.test_split == "test" and boolq.config.test_split is None


def test_yaml_files_include_the_stock_task_with_absolute_paths(data_dir, tmp_path):
    folder = write_local_tasks(data_dir, tmp_path / "tasks", ["arc_easy", "piqa"])
    config = yaml.safe_load((folder / "arc_easy.yaml").read_text())
    assert config["include"].endswith("lm_eval/tasks/arc/arc_easy.yaml")
    assert config["dataset_path"] == "json"
    for path in config["dataset_kwargs"]["data_files"].values():
        assert path.startswith("/")
    piqa = yaml.safe_load((folder / "piqa.yaml").read_text())
    joined = piqa["dataset_kwargs"]["data_files"]["validation"]
    assert joined.startswith(str(folder)) and "label" in open(joined).readline()


def test_missing_data_file_names_the_file(data_dir, tmp_path):
    partial = tmp_path / "data"
    shutil.copytree(data_dir, partial)
    (partial / "boolq" / "validation.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"boolq/validation\.jsonl"):
        write_local_tasks(partial, tmp_path / "tasks", ["boolq"])
    with pytest.raises(FileNotFoundError, match="not a folder"):
        write_local_tasks(tmp_path / "nowhere", tmp_path / "tasks", ["boolq"])


def test_unknown_local_task_lists_the_known_ones(data_dir, tmp_path):
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['lambada_openai'\].*arc_challenge") as error:
        write_local_tasks(data_dir, tmp_path / "tasks", ["arc_easy", "lambada_openai"])
    # the folder has no WinoGrande or COPA copy: the message says where one would go, never that one exists
    message = str(error.value)
    holds = message.split("holds local copies for ")[1].split("]")[0]
    assert "copa" not in holds and "winogrande" not in holds and "arc_easy" in holds
    assert "copa runs from a copy at DATA_DIR/copa/val.jsonl" in message


def test_piqa_labels_must_align(data_dir, tmp_path):
    broken = tmp_path / "data"
    shutil.copytree(data_dir, broken)
    (broken / "piqa" / "valid-labels.lst").write_text("0\n1\n")
    with pytest.raises(ValueError, match="3 records but .* 2 labels"):
        write_local_tasks(broken, tmp_path / "tasks", ["piqa"])
