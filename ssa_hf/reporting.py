"""The one output-folder helper: every pipeline writes its results as JSON + markdown + PNG through it, and
files and folders appear atomically (`atomic_write_bytes`, `atomic_folder`)."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence


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


class DestinationExistsError(FileExistsError, ValueError):
    """The destination folder exists and overwriting was not asked for (a ValueError too, so the CLI reports it)."""


class NoSpaceError(OSError, ValueError):
    """The file system is full (or over quota); a ValueError too, so the CLI reports it without a traceback."""


def is_no_space(error: BaseException) -> bool:
    """A write that failed because the disk is full or over quota (OSError, or a library's own error type)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(error) or "os error 28" in str(error)


@contextlib.contextmanager
def atomic_folder(destination: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder beside `destination`; on success it replaces `destination` by renames
    (the old folder, if `overwrite`, is moved to `.<name>.old` and removed once the new one is in place, so a stop
    between the two renames leaves it there to be found). On any error the temporary folder is removed and
    nothing else changes; a full disk is reported as a NoSpaceError naming the folder."""
    destination = Path(destination).resolve()
    if destination.exists() and not overwrite:
        raise DestinationExistsError(f"{destination} already exists; remove it or pass overwrite=True")
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.tmp-"))
    except OSError as error:
        raise (NoSpaceError(errno.ENOSPC, f"no space left on {destination.parent}") if is_no_space(error) else error)
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; a checkpoint folder should be readable like any other
    try:
        yield tmp
        old = destination.with_name(f".{destination.name}.old")
        if destination.exists():
            if not overwrite:
                raise DestinationExistsError(f"{destination} appeared while writing; nothing was replaced")
            shutil.rmtree(old, ignore_errors=True)  # (left by an earlier stop, while `destination` was complete)
            os.rename(destination, old)
        os.rename(tmp, destination)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_no_space(error) and not isinstance(error, NoSpaceError):
            raise NoSpaceError(errno.ENOSPC, f"no space left on {destination.parent}: {destination.name} was not "
                               "written (the previous version, if any, is kept); free space and run again") from error
        raise


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary folders `atomic_folder` leaves when a process is killed while writing (call it only
    while holding the folder's run lock, so that no other process is writing there)."""
    removed = []
    folder = Path(folder)
    if folder.is_dir():
        for child in folder.iterdir():
            if child.name.startswith(".") and ".tmp-" in child.name and child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child)
    return removed


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
