"""The one output-folder helper: every pipeline writes its results as JSON + markdown + PNG through it, and
files and folders appear atomically (`atomic_write_bytes`, `atomic_folder`).

The one rule for what a command writes, replaces or deletes (`refuse_link_path`, used by `OutputDir`,
`atomic_folder` and `open_for_append`): no part of the path below the command's output folder is a symbolic link,
checked on the path as given (never resolved first), so nothing is written, replaced or deleted through a link;
a folder a command owns whole (a run folder, an ICL or reproduce output) is refused if it holds a link leading out
of it (`refuse_links_out`); a destination that is replaced must not hold, equal or lie inside a source
(`refuse_overlap`) and must be a folder the command wrote (`check_replaceable`), before anything changes."""

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
        with writing(path), os.fdopen(fd, "wb") as handle:
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


class LinkOutsideError(ValueError):
    """A folder ssa-hf writes (or publishes) holds a symbolic link that leads out of it."""


def links_leaving(folder: str | os.PathLike) -> list[tuple[Path, str]]:
    """Every symbolic link under `folder` (walked without following links) whose target lies outside `folder`
    , as (link, target), in walk order."""
    root = Path(folder).resolve()
    found = []
    for parent, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            path = Path(parent) / name
            if path.is_symlink():
                target = os.path.realpath(path)
                if not Path(target).is_relative_to(root):
                    found.append((path, target))
    return found


def refuse_links_out(folder: str | os.PathLike, what: str = "output folder") -> None:
    """Raise LinkOutsideError naming every link that leads out of `folder` (nothing is written through such a
    link: a symlinked `final/` or checkpoint would have the files it points at replaced)."""
    if not Path(folder).is_dir():
        return
    found = links_leaving(folder)
    if found:
        listed = "; ".join(f"{link} -> {target}" for link, target in found[:5])
        more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
        raise LinkOutsideError(
            f"the {what} {folder} holds {len(found)} symbolic link(s) leading out of it: {listed}{more}. ssa-hf never "
            "writes or reads through a link out of a folder it writes; replace each link by a real file or folder, "
            "or remove it")


def refuse_link_path(root: str | os.PathLike, path: str | os.PathLike, what: str = "output folder") -> Path:
    """The one check before ssa-hf writes, replaces or deletes `path` under the folder `root`: `path` lies under
    `root` (no `..`), and no part of it below `root` - `path` itself included - is a symbolic link, checked on the
    path as given (a planted link is refused even when it points inside `root`: it would make one run write into
    another's folder). `root` itself is the user's choice and not checked. Returns `path` (absolute)."""
    root, path = Path(os.path.abspath(root)), Path(os.path.abspath(path))  # (abspath normalises, never follows)
    if path != root and not path.is_relative_to(root):
        raise LinkOutsideError(f"{path} is not inside the {what} {root}; ssa-hf writes only inside it")
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise LinkOutsideError(
                f"{current} is a symbolic link (to {os.path.realpath(current)}) inside the {what} {root}; ssa-hf "
                "never writes, replaces or deletes through a link: remove the link (or write elsewhere)")
    return path


def refuse_overlap(destination: str | os.PathLike, sources: Sequence[str | os.PathLike],
                   what: str = "destination") -> None:
    """A destination that is written or replaced must not equal, hold or lie inside a folder it is made from
    (replacing it would delete the source, or write into it); compared after resolving links."""
    dst = Path(os.path.realpath(destination))
    for source in sources:
        src = Path(os.path.realpath(source))
        if dst == src or dst.is_relative_to(src) or src.is_relative_to(dst):
            relation = ("is" if dst == src else "lies inside" if dst.is_relative_to(src) else "holds")
            raise ValueError(f"{what} {destination} {relation} the source {source}; give a destination outside the "
                             "source that does not contain it")


