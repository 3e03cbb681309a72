"""`ssa-hf perplexity`: perplexity of a causal LM on random fixed-length windows (in- and out-of-distribution)."""

from __future__ import annotations

import dataclasses

from . import add_config_arguments, config_from_args


def run(args) -> int:
    from ..cli import show_progress
    from ..evaluation.config import PerplexityConfig
    from ..evaluation.perplexity import evaluate_perplexity, perplexity_table

    config = config_from_args(PerplexityConfig, args)
    results = evaluate_perplexity(args.model, progress=show_progress(args), **dataclasses.asdict(config))
    print(perplexity_table(results))
    if config.output_dir:
        print(f"\nwrote {config.output_dir}/perplexity.json and perplexity.md")
    return 0


def register(subparsers) -> None:
    from ..evaluation.config import PerplexityConfig

    parser = subparsers.add_parser(
        "perplexity",
        help="perplexity of a causal LM on random fixed-length windows of corpora",
        description="Perplexity on N random windows of L tokens (documents joined with eos), e.g. in-distribution "
        "(--heldout: the held-out documents of the training run) and out-of-distribution "
        "(--data ../shared/data/wikitext/wiki.test.raw). Reports mean NLL, perplexity, windows and tokens.",
    )
    parser.add_argument("model", help="model folder (e.g. outputs/pretrain/RUN/final) or Hub id")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (they show on a terminal only)")
    add_config_arguments(parser, PerplexityConfig)
    parser.set_defaults(func=run)
