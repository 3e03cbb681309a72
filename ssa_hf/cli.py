"""`ssa-hf` command line. Each subcommand lives in `ssa_hf/commands/<name>.py` and calls one package function.

The arguments are parsed before anything heavy is imported (a command imports torch and transformers only when
it runs), so `--help` and typos answer at once; a mistyped command or option gets the closest valid name.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
import os
import pkgutil
import re
import sys

from . import commands

_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)")


def closest(word: str, candidates) -> str | None:
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


class SuggestingParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors name the closest command or option to a mistyped one."""

    def option_strings(self) -> list[str]:
        return [s for s in self._option_string_actions if s.startswith("--")]

    def suggestion(self, message: str) -> str:
        choice = _INVALID_CHOICE.search(message)
        if choice:
            match = closest(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
            return f" (did you mean '{match}'?)" if match else ""
        unknown = _UNRECOGNIZED.search(message)
        if unknown:
            hints = []
            for word in unknown.group(1).split():
                name = word.split("=", 1)[0]
                match = closest(name, self.option_strings()) if name.startswith("-") else None
                if match:
                    hints.append(f"{name} -> {match}")
            return f" (did you mean: {', '.join(hints)}?)" if hints else ""
        return ""

    def error(self, message: str):
        super().error(message + self.suggestion(message))


def build_parser() -> SuggestingParser:
    parser = SuggestingParser(prog="ssa-hf", description="Scaled Signed Averaging attention for Hugging Face.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").register(subparsers)
    parser.commands = subparsers.choices  # name -> its parser
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed command line; a command that sets `extra_args=True` gets the options it does not declare as
    `args.extra_args` (parsed when it runs), every other command refuses them."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "extra_args", False) is True:
        args.extra_args = extra
    elif extra:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


class DropMessages(logging.Filter):
    """Drops (and counts) library log records that hold nothing the user can act on."""

    def __init__(self, *fragments: str):
        super().__init__()
        self.fragments, self.dropped = fragments, 0

    def filter(self, record: logging.LogRecord) -> bool:
        if any(fragment in record.getMessage() for fragment in self.fragments):
            self.dropped += 1
            return False
        return True


# logger -> message fragments dropped from it: accelerate's save_state warns about every tied weight it drops from
# the file (transformers ties them again on load, and the tests check that loaded models are identical)
_NOISE = {"accelerate.utils.other": ("Removed shared tensor",)}


def configure_logging(verbose: bool = False) -> None:
    """Log format and levels of the command line (also used by scripts/pretrain.py). Off a terminal (a log file,
    CI), progress bars are off (the Hub's, datasets', and every tqdm bar, lm-eval's included, through tqdm's
    TQDM_DISABLE): their carriage-return updates only clutter the file; the commands log plain lines instead."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # libraries' INFO lines (accelerate's per-file checkpoint messages, HTTP requests) are nothing to act on
    for noisy in ("httpx", "urllib3", "filelock", "fsspec", "matplotlib", "PIL", "torch", "datasets", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for name, fragments in _NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropMessages) for f in logger.filters):
            logger.addFilter(DropMessages(*fragments))
    if not sys.stderr.isatty():
        for variable in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
            os.environ.setdefault(variable, "1")


@contextlib.contextmanager
def summarised_warnings(logger_name: str, fragments: tuple[str, ...], summary: str):
    """Within the block, the warnings of `logger_name` that contain one of `fragments` (one per document, say) are
    counted instead of printed; afterwards `summary % count` is logged once, if any came."""
    logger, drop = logging.getLogger(logger_name), DropMessages(*fragments)
    logger.addFilter(drop)
    try:
        yield drop
    finally:
        logger.removeFilter(drop)
        if drop.dropped:
            logging.getLogger("ssa_hf").warning(summary, drop.dropped)


def show_progress(args) -> bool:
    """Progress bars for a command: on a terminal, unless --no-progress."""
    return not getattr(args, "no_progress", False) and sys.stderr.isatty()


def os_error_line(error: OSError) -> str:
    """Any other OSError (a file or folder in the wrong place, a library's "cannot find or open" error) in one
    line: it is about the user's files or system, not a bug a traceback would help with."""
    path = error.filename2 or error.filename
    if isinstance(error, IsADirectoryError) and path:
        return f"{path} is a folder where a file is expected: give a file path (or move the folder away)"
    if isinstance(error, NotADirectoryError) and path:
        return f"{path}: a part of this path is a file where a folder is expected; give another path"
    return " ".join(str(error).split()) or type(error).__name__


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.verbose)
    try:
        extra = getattr(sys.modules.get(getattr(args.func, "__module__", "")), "EXTRA", None)
        if extra:  # before any work: a missing optional dependency is one line naming the pip command
            from .extras import require_extra

            require_extra(extra, f"ssa-hf {args.command}")
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, NotImplementedError, KeyError) as error:
        print(f"ssa-hf {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a file-size limit, a read-only folder: one line saying what to change
        from .reporting import describe_os_error

        message = describe_os_error(error) or os_error_line(error)
        print(f"ssa-hf {args.command}: error: {message}", file=sys.stderr)
        return 2
    except Exception as error:  # a damaged weight file read where no check named it first: still one line
        if type(error).__name__ != "SafetensorError":
            raise
        print(f"ssa-hf {args.command}: error: a safetensors file is damaged or truncated ({error}): copy or "
              "download it again", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
