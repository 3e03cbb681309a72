"""Text sources: local formats, path resolution, and errors that name the file and the line."""

import gzip

import pytest

from ssa_hf.data.sources import TextSource, expand_path, is_local_path, iter_texts, load_texts, resolve_files

from .fixtures import write_jsonl, write_parquet, write_text

TEXTS = ["first document", "second one here", "third"]


@pytest.fixture
def files(tmp_path):
    return {
        "text": write_text(tmp_path / "a.txt", [TEXTS[0], "", "   ", TEXTS[1], TEXTS[2]]),
        "jsonl": write_jsonl(tmp_path / "a.jsonl", TEXTS),
        "jsonl.gz": write_jsonl(tmp_path / "a.jsonl.gz", TEXTS, gz=True),
        "parquet": write_parquet(tmp_path / "a.parquet", TEXTS),
        "custom": write_jsonl(tmp_path / "b.jsonl", TEXTS, field="content"),
    }


@pytest.mark.parametrize("kind", ["text", "jsonl", "jsonl.gz", "parquet"])
@pytest.mark.parametrize("streaming", [False, True])
def test_local_formats_read_the_same_documents(files, kind, streaming):
    dataset = load_texts(TextSource(path=str(files[kind]), streaming=streaming))
    assert [r["text"] for r in dataset] == TEXTS  # blank lines skipped, order kept
    assert list(iter_texts(TextSource(path=str(files[kind])))) == TEXTS


def test_text_field_and_max_documents(files):
    source = TextSource(path=str(files["custom"]), text_field="content", max_documents=2)
    assert [r["text"] for r in load_texts(source)] == TEXTS[:2]
    streamed = TextSource(path=str(files["custom"]), text_field="content", max_documents=2, streaming=True)
    assert [r["text"] for r in load_texts(streamed)] == TEXTS[:2]


def test_folder_and_glob_resolve_sorted_files(tmp_path):
    write_text(tmp_path / "corpus" / "b.txt", ["b"])
    write_text(tmp_path / "corpus" / "a.txt", ["a"])
    (tmp_path / "corpus" / "README.md").write_text("not data")
    assert [p.name for p in resolve_files(str(tmp_path / "corpus"))] == ["a.txt", "b.txt"]
    assert [p.name for p in resolve_files(str(tmp_path / "corpus" / "*.txt"))] == ["a.txt", "b.txt"]
    assert [r["text"] for r in load_texts(TextSource(path=str(tmp_path / "corpus")))] == ["a", "b"]
    with pytest.raises(FileNotFoundError, match="no data files"):
        resolve_files(str(tmp_path / "missing" / "*.txt"))


def test_hub_names_and_local_paths_are_told_apart(tmp_path, monkeypatch):
    assert not is_local_path("HuggingFaceFW/fineweb-edu")
    assert is_local_path("./corpus.txt") and is_local_path("data/x.jsonl.gz") and is_local_path(str(tmp_path))
    monkeypatch.setenv("SSA_HF_DATA_DIR", str(tmp_path))
    assert expand_path("${SSA_HF_DATA_DIR}/aochildes/x.train") == f"{tmp_path}/aochildes/x.train"
    monkeypatch.delenv("SSA_HF_DATA_DIR")
    assert expand_path("${SSA_HF_DATA_DIR}/x").endswith("shared/data/x")


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"text": "ok"}\n{"text": "broken\n', "line 2: malformed JSON record"),
        (b'{"text": "ok"}\n\n[1, 2]\n', "line 3: expected a JSON object"),
        (b'{"text": "ok"}\n{"body": "no text"}\n', "line 2: record has no field 'text'"),
        (b'{"text": 5}\n', "line 1: field 'text' is int, not a string"),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_malformed_jsonl_names_file_and_line(tmp_path, content, message, streaming):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as error:
        list(load_texts(TextSource(path=str(path), streaming=streaming)))
    assert str(path) in str(error.value)


def test_invalid_utf8_and_gzip_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\n\xff\xfe broken\n")
    with pytest.raises(ValueError, match=r"bad\.txt, line 2: not valid UTF-8"):
        list(iter_texts(TextSource(path=str(path))))
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(b'{"text": "a"}\n' * 200)[:-30])
    with pytest.raises(ValueError, match=r"cut\.jsonl\.gz, line \d+: cannot read the file"):
        list(iter_texts(TextSource(path=str(truncated))))


def test_parquet_errors_name_the_row_or_column(tmp_path):
    path = write_parquet(tmp_path / "nulls.parquet", ["a", None, "c"])
    with pytest.raises(ValueError, match=r"nulls\.parquet, row 2: column 'text' is NoneType"):
        list(load_texts(TextSource(path=str(path))))
    with pytest.raises(ValueError, match="no column 'body'"):
        list(iter_texts(TextSource(path=str(path), text_field="body")))


def test_bad_source_settings_are_refused():
    with pytest.raises(ValueError, match="path"):
        TextSource().validate()
    with pytest.raises(ValueError, match="format"):
        TextSource(path="x.txt", format="csv").validate()
    with pytest.raises(ValueError, match="max_documents"):
        TextSource(path="x.txt", max_documents=0).validate()
