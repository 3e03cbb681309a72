"""Text corpora through `datasets`: a Hub data set (streamed or downloaded) or local files.

A `TextSource` names where documents come from; `load_texts(source)` returns a `datasets.Dataset` (map-style) or
`datasets.IterableDataset` (streaming) with one string column, `text`.

Local files: plain text (one document per non-empty line; any extension that is not one of the others, e.g.
`.txt`, `.raw`, AO-CHILDES' `.train`), JSON Lines (`.jsonl`, `.json`: one object per line with a text field) and
Parquet (`.parquet`), each optionally gzip-compressed (`.gz`). A path may be a file, a folder (every file in it,
sorted) or a glob. The records are checked while they are read: a line that is not valid UTF-8, not valid JSON,
not an object, or without a string text field raises a ValueError that names the file and the line (the row for
Parquet). `${SSA_HF_DATA_DIR}` in a path expands to that variable, or to the `shared/data` folder beside the
repository checkout when it is unset.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..regular_files import check_regular_file, open_regular, sha256_file

DATA_DIR_ENV = "SSA_HF_DATA_DIR"
LOCAL_FORMATS = ("text", "jsonl", "parquet")
# the longest document (line of a text file, JSON Lines or Parquet text) passed on whole: longer ones are split at
# whitespace into pieces of at most this many characters. A tokenizer's memory grows with a document's length: a
# 12 MB line made the Rust tokenizer abort the process (SIGABRT, not an exception) under a 6 GB memory limit
MAX_DOCUMENT_CHARS = 100_000

logger = logging.getLogger(__name__)


def default_data_dir() -> Path:
    """`$SSA_HF_DATA_DIR`, else `<repository>/../shared/data` (the offline copies beside the checkout)."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser()
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def expand_path(path: str) -> str:
    """Expand `${SSA_HF_DATA_DIR}` / `$SSA_HF_DATA_DIR` (with its default) and a leading `~`; nothing else. Paths
    come from configuration files, which may be untrusted (a reproduce config, a copied run's
    training_config.yaml): other `$NAME`s stay as written, so that no other variable's value (`$HF_TOKEN`) reaches
    a path, a record or an error message."""
    text = str(path).replace("${" + DATA_DIR_ENV + "}", str(default_data_dir()))
    text = text.replace("$" + DATA_DIR_ENV, str(default_data_dir()))
    return os.path.expanduser(text)


@dataclass
class TextSource:
    """Where documents come from.

    path: a Hub data set name (`HuggingFaceFW/fineweb-edu`) or a local file, folder or glob.
    name: the Hub configuration (`sample-10BT`).
    split: the Hub split (local files have one split, `train`).
    text_field: the column / JSON key holding the text.
    streaming: stream instead of building a map-style data set; default: True for Hub names, False for local.
    format: `text`, `jsonl` or `parquet` for local files; default: from the extension (anything unknown is text).
    max_documents: read at most this many documents (before any split).
    """

    path: str = ""
    name: str | None = None
    split: str = "train"
    text_field: str = "text"
    streaming: bool | None = None
    format: str | None = None
    max_documents: int | None = None

    def validate(self, where: str = "source") -> None:
        if not self.path:
            raise ValueError(f"{where}.path: give a Hub data set name or a local file, folder or glob")
        if self.format is not None and self.format not in LOCAL_FORMATS:
            raise ValueError(f"{where}.format: {self.format!r} is not one of {LOCAL_FORMATS} (or null for automatic)")
        if self.max_documents is not None and self.max_documents <= 0:
            raise ValueError(f"{where}.max_documents must be > 0 (or null for all), got {self.max_documents}")

    @property
    def is_local(self) -> bool:
        return is_local_path(self.path)

    @property
    def is_streaming(self) -> bool:
        return (not self.is_local) if self.streaming is None else bool(self.streaming)

    def describe(self) -> str:
        if self.is_local:
            return expand_path(self.path)
        return self.path + (f" ({self.name})" if self.name else "") + f" [{self.split}]"


def is_local_path(path: str) -> bool:
    """A path that exists, matches files, or looks like a file path; anything else is a Hub name."""
    text = expand_path(path)
    if os.path.exists(text) or glob.glob(text):
        return True
    if text.startswith((".", "/", "~")) or os.sep + os.sep in text:
        return True
    stem = text[:-3] if text.endswith(".gz") else text
    return Path(stem).suffix.lower() in (".txt", ".jsonl", ".json", ".parquet", ".raw", ".csv")


