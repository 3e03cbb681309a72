"""The paper's eight lm-eval tasks: WinoGrande, COPA, CB and ReCoRD from a local copy (files written here), from the Hub when
online, and a clear message offline; `paper` as a task list; baselines of the multiple-input WinoGrande."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from ssa_hf.evaluation import lm_tasks
from ssa_hf.evaluation.harness import EvalConfig, baselines, data_kind, expand_task_names
from ssa_hf.evaluation.lm_tasks import PAPER_TASKS, task_manager, write_local_tasks

WINOGRANDE = [
    {"qID": "a", "sentence": "The cup fell off the table because _ was slippery.", "option1": "the cup",
     "option2": "the table", "answer": "1"},
    {"qID": "b", "sentence": "Anna gave Maria a gift because _ was kind.", "option1": "Anna", "option2": "Maria",
     "answer": "1"},
    {"qID": "c", "sentence": "The dog chased the cat until _ got tired.", "option1": "the dog", "option2": "the cat",
     "answer": "2"},
]
COPA = [
    {"premise": "The man turned on the light.", "choice1": "The room got bright.", "choice2": "The room got cold.",
     "question": "effect", "label": 0, "idx": 0},
    {"premise": "The ground was wet.", "choice1": "The sun was out.", "choice2": "It had rained.",
     "question": "cause", "label": 1, "idx": 1},
]

CB = [{"premise": "It was raining.", "hypothesis": "The ground was wet", "label": 0, "idx": 0},
      {"premise": "He left early.", "hypothesis": "He stayed late", "label": 1, "idx": 1}]
RECORD = [{"passage": "Anna met Maria in Paris.\n@highlight\nThey talked", "query": "@placeholder met Maria",
           "entities": ["Anna", "Paris", "Maria"], "answers": ["Anna"], "idx": {"passage": 0, "query": 0}}]


def _write(root, rel, rows):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def paper_data(data_dir, tmp_path):
    """The shared fixture layout plus local WinoGrande and COPA copies."""
    root = tmp_path / "data"
    shutil.copytree(data_dir, root)
    _write(root, "winogrande/dev.jsonl", WINOGRANDE)
    _write(root, "copa/val.jsonl", COPA)
    _write(root, "cb/val.jsonl", CB)
    _write(root, "record/val.jsonl", RECORD)
    return root


def test_local_copies_of_winogrande_and_copa_are_read_with_the_stock_prompts(paper_data, tmp_path):
    loaded = task_manager(paper_data, ["winogrande", "copa"], tmp_path / "tasks").load(["winogrande", "copa"])["tasks"]
    wino = list(loaded["winogrande"].eval_docs)
    assert [loaded["winogrande"].doc_to_text(d) for d in wino] == [0, 0, 1]  # the gold option index
    assert loaded["winogrande"].doc_to_choice(wino[0]) == ["The cup fell off the table because the cup",
                                                            "The cup fell off the table because the table"]
    copa = loaded["copa"]
    docs = list(copa.eval_docs)
    assert copa.doc_to_text(docs[0]) == "The man turned on the light therefore"
    assert copa.doc_to_choice(docs[1]) == [" the sun was out.", " it had rained."]
    assert [copa.doc_to_target(d) for d in docs] == [" the room got bright.", " it had rained."]


@pytest.mark.parametrize(
    "rel,row,message",
    [
        ("winogrande/dev.jsonl", {**WINOGRANDE[0], "answer": "3"}, "answer"),
        ("winogrande/dev.jsonl", {**WINOGRANDE[0], "sentence": "no blank here"}, "blank"),
        ("copa/val.jsonl", {**COPA[0], "question": "why"}, "cause"),
        ("copa/val.jsonl", {k: v for k, v in COPA[0].items() if k != "label"}, "label"),
    ],
)
def test_bad_local_records_are_refused_with_file_and_line(paper_data, tmp_path, rel, row, message):
    _write(paper_data, rel, [row])
    task = rel.split("/")[0]
    with pytest.raises(ValueError, match=rf"{rel}, line 1: .*{message}"):
        write_local_tasks(paper_data, tmp_path / "tasks", [task])


def test_local_copies_of_cb_and_record_are_read_with_the_stock_prompts(paper_data, tmp_path):
    loaded = task_manager(paper_data, ["cb"], tmp_path / "tasks").load(["cb"])["tasks"]
    cb = list(loaded["cb"].eval_docs)
    assert loaded["cb"].doc_to_choice(cb[0]) == ["True", "False", "Neither"] and [d["label"] for d in cb] == [0, 1]
    # ReCoRD through this package's scorer (the stock one imports what transformers 5 removed): the stock prompt
    task = task_manager(paper_data, ["record"], tmp_path / "tasks2").load(["record"])["tasks"]["record"]
    record = list(task.eval_docs)
    assert record[0]["entities"] == ["Anna", "Maria", "Paris"]
    assert task.doc_to_text(record[0]) == "Anna met Maria in Paris.\n\n  - They talked.\n"
    assert task.doc_to_choice(record[0]) == ["  - Anna met Maria", "  - Maria met Maria", "  - Paris met Maria"]
    # the most likely entity is scored against the answers: F1 and exact match
    assert task.process_results(record[0], [(-1.0, False), (-3.0, False), (-2.0, False)]) == {"f1": 1.0, "em": 1.0}
    assert task.process_results(record[0], [(-3.0, False), (-1.0, False), (-2.0, False)]) == {"f1": 0.0, "em": 0.0}


def test_the_record_metric_is_squad_style_f1_and_exact_match():
    from ssa_hf.evaluation.record_task import exact_match, normalize, token_f1

    assert normalize("The  Eiffel-Tower!") == "eiffeltower" and normalize("a cat, an owl") == "cat owl"
    assert exact_match("the Paris", "Paris") == 1.0 and exact_match("Paris France", "Paris") == 0.0
    assert token_f1("Paris France", "Paris") == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert token_f1("London", "Paris") == 0.0 and token_f1("the", "a") == 1.0  # both empty after normalising


def test_without_a_copy_offline_the_message_names_the_task_why_and_what_to_do(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(lm_tasks, "hub_is_offline", lambda: True)
    monkeypatch.setattr(lm_tasks, "hub_copy_cached", lambda task: False)
    with pytest.raises(ValueError) as raised:
        write_local_tasks(data_dir, tmp_path / "tasks", ["arc_easy", "winogrande", "copa"])
    message = str(raised.value)
    for expected in ("'winogrande'", "allenai/winogrande", "'copa'", "aps/super_glue", "HF_HUB_OFFLINE",
                     "go online", "winogrande/dev.jsonl", "copa/val.jsonl"):
        assert expected in message
    assert "arc_easy" not in message  # it has its local copy
    # the stock tasks without --data-dir: the same kind of message, before lm-eval loads anything
    with pytest.raises(ValueError, match="'copa' cannot run.*--data-dir DIR with a local copy at DIR/copa/val.jsonl"):
        task_manager(None, ["copa"])


def test_without_a_copy_online_the_stock_hub_task_is_used(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(lm_tasks, "hub_is_offline", lambda: False)
    folder = write_local_tasks(data_dir, tmp_path / "tasks", ["arc_easy", "winogrande"])
    config = yaml.safe_load((folder / "winogrande.yaml").read_text())
    assert config["include"].endswith("lm_eval/tasks/winogrande/default.yaml")
    assert "dataset_path" not in config  # the stock allenai/winogrande
    assert yaml.safe_load((folder / "arc_easy.yaml").read_text())["dataset_path"] == "json"


def test_a_cached_hub_copy_runs_offline(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(lm_tasks, "hub_is_offline", lambda: True)
    monkeypatch.setattr(lm_tasks, "hub_copy_cached", lambda task: True)
    folder = write_local_tasks(data_dir, tmp_path / "tasks", ["copa"])
    assert (folder / "copa.yaml").is_file()


def test_the_default_local_set_leaves_out_tasks_without_a_copy(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(lm_tasks, "hub_is_offline", lambda: True)
    folder = write_local_tasks(data_dir, tmp_path / "tasks")
    assert not (folder / "winogrande.yaml").exists() and (folder / "boolq.yaml").exists()


def test_paper_expands_to_the_six_tasks_in_order():
    assert PAPER_TASKS == ["arc_easy", "arc_challenge", "boolq", "hellaswag", "winogrande", "copa", "cb", "record"]
    assert expand_task_names(["paper", "piqa", "boolq"]) == PAPER_TASKS + ["piqa"]
    config = EvalConfig(model="m", tasks="paper")
    config.validate()
    assert config.tasks == PAPER_TASKS


def test_winogrande_baselines_read_the_gold_option_from_the_document():
    samples = [{"doc": row, "target": "x", "arguments": [["ctx1", " rest"], ["ctx2", " rest"]]} for row in WINOGRANDE]
    base = baselines(samples, "winogrande")
    assert base["chance"] == 0.5 and base["majority"] == pytest.approx(2 / 3) and base["n"] == 3
    assert baselines(samples, "boolq") is None  # a string target is not a gold index


def test_data_kind_says_where_the_tasks_read():
    local, hub = {"data": {"dataset_path": "json"}}, {"data": {"dataset_path": "allenai/winogrande"}}
    assert data_kind({"a": local}) == "local" and data_kind({"a": hub}) == "hub"
    assert data_kind({"a": local, "b": hub}) == "local+hub"


def test_record_from_the_hub_uses_this_packages_scorer_too(tmp_path, monkeypatch):
    """Without --data-dir (stock tasks, Hub data) `record` is still this package's definition, not the stock one
    whose scorer cannot import under transformers 5; the other tasks stay stock."""
    monkeypatch.setattr(lm_tasks, "hub_is_offline", lambda: False)
    manager = task_manager(None, ["record", "copa"], tmp_path / "tasks")
    assert manager.task_index["record"].yaml_path == (tmp_path / "tasks" / "record.yaml").resolve()
    config = (tmp_path / "tasks" / "record.yaml").read_text()
    assert "!function 'ssa_hf.evaluation.record_task.process_results'" in config and "dataset_path: aps/super_glue" in config
    assert "lm_eval/tasks/super_glue/copa" in str(manager.task_index["copa"].yaml_path)
