"""The one output-folder helper: every pipeline writes its results as JSON + markdown + PNG through it."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write to a temporary file in the same folder, fsync, then rename: readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible instead of failing
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        return _jsonable(value.item())
    if isinstance(value, Path):
        return str(value)
    return value


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_bytes(path, (json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n").encode())


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], floatfmt: str = ".4g") -> str:
    def cell(v):
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


class OutputDir:
    """A results folder: `write_json`, `write_markdown`, `save_figure` (PNG), each written atomically."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, obj: Any) -> Path:
        return atomic_write_json(self.path / name, obj)

    def write_markdown(self, name: str, text: str) -> Path:
        return atomic_write_bytes(self.path / name, text.rstrip("\n").encode() + b"\n")

    def save_figure(self, name: str, figure) -> Path:
        import io

        import matplotlib.pyplot as plt

        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(figure)
        return atomic_write_bytes(self.path / name, buffer.getvalue())


def pyplot():
    """matplotlib.pyplot with a file-only backend (no display on servers and CI)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt
