"""Small synthetic corpora written by the tests themselves (no downloads, no shared data)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

SUBJECTS = ["the cat", "a dog", "the little bird", "my friend", "the teacher", "a child", "the farmer", "she", "he",
            "they", "we", "the old man"]
VERBS = ["sees", "likes", "finds", "wants", "makes", "takes", "gives", "reads", "draws", "knows", "eats", "opens"]
OBJECTS = ["the ball", "a red apple", "the big house", "some water", "a book", "the green tree", "his hat",
           "the moon", "a song", "the door", "her shoes", "a small box"]
ENDINGS = [".", "!", "?", "today .", "again .", "in the garden ."]


def sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)}" for _ in range(count)]


def documents(count: int, per_document: int = 8, seed: int = 0) -> list[str]:
    flat = sentences(count * per_document, seed)
    return [" ".join(flat[i * per_document : (i + 1) * per_document]) for i in range(count)]


def write_text(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_jsonl(path: Path, texts: list[str], field: str = "text", gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(texts)).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_parquet(path: Path, texts: list, field: str = "text") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({field: texts}), path)
    return path
