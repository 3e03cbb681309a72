"""Bad data files: corpora (text, JSON Lines, Parquet, gzip), the local lm-eval task files, Zorro paradigm files,
result files for `compare`, and bad names in evaluation settings. Each gives a ValueError (or FileNotFoundError)
that names the file - and the line, for line-based files - and what to change; never a library traceback and
never a silently wrong score."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ssa_hf.data.sources import TextSource, iter_texts, load_texts
from ssa_hf.options import from_dict
from ssa_hf.evaluation.compare import load_results
from ssa_hf.evaluation.harness import EvalConfig
from ssa_hf.evaluation.lm_tasks import write_local_tasks
from ssa_hf.evaluation.zorro import ZORRO_PARADIGMS, ProbeConfig, load_paradigm, load_zorro

from ..evaluation import fixtures

# ----------------------------------------------------------------------------------------------- corpora


def _parquet(rows=None, column="text"):
    def write(path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        values = ["one doc", "two doc"] * 50 if rows is None else rows
        pq.write_table(pa.table({column: pa.array(values, pa.string())}), path)

    return write


def _truncated(writer, keep=0.5):
    def write(path: Path) -> None:
        writer(path)
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])

    return write


def _bytes(data: bytes):
    return lambda path: path.write_bytes(data)


def _gzip(data: bytes):
    return lambda path: path.write_bytes(gzip.compress(data))


# (file name, writer, message after "<file>")
BAD_CORPUS_FILES = [
    ("empty.txt", _bytes(b""), ": no documents"),
    ("blank.txt", _bytes(b"\n  \n\t\n"), ": no documents"),
    ("empty.jsonl", _bytes(b""), ": no documents"),
    ("empty_texts.jsonl", _bytes(b'{"text": ""}\n{"text": "  "}\n'), ": no documents"),
    ("malformed.jsonl", _bytes(b'{"text": "a"}\n{"text": "b"\n'), ", line 2: malformed JSON record"),
    ("not_object.jsonl", _bytes(b'{"text": "a"}\n\n["text"]\n'), ", line 3: expected a JSON object, got list"),
    ("no_field.jsonl", _bytes(b'{"body": "a"}\n'), ", line 1: record has no field 'text' .*set text_field"),
    ("number.jsonl", _bytes(b'{"text": "a"}\n{"text": 3}\n'), ", line 2: field 'text' is int, not a string"),
    ("latin1.txt", _bytes(b"ok\ncaf\xe9\n"), ", line 2: not valid UTF-8"),
    ("truncated.jsonl.gz", _truncated(_gzip(b'{"text": "a"}\n' * 200)), r", line \d+: cannot read the file \(Compressed file ended"),
    ("empty.jsonl.gz", _gzip(b""), ": no documents"),
    ("truncated.parquet", _truncated(_parquet()), ": not a readable Parquet file"),
    ("empty.parquet", _bytes(b""), ": not a readable Parquet file"),
    ("text_as.parquet", _bytes(b"plain text\n"), ": not a readable Parquet file"),
    ("no_rows.parquet", _parquet([]), ": no documents"),
    ("no_column.parquet", _parquet(column="body"), r": no column 'text' \(columns: \['body'\]\)"),
    ("null.parquet", _parquet(["a", None]), ", row 2: column 'text' is NoneType, not a string"),
]


@pytest.mark.parametrize("reader", ["load_texts", "iter_texts"])
@pytest.mark.parametrize("name,writer,message", BAD_CORPUS_FILES, ids=[c[0] for c in BAD_CORPUS_FILES])
def test_bad_corpus_file_is_named_with_its_line(tmp_path, reader, name, writer, message):
    path = tmp_path / name
    writer(path)
    source = TextSource(path=str(path))
    with pytest.raises(ValueError, match=f"^{path}{message}"):
        load_texts(source) if reader == "load_texts" else list(iter_texts(source))


def test_missing_or_empty_folder_is_a_file_not_found_error(tmp_path):
    (tmp_path / "empty_folder").mkdir()
    for path in (tmp_path / "empty_folder", tmp_path / "nothing.txt"):
        with pytest.raises(FileNotFoundError, match="no data files at"):
            load_texts(TextSource(path=str(path)))


# ------------------------------------------------------------------------------------ lm-eval task files


def _replace_jsonl(rel: str, edit):
    """Rewrite one data file: `edit(rows) -> rows` (records as dicts, or raw lines as str)."""

    def apply(root: Path) -> Path:
        path = root / rel
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        rows = edit(rows)
        text = "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows)
        with opener(path, "wt") as handle:
            handle.write(text)
        return path

    return apply


def _drop(index, field):
    return lambda rows: [({k: v for k, v in r.items() if k != field} if i == index else r) for i, r in enumerate(rows)]


def _set(index, field, value):
    return lambda rows: [({**r, field: value} if i == index else r) for i, r in enumerate(rows)]


def _labels(text: str):
    def apply(root: Path) -> Path:
        path = root / "piqa" / "valid-labels.lst"
        path.write_text(text)
        return path

    return apply


ARC_TEST = "arc/ARC-Easy-test.jsonl"
# (id, task, change to the data folder -> changed file, message after "<file>")
BAD_TASK_FILES = [
    ("boolq_no_answer", "boolq", _replace_jsonl("boolq/validation.jsonl", _drop(2, "answer")), ", line 3: boolq record has no field 'answer'"),
    ("boolq_answer_text", "boolq", _replace_jsonl("boolq/validation.jsonl", _set(0, "answer", "yes")), ", line 1: boolq record field 'answer' is str"),
    ("boolq_answer_null", "boolq", _replace_jsonl("boolq/validation.jsonl", _set(1, "answer", None)), ", line 2: .*'answer' is NoneType"),
    ("boolq_no_passage", "boolq", _replace_jsonl("boolq/validation.jsonl", _drop(4, "passage")), ", line 5: boolq record has no field 'passage'"),
    ("boolq_malformed", "boolq", _replace_jsonl("boolq/validation.jsonl", lambda rows: rows[:2] + ['{"question": '] + rows[2:]), ", line 3: malformed JSON record"),
    ("boolq_empty", "boolq", _replace_jsonl("boolq/validation.jsonl", lambda rows: []), ": no boolq records"),
    ("arc_no_answer", "arc_easy", _replace_jsonl(ARC_TEST, _drop(1, "answerKey")), ", line 2: arc_easy record has no field 'answerKey'"),
    ("arc_bad_answer", "arc_easy", _replace_jsonl(ARC_TEST, _set(0, "answerKey", "Z")), r", line 1: .*answerKey 'Z' is not one of choices.label"),
    ("arc_choices", "arc_easy", _replace_jsonl(ARC_TEST, _set(3, "choices", {"text": ["a", "b"], "label": ["A"]})), ", line 4: .*'choices.label' must be a list of at least 2"),
    ("arc_train_no_question", "arc_easy", _replace_jsonl("arc/ARC-Easy-train.jsonl", _drop(0, "question")), ", line 1: arc_easy record has no field 'question'"),
    ("hellaswag_label_range", "hellaswag", _replace_jsonl("hellaswag/hellaswag_val.jsonl.gz", _set(2, "label", 4)), ", line 3: .*label 4 is not an index of its 4 endings"),
    ("hellaswag_label_text", "hellaswag", _replace_jsonl("hellaswag/hellaswag_val.jsonl.gz", _set(0, "label", "1")), ", line 1: .*'label' is str"),
    ("hellaswag_no_endings", "hellaswag", _replace_jsonl("hellaswag/hellaswag_val.jsonl.gz", _drop(1, "endings")), ", line 2: .*no field 'endings'"),
    ("piqa_no_goal", "piqa", _replace_jsonl("piqa/valid.jsonl", _drop(1, "goal")), ", line 2: piqa record has no field 'goal'"),
    ("piqa_bad_label", "piqa", _labels("0\nx\n0\n"), ", line 2: label 'x' is not 0 or 1"),
    ("piqa_few_labels", "piqa", _labels("0\n1\n"), " has 2 labels; they must be aligned line by line"),
]


@pytest.mark.parametrize("case", BAD_TASK_FILES, ids=[c[0] for c in BAD_TASK_FILES])
def test_bad_task_record_is_named_with_file_and_line(tmp_path, case):
    _, task, change, message = case
    root = fixtures.write_data(tmp_path / "data")
    path = change(root)
    with pytest.raises(ValueError, match=f"{path}{message}"):
        write_local_tasks(root, tmp_path / "tasks", [task])


def test_intact_task_files_pass_the_checks(tmp_path):
    root = fixtures.write_data(tmp_path / "data")
    folder = write_local_tasks(root, tmp_path / "tasks")
    assert sorted(p.stem for p in folder.glob("*.yaml")) == ["arc_challenge", "arc_easy", "boolq", "hellaswag", "piqa"]


def test_unknown_local_task_suggests_the_closest(tmp_path):
    root = fixtures.write_data(tmp_path / "data")
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['arc_esay'\] \(did you mean 'arc_easy' for 'arc_esay'\?\)"):
        write_local_tasks(root, tmp_path / "tasks", ["arc_esay"])


# ------------------------------------------------------------------------------------------------ Zorro

BAD_PARADIGMS = [
    ("empty", b"", ": empty paradigm file"),
    ("odd", b"bad one .\ngood one .\nbad two .\n", ": 3 lines; Zorro files hold pairs"),
    ("hole", b"bad .\n\ngood .\nbad .\n", r": empty sentence on line\(s\) \[2\]"),
    ("latin1", b"bad .\ngood caf\xe9 .\n", ", line 2: not valid UTF-8"),
]


@pytest.mark.parametrize("name,data,message", BAD_PARADIGMS, ids=[c[0] for c in BAD_PARADIGMS])
def test_bad_paradigm_file_is_named(tmp_path, name, data, message):
    path = tmp_path / f"{name}.txt"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"^{path}{message}"):
        load_paradigm(path)


def test_unknown_paradigm_suggests_the_closest(tmp_path):
    folder = fixtures.write_zorro(tmp_path) / "sentences"
    typo = ZORRO_PARADIGMS[-1].replace("superlative", "superlativ")
    with pytest.raises(FileNotFoundError, match=f"did you mean '{ZORRO_PARADIGMS[-1]}' for '{typo}'"):
        load_zorro(folder, [typo])


# ---------------------------------------------------------------------------------------- result files

LM_EVAL_OK = {"kind": "lm_eval", "name": "m", "tasks": {"boolq": {"metrics": {"acc": {"value": 0.6}}}}}
ZORRO_OK = {"kind": "zorro", "name": "z", "mean": {"holistic": 0.5},
            "settings": {"methods": ["holistic"], "pairs_per_paradigm": {"p": 2}, "paradigms": ["p"],
                         "zorro_version": "sentences", "zorro_dir": "/z"},
            "paradigms": {"p": {"holistic": {"accuracy": 0.5}}}}
BAD_RESULTS = [
    ("truncated", '{"kind": "lm_eval", "tasks": {', "is not valid JSON"),
    ("lm_eval_no_tasks", {"kind": "lm_eval", "name": "m"}, "lm_eval result has no field 'tasks'"),
    ("lm_eval_tasks_list", {**LM_EVAL_OK, "tasks": ["boolq"]}, "field 'tasks' is list, expected dict"),
    ("lm_eval_no_value", {**LM_EVAL_OK, "tasks": {"boolq": {"metrics": {"acc": 0.6}}}}, "metric boolq/acc has no 'value'"),
    ("comparison_run", {"kind": "lm_eval_comparison", "runs": [LM_EVAL_OK, {"name": "x"}]}, "has no field 'tasks'"),
    ("zorro_no_mean", {k: v for k, v in ZORRO_OK.items() if k != "mean"}, "zorro result has no field 'mean'"),
    ("zorro_no_methods", {**ZORRO_OK, "settings": {**ZORRO_OK["settings"], "methods": None}}, "'settings.methods' is NoneType"),
    ("zorro_no_accuracy", {**ZORRO_OK, "paradigms": {"p": {}}}, "paradigm 'p' has no accuracy for method 'holistic'"),
]


@pytest.mark.parametrize("name,content,message", BAD_RESULTS, ids=[c[0] for c in BAD_RESULTS])
def test_bad_result_file_is_named(tmp_path, name, content, message):
    path = tmp_path / f"{name}.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ValueError, match=f"result {path}.*{message}"):
        load_results([str(path)])


def test_intact_result_files_are_read(tmp_path):
    for name, content in (("a.json", LM_EVAL_OK), ("b.json", ZORRO_OK)):
        (tmp_path / name).write_text(json.dumps(content))
    found = load_results([str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert [r["name"] for r in found["lm_eval"]] == ["m"] and [r["name"] for r in found["zorro"]] == ["z"]


# ------------------------------------------------------------------------------------- names in settings


@pytest.mark.parametrize("config_class", [EvalConfig, ProbeConfig])
@pytest.mark.parametrize("dtype,message", [("float8_e4m3fn", "'float8_e4m3fn' is not a supported dtype"),
                                           ("int8", "'int8' is not a supported dtype"),
                                           ("bfloat", "did you mean 'bfloat16'"), ("fp16", "Choose from")])
def test_unsupported_dtype_name_is_refused(config_class, dtype, message):
    with pytest.raises(ValueError, match=f"dtype: .*{message}"):
        config_class(model="m", zorro_dir="z", dtype=dtype).validate() if config_class is ProbeConfig else \
            config_class(model="m", dtype=dtype).validate()


def test_unknown_config_key_suggests_the_closest():
    with pytest.raises(ValueError, match=r"unknown config key 'num_fewshots'; did you mean 'num_fewshot'\?"):
        from_dict(EvalConfig, {"model": "m", "num_fewshots": 5})


def test_unknown_scoring_method_suggests_the_closest():
    with pytest.raises(ValueError, match="unknown scoring method 'holistc'; did you mean 'holistic'"):
        ProbeConfig(model="m", zorro_dir="z", methods=["holistc"]).validate()
