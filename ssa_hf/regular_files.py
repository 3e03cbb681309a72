"""Files ssa-hf reads are regular files: a FIFO (named pipe), a device or a socket where a weight, config, JSON,
YAML, data or tokenizer file is expected would block the reader forever (or stream without end), so it is refused
before anything opens it, in one line naming the path.

`check_regular_file(path)` checks a path before a library opens it (safetensors, transformers, tokenizers,
datasets); `open_regular(path)` opens it without blocking and checks what was opened (no window between the check
and the open); `read_text`, `read_bytes` and `read_json` read through it; `check_folder_files(folder)` checks
every entry of a model or checkpoint folder. Links are followed: a link to a FIFO is refused as the FIFO.

Importing this module is light (standard library only).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
from pathlib import Path

KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


class NotARegularFileError(ValueError):
    """A path that should be a regular file is a FIFO, a device, a socket or a folder (a ValueError: the CLI
    prints it in one line)."""


def _refusal(path, mode: int, what: str | None) -> NotARegularFileError:
    kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
    name = f"{what} {path}" if what else str(path)
    if stat.S_ISDIR(mode):
        return NotARegularFileError(f"{name} is a folder, not a file; give the file's path")
    return NotARegularFileError(f"{name} is {kind}, not a regular file (reading it could block forever); "
                                f"replace it with the file itself")


def check_regular_file(path: str | os.PathLike, what: str | None = None) -> Path:
    """`path` unchanged when it is a regular file (or a link to one) or does not exist (the caller reports a missing
    file); else NotARegularFileError. `what` names the file in the message ("weights file")."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return Path(path)
    if not stat.S_ISREG(mode):
        raise _refusal(path, mode, what)
    return Path(path)


def open_regular(path: str | os.PathLike, mode: str = "r", what: str | None = None, **kwargs):
    """`open(path, mode, **kwargs)` for reading, refusing anything but a regular file without blocking: opened
    non-blocking (a FIFO without a writer would block the open itself), checked on the descriptor, then made
    blocking again."""
    if any(c in mode for c in "wax+"):
        raise ValueError(f"open_regular reads; got mode {mode!r}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refusal(path, st.st_mode, what)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, what: str | None = None) -> bytes:
    with open_regular(path, "rb", what) as handle:
        return handle.read()


def sha256_file(path: str | os.PathLike, what: str | None = None) -> str:
    """The sha256 of a regular file's content, read in 1 MB blocks."""
    with open_regular(path, "rb", what) as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_text(path: str | os.PathLike, what: str | None = None, encoding: str = "utf-8", errors: str = "strict") -> str:
    with open_regular(path, "r", what, encoding=encoding, errors=errors) as handle:
        return handle.read()


def read_json(path: str | os.PathLike, what: str | None = None):
    """The parsed JSON of a regular file (json's own errors for bad JSON)."""
    return json.loads(read_text(path, what))


def check_folder_files(folder: str | os.PathLike, what: str = "model folder") -> Path:
    """`folder` unchanged when each of its entries (not recursing) is a regular file or a folder (links followed; a
    dangling link is left to the reader); else NotARegularFileError naming the entry. For the folders libraries read
    by path (from_pretrained: config, weights, tokenizer files)."""
    folder = Path(folder)
    if not folder.is_dir():
        return folder
    for entry in sorted(folder.iterdir()):
        try:
            mode = entry.stat().st_mode
        except OSError:
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise _refusal(entry, mode, f"{what} entry")
    return folder


# the JSON files of a model folder that transformers reads as objects (a list or a number there gave an
# AttributeError deep inside it)
MODEL_FOLDER_JSON = ("config.json", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
                     "generation_config.json", "model.safetensors.index.json", "preprocessor_config.json")


def read_json_object(path: str | os.PathLike, what: str | None = None) -> dict:
    """A regular file holding a JSON object, else a one-line ValueError naming the file and what is wrong."""
    try:
        data = read_json(path, what)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error}); copy or download the file again") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error}); copy or download the file again, or fix it") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object ({{...}}), got a {type(data).__name__}; copy or download "
                         f"the file again, or fix it")
    return data


def check_model_folder(folder: str | os.PathLike, what: str = "model folder") -> Path:
    """What transformers would otherwise stumble over in a local model folder, as one line naming the file: entries
    that are not regular files or folders (a FIFO would block the load), JSON files that do not parse or are not
    objects, a config.json without a model_type or with sizes that are not whole numbers >= 1. A folder that does
    not exist (a Hub id) is left to the loader."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return folder
    check_folder_files(folder, what)
    for path in folder.glob("*.safetensors"):  # a folder named like weights: refused by name too
        check_regular_file(path, "weights file")
    for name in MODEL_FOLDER_JSON:
        if (folder / name).exists():
            data = read_json_object(folder / name)  # (a folder there: refused by open_regular)
            if name == "config.json":
                _check_model_config(folder / name, data)
    return folder


def _check_model_config(path: Path, config: dict) -> None:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"{path}: no model_type (got {model_type!r}); a config saved by save_pretrained names its "
                         f"model type, e.g. \"model_type\": \"ssa_llama\": copy the folder again or fix the file")
    from .presets import check_sizes

    check_sizes(object, config, str(path))
