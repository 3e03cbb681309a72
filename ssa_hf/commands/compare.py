"""`ssa-hf compare`: one report (tables and plots) from eval, probe and perplexity results of several models."""

from __future__ import annotations

from . import add_command, config_from_args

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "eval"
SUMMARY = "one report (tables and plots) from eval, probe and perplexity results of several models"


def run(args) -> int:
    from ..evaluation.compare import run_compare
    from ..evaluation.config import CompareConfig

    names = args.names.split(",") if args.names else None  # (an empty entry keeps the file's name)
    config = config_from_args(CompareConfig, args, results=args.results or None, names=names)
    config.output_dir = config.output_dir or "outputs/compare"
    result = run_compare(config)
    print(result.markdown)
    print(f"\nwrote {config.output_dir}/compare.md, compare.json and {len([f for f in result.files if f.endswith('.png')])} plot(s)")
    return 0


def register(subparsers) -> None:
    from ..evaluation.config import CompareConfig

    parser = add_command(subparsers, "compare", run, SUMMARY, config=CompareConfig, skip=("results", "names"))
    parser.add_argument("results", nargs="*", metavar="RESULT",
                        help="results JSON files or folders (eval.json, probe.json, lm-eval output, perplexity JSON)")
    parser.add_argument("--names", help="comma-separated model names, one per RESULT; empty keeps the name in the "
                        "file (e.g. ,,ssa,softmax)")
