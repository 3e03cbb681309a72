"""`ssa-hf compare`: one report (tables and plots) from eval, probe and perplexity results of several models."""

from __future__ import annotations


def run(args) -> int:
    from ..evaluation._config import load_config
    from ..evaluation.compare import CompareConfig, run_compare

    names = args.names.split(",") if args.names else None
    overrides = dict(results=args.results or None, names=names, output_dir=args.output_dir, title=args.title)
    config = load_config(CompareConfig, args.config, **overrides)
    config.output_dir = config.output_dir or "outputs/compare"
    result = run_compare(config)
    print(result.markdown)
    print(f"\nwrote {config.output_dir}/compare.md, compare.json and {len([f for f in result.files if f.endswith('.png')])} plot(s)")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare", help="one report (tables and plots) from eval, probe and perplexity results of several models"
    )
    parser.add_argument("results", nargs="*", metavar="RESULT",
                        help="results JSON files or folders (eval.json, probe.json, lm-eval output, perplexity JSON)")
    parser.add_argument("--names", help="comma-separated model names, one per RESULT; empty keeps the name in the file (e.g. ,,ssa,softmax)")
    parser.add_argument("--title", help="report title")
    parser.add_argument("--config", help="YAML file of CompareConfig fields (command-line options win)")
    parser.add_argument("--output-dir", help="(default outputs/compare) folder for compare.md, compare.json, plots")
    parser.set_defaults(func=run)
