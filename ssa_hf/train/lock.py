"""One run per output folder: a file lock held for the run's lifetime.

The lock is an OS lock (`filelock`, flock on Unix) on `<folder>/run.lock`: the operating system releases it when
the holding process ends in any way (kill -9 included), so a lock left by a dead process never blocks. Beside it,
`run.lock.json` says who holds it (pid, host, start time, command line) so that a second run's error names the
first one.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from pathlib import Path

from ..regular_files import read_json
from ..reporting import atomic_write_json, make_output_folder, refuse_links_out

LOCK_FILE = "run.lock"
OWNER_FILE = "run.lock.json"


class RunLockedError(RuntimeError, ValueError):
    """Another process holds the folder's run lock (a ValueError too, so the CLI reports it without a traceback)."""


def _describe(owner: dict | None) -> str:
    if not owner:
        return "another process (its run.lock.json is missing or unreadable)"
    return (f"process {owner.get('pid')} on host {owner.get('host')!r}, started {owner.get('started')} "
            f"({' '.join(owner.get('command') or [])[:200]})")


class RunLock:
    """`with RunLock(folder):` or `acquire()` / `release()`; raises RunLockedError if another process holds it."""

    def __init__(self, folder: str | os.PathLike, purpose: str = "training run"):
        self.folder = Path(folder)
        self.purpose = purpose
        self._lock = None

    @property
    def owner_file(self) -> Path:
        return self.folder / OWNER_FILE

    def owner(self) -> dict | None:
        try:
            return read_json(self.owner_file)
        except (OSError, ValueError):
            return None

    def acquire(self) -> "RunLock":
        from filelock import FileLock, Timeout

        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"output folder {self.folder} is a file, not a folder; give a folder path (or move the file)")
        refuse_links_out(self.folder, f"{self.purpose} folder")  # before the lock file is opened (truncated) there
        make_output_folder(self.folder, f"{self.purpose} folder")
        lock = FileLock(str(self.folder / LOCK_FILE), timeout=0)
        try:
            lock.acquire()
        except PermissionError:
            raise ValueError(f"{self.folder / LOCK_FILE} cannot be opened: permission denied; make the "
                             f"{self.purpose} folder writable or use another one") from None
        except Timeout:
            raise RunLockedError(
                f"{self.folder} is in use by {_describe(self.owner())}: two runs in one output folder would mix "
                f"their checkpoints. Wait for that {self.purpose} to end, stop it, or use another output folder"
            ) from None
        self._lock = lock
        atomic_write_json(self.owner_file, {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": sys.argv,
        })
        return self

    def release(self) -> None:
        if self._lock is None:
            return
        try:
            self.owner_file.unlink(missing_ok=True)
        finally:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