def resolve_files(path: str) -> list[Path]:
    """The files a local path names (file, folder or glob), sorted; FileNotFoundError if none."""
    text = expand_path(path)
    candidate = Path(text)
    if candidate.is_file():
        return [candidate]
    if candidate.exists() and not candidate.is_dir():
        check_regular_file(candidate, "data file")  # a FIFO or a device: refused (reading it could block forever)
    if candidate.is_dir():
        files = sorted(p for p in candidate.rglob("*") if p.is_file() and not p.name.startswith("."))
        files = [p for p in files if p.suffix.lower() not in (".md",)]
    else:
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
    if not files:
        hint = (f" (the offline data folder is incomplete: build it with `ssa-hf data download --to DIR` and set "
                f"{DATA_DIR_ENV}=DIR; docs/data.md)" if DATA_DIR_ENV in str(path) else "")
        raise FileNotFoundError(f"no data files at {text!r}{hint}")
    return files


def file_format(path: Path, forced: str | None = None) -> str:
    if forced:
        return forced
    name = path.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    suffix = Path(name).suffix
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    return "text"


def _open_binary(path: Path):
    if path.name.lower().endswith(".gz"):  # (GzipFile would not close a file object it was given)
        return gzip.open(check_regular_file(path, "data file"), "rb")
    return open_regular(path, "rb", "data file")  # (a FIFO is refused, never waited on)


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) for every line of a text file (optionally gzip); a line that is not
    UTF-8, or a truncated gzip stream, raises a ValueError naming the file and the line."""
    with _open_binary(path) as handle:
        number = 0
        while True:
            number += 1
            try:
                raw = handle.readline()
            except (OSError, EOFError) as error:  # a truncated or corrupt gzip stream
                raise ValueError(f"{path}, line {number}: cannot read the file ({error})") from None
            if not raw:
                return
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}, line {number}: not valid UTF-8 ({error})") from None


def iter_jsonl_records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) for every non-blank line of a JSON Lines file; a line that is not a JSON object
    raises a ValueError naming the file and the line."""
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}, line {number}: malformed JSON record ({error.msg} at column {error.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


def iter_file_texts(path: Path, fmt: str, text_field: str = "text") -> Iterator[str]:
    """The documents of one local file, checked record by record (errors name the file and the line).

    A file without a single document (empty, blank lines only, or only empty texts) is an error: it is
    almost always a failed download or export, and would otherwise give an empty corpus."""
    count = 0
    for text in _file_texts(path, fmt, text_field):
        count += 1
        yield text
    if count == 0:
        raise ValueError(
            f"{path}: no documents (the file is empty, or holds only blank lines or empty texts); "
            f"remove it or point the path at the data"
        )


def _file_texts(path: Path, fmt: str, text_field: str) -> Iterator[str]:
    """The documents of one file, each at most MAX_DOCUMENT_CHARS long (longer ones split, see split_long_text)."""
    split = 0
    for text in _file_documents(path, fmt, text_field):
        if len(text) <= MAX_DOCUMENT_CHARS:
            yield text
            continue
        split += 1
        yield from split_long_text(text)
    if split:
        logger.warning("%s: %d document(s) longer than %s characters split at whitespace into pieces of at most that "
                       "length (the tokenizer's memory grows with a document's length)", path, split,
                       f"{MAX_DOCUMENT_CHARS:,}")


def split_long_text(text: str, limit: int | None = None) -> Iterator[str]:
    """`text` in pieces of at most `limit` characters (default MAX_DOCUMENT_CHARS), each cut at the last whitespace
    of its second half (that whitespace character dropped), or at the limit where that half has none."""
    limit = limit or MAX_DOCUMENT_CHARS
    start = 0
    while len(text) - start > limit:
        end = start + limit
        cut = max(text.rfind(c, start + limit // 2, end) for c in " \n\t\r\f\v")
        piece, start = (text[start:cut], cut + 1) if cut > start else (text[start:end], end)
        if piece.strip():
            yield piece
    if text[start:].strip():
        yield text[start:]


def _file_documents(path: Path, fmt: str, text_field: str) -> Iterator[str]:
    if fmt == "parquet":
        yield from _iter_parquet(path, text_field)
    elif fmt == "text":
        yield from (line for _, line in iter_lines(path) if line.strip())
    else:
        for number, record in iter_jsonl_records(path):
            if text_field not in record:
                raise ValueError(
                    f"{path}, line {number}: record has no field {text_field!r} (fields: {sorted(record)}); "
                    f"set text_field to the field that holds the text"
                )
            text = record[text_field]
            if not isinstance(text, str):
                raise ValueError(f"{path}, line {number}: field {text_field!r} is {type(text).__name__}, not a string")
            if text.strip():
                yield text


def _iter_parquet(path: Path, text_field: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        with _open_binary(path) as handle:
            data = handle.read() if path.name.lower().endswith(".gz") else None
        parquet = pq.ParquetFile(io.BytesIO(data) if data is not None else path)
    except Exception as error:  # pyarrow raises its own error types
        raise ValueError(f"{path}: not a readable Parquet file ({error})") from None
    names = parquet.schema_arrow.names
    if text_field not in names:
        raise ValueError(f"{path}: no column {text_field!r} (columns: {names}); set text_field to the text column")
    row = 0
    for batch in _parquet_batches(parquet, path, text_field):
        for value in batch.column(0).to_pylist():
            row += 1
            if not isinstance(value, str):
                raise ValueError(f"{path}, row {row}: column {text_field!r} is {type(value).__name__}, not a string")
            if value.strip():
                yield value


def _parquet_batches(parquet, path: Path, text_field: str):
    """The record batches of one column; a corrupt page (footer intact) raises a ValueError naming the file."""
    batches = parquet.iter_batches(columns=[text_field], batch_size=1024)
    number = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as error:  # pyarrow raises its own error types (ArrowInvalid, OSError, ...)
            raise ValueError(f"{path}: corrupt Parquet data after row {number} ({error})") from None
        number += batch.num_rows
        yield batch


def _generate(files: list[str], formats: list[str], text_field: str, max_documents: int | None, stamps: list[str]):
    """Generator for `Dataset.from_generator`; `stamps` (size and content hash) only make the cache fingerprint
    change when a file changes."""
    count = 0
    for file, fmt in zip(files, formats):
        for text in iter_file_texts(Path(file), fmt, text_field):
            if max_documents is not None and count >= max_documents:
                return
            count += 1
            yield {"text": text}


def _file_stamp(path: Path) -> str:
    """What the `datasets` cache of a local file is keyed on: its path, size and the sha256 of its content (size
    and modification time alone miss a same-size edit whose old mtime was kept, `cp -p` or clock skew, and the
    cache would serve the old text)."""
    stat = path.stat()
    digest = sha256_file(path, "data file")
    return f"{path.resolve()}:{stat.st_size}:{digest}"


def load_texts(source: TextSource):
    """A `datasets.Dataset` (or `IterableDataset` when streaming) with one column `text`."""
    import datasets
    from datasets import Features, Value

    source.validate()
    features = Features({"text": Value("string")})
    if source.is_local:
        files = resolve_files(source.path)
        formats = [file_format(f, source.format) for f in files]
        kwargs = {
            "files": [str(f) for f in files],
            "formats": formats,
            "text_field": source.text_field,
            "max_documents": source.max_documents,
            "stamps": [_file_stamp(f) for f in files],
        }
        if source.is_streaming:
            # the lists in gen_kwargs make one shard per file (several processes split the files between them);
            # the document limit applies to the whole stream, not per shard
            stream = datasets.IterableDataset.from_generator(
                _generate, features=features, gen_kwargs={**kwargs, "max_documents": None}
            )
            return stream.take(source.max_documents) if source.max_documents is not None else stream
        try:
            return datasets.Dataset.from_generator(_generate, features=features, gen_kwargs=kwargs)
        except datasets.exceptions.DatasetGenerationError as error:
            cause = error.__cause__ or error.__context__
            if isinstance(cause, ValueError):
                raise cause from None
            raise
    dataset = datasets.load_dataset(source.path, source.name, split=source.split, streaming=source.is_streaming)
    columns = dataset.column_names
    if columns is not None and source.text_field not in columns:
        raise ValueError(
            f"{source.describe()}: no column {source.text_field!r} (columns: {columns}); set text_field to the text column"
        )
    dataset = dataset.select_columns([source.text_field])
    if source.text_field != "text":
        dataset = dataset.rename_column(source.text_field, "text")
    if source.max_documents is not None:
        dataset = dataset.take(source.max_documents) if source.is_streaming else dataset.select(
            range(min(source.max_documents, len(dataset)))
        )
    return dataset


def iter_texts(source: TextSource, limit: int | None = None) -> Iterator[str]:
    """The documents of a source in order (for tokenizer training and perplexity), at most `limit`."""
    if source.is_local:
        source.validate()
        count = 0
        for file in resolve_files(source.path):
            for text in iter_file_texts(file, file_format(file, source.format), source.text_field):
                if (limit is not None and count >= limit) or (
                    source.max_documents is not None and count >= source.max_documents
                ):
                    return
                count += 1
                yield text
        return
    dataset = load_texts(source)
    for index, record in enumerate(dataset):
        if limit is not None and index >= limit:
            return
        text = record["text"]
        if not isinstance(text, str):
            raise ValueError(f"{source.describe()}, record {index}: {source.text_field!r} is not a string")
        yield text
