"""`ssa-hf` command line. Each subcommand lives in `ssa_hf/commands/<name>.py` and calls one package function.

The arguments are parsed before anything heavy is imported (a command imports torch and transformers only when
it runs), so `--help` and typos answer at once; a mistyped command or option gets the closest valid name.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
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


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # libraries' INFO lines (accelerate's per-file checkpoint messages, HTTP requests) are nothing to act on
    for noisy in ("httpx", "urllib3", "filelock", "fsspec", "matplotlib", "PIL", "torch", "datasets", "accelerate"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, NotImplementedError, KeyError) as error:
        print(f"ssa-hf {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