def check_replaceable(destination: str | os.PathLike, overwrite: bool, owner_file: str | None = None,
                      what: str = "destination") -> None:
    """Before anything changes: an existing `destination` is replaced only with `overwrite`, and then only if it
    is a folder this kind of command wrote - empty, or holding `owner_file` (a regular file, e.g. convert's
    ssa_conversion.json) - never a file or a folder of the user's."""
    destination = Path(destination)
    if destination.is_symlink():
        raise LinkOutsideError(f"{destination} is a symbolic link (to {os.path.realpath(destination)}); ssa-hf "
                               "replaces folders, never what a link points at: remove the link or write elsewhere")
    if not destination.exists():
        return
    if not overwrite:
        raise DestinationExistsError(f"{destination} already exists; remove it or pass overwrite=True")
    if not destination.is_dir():
        raise ValueError(f"{what} {destination} is a file, not a folder; remove it or give another path")
    if owner_file is not None and any(destination.iterdir()):
        marker = destination / owner_file
        if marker.is_symlink() or not marker.is_file():
            raise ValueError(f"{what} {destination} is not a folder ssa-hf wrote (it has no {owner_file}); "
                             "overwriting replaces only such folders: remove it yourself, or give another path")


def open_for_append(root: str | os.PathLike, path: str | os.PathLike, what: str = "output folder"):
    """`path` (under `root`, checked by `refuse_link_path`) opened for appending text; a link planted there
    after the check is refused too (O_NOFOLLOW), never appended through."""
    path = refuse_link_path(root, path, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise LinkOutsideError(f"{path} is a symbolic link; ssa-hf never appends through a link: remove it") \
                from None
        raise
    return os.fdopen(fd, "a", encoding="utf-8")


class DestinationExistsError(FileExistsError, ValueError):
    """The destination folder exists and overwriting was not asked for (a ValueError too, so the CLI reports it)."""


class NoSpaceError(OSError, ValueError):
    """The file system is full (or over quota); a ValueError too, so the CLI reports it without a traceback."""


class FileTooLargeError(NoSpaceError):
    """A file outgrew what may be written (the file system's limit, or the process's file-size limit `ulimit -f`)."""


def is_too_large(error: BaseException) -> bool:
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return True
    return "File too large" in str(error) or "os error 27" in str(error)


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Name the file when writing it fails for want of room (a library's own error, e.g. safetensors', included)."""
    try:
        yield
    except NoSpaceError:
        raise
    except Exception as error:
        name = Path(path).name
        if is_too_large(error):
            raise FileTooLargeError(errno.EFBIG, f"{name} is too large to write at {Path(path).parent} (the file "
                                    "system's limit, or the file-size limit `ulimit -f`): raise the limit or write "
                                    "elsewhere") from error
        if is_no_space(error):
            raise NoSpaceError(errno.ENOSPC, f"no space left to write {name} at {Path(path).parent}: free space or "
                               "write elsewhere") from error
        raise


def describe_os_error(error: OSError) -> str | None:
    """One line for an OSError a user can fix (no space, too large, read-only, no permission); None for others."""
    where = f" ({error.filename})" if error.filename else ""
    if is_too_large(error):
        return f"a file is too large to write{where}: raise the file-size limit (`ulimit -f`) or write elsewhere"
    if is_no_space(error):
        return f"no space left on the device{where}: free space or write elsewhere"
    if error.errno == errno.EROFS:
        return f"read-only file system{where}: write to a folder on a writable one"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{where}: give a path you can write (and read), or change its permissions"
    return None


def is_no_space(error: BaseException) -> bool:
    """A write that failed because the disk is full or over quota (OSError, or a library's own error type)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(error) or "os error 28" in str(error)


@contextlib.contextmanager
def atomic_folder(destination: str | os.PathLike, overwrite: bool = False, *, root: str | os.PathLike | None = None,
                  sources: Sequence[str | os.PathLike] = (), owner_file: str | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder beside `destination`; on success it replaces `destination` by renames
    (the old folder, if `overwrite`, is moved to `.<name>.old` and removed once the new one is in place, so a stop
    between the two renames leaves it there to be found). On any error the temporary folder is removed and
    nothing else changes; a full disk is reported as a NoSpaceError naming the folder.
    Checked first, on the path as given: no link from `root` (default: the destination's parent) down to the
    destination (`refuse_link_path`), no overlap with `sources` (`refuse_overlap`), and an existing destination
    replaced only with `overwrite` and only if it holds `owner_file` (`check_replaceable`)."""
    destination = Path(os.path.abspath(destination))  # (normalised, never resolved: a link is seen as a link)
    refuse_link_path(destination.parent if root is None else root, destination)
    refuse_overlap(destination, sources)
    check_replaceable(destination, overwrite, owner_file)
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


def make_output_folder(path: Path, what: str = "output folder") -> Path:
    """Create `path` (and its parents), or a ValueError in one line: a file in the way, no permission, no space."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path} is a file, not a folder; give a folder path (or move the file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocking = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), path)
        raise ValueError(f"{what} {path} cannot be created: {blocking} is a file; give another path") from None
    except PermissionError:
        raise ValueError(f"{what} {path} cannot be created: permission denied; give a folder you can write") from None
    except OSError as error:
        if is_no_space(error):
            raise NoSpaceError(errno.ENOSPC, f"no space left to create {what} {path}; free space") from None
        raise
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path} is not writable (read-only); give a folder you can write, or change its "
                         "permissions")
    return path


class OutputDir:
    """A command's output folder: `write_json`, `write_markdown`, `save_figure` (PNG), each written atomically;
    `file(name)` and `folder(name)` give checked paths inside it (`refuse_link_path`: no link below the folder,
    on the path as given), `append(name)` a log opened without following a link, `replace(name)` an
    `atomic_folder` inside it. Checked at once, before anything is written: `writes`, the names (or glob patterns)
    the command will write there - none may be a link - and with `owned=True`, for a folder the command owns whole
    (a run's or an experiment's), every link that leads out of it (`refuse_links_out`)."""

    def __init__(self, path: str | os.PathLike, what: str = "output folder", *, owned: bool = False,
                 writes: Sequence[str] = ()):
        import glob

        self.path, self.what = Path(path), what
        make_output_folder(self.path, what)
        if owned:
            refuse_links_out(self.path, what)
        for pattern in writes:
            for match in sorted(glob.glob(os.path.join(glob.escape(str(self.path)), pattern))):
                refuse_link_path(self.path, match, what)

    def file(self, name: str | os.PathLike) -> Path:
        """The path of `name` (may hold sub-folders) inside the folder, checked: nothing on it is a link."""
        refuse_link_path(self.path, self.path / name, self.what)
        return self.path / name

    def folder(self, name: str | os.PathLike, what: str | None = None, owned: bool = True) -> Path:
        """The sub-folder `name`, checked and created; `owned`: it is the command's whole (a link out is refused)."""
        path = self.file(name)
        make_output_folder(path, what or f"{self.what}'s folder")
        refuse_link_path(self.path, path, self.what)  # (a link planted between the check and the creation)
        if owned:
            refuse_links_out(path, what or f"{self.what}'s folder")
        return path

    def append(self, name: str | os.PathLike):
        return open_for_append(self.path, self.path / name, self.what)

    def replace(self, name: str | os.PathLike, *, overwrite: bool = True, sources: Sequence[str | os.PathLike] = (),
                owner_file: str | None = None):
        """`atomic_folder` for the sub-folder `name` (checked from this folder down)."""
        return atomic_folder(self.path / name, overwrite, root=self.path, sources=sources, owner_file=owner_file)

    def write_json(self, name: str, obj: Any) -> Path:
        return atomic_write_json(self.file(name), obj)

    def write_markdown(self, name: str, text: str) -> Path:
        return atomic_write_bytes(self.file(name), text.rstrip("\n").encode() + b"\n")

    def save_figure(self, name: str, figure) -> Path:
        import io

        import matplotlib.pyplot as plt

        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(figure)
        return atomic_write_bytes(self.file(name), buffer.getvalue())


def pyplot():
    """matplotlib.pyplot with a file-only backend (no display on servers and CI)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


class ProgressLines:
    """Plain progress lines for a long job whose progress bar is off (no terminal: a log file, CI, a batch job):
    `update(message, *args)` logs at INFO at most once per `every_s` seconds (the first call always), so that a
    job printing nothing for minutes says where it is."""

    def __init__(self, logger, enabled: bool, every_s: float = 30.0):
        import time

        self.logger, self.enabled, self.every_s, self._clock = logger, enabled, every_s, time.monotonic
        self._last: float | None = None

    def update(self, message: str, *args) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if self._last is None or now - self._last >= self.every_s:
            self._last = now
            self.logger.info(message, *args)
