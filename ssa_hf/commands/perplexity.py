"""`ssa-hf perplexity`: perplexity of a causal LM on random fixed-length windows (in- and out-of-distribution)."""

from __future__ import annotations

import dataclasses

from . import add_command, config_from_args

# the optional part of the install this command needs (ssa_hf.extras; checked before it runs)
EXTRA = "eval"
SUMMARY = "perplexity of a causal LM on random fixed-length windows of corpora"
DESCRIPTION = ("Perplexity on N random windows of L tokens (documents joined with eos), e.g. in-distribution "
               "(--heldout: the held-out documents of the training run) and out-of-distribution "
               "(--data ../shared/data/wikitext/wiki.test.raw). Reports mean NLL, perplexity, windows and tokens.")


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

    add_command(subparsers, "perplexity", run, SUMMARY, DESCRIPTION, config=PerplexityConfig, progress=True
                ).add_argument("model", help="model folder (e.g. outputs/pretrain/RUN/final) or Hub id")
