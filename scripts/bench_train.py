#!/usr/bin/env python
"""Training tokens/s of SSA and softmax on the same tiny config, in one run, and their ratio (a benchmark, not a
test). Variants are "scoring" (ssa-hf's ssa_auto attention) or "scoring@attn_implementation" ("softmax@sdpa":
PyTorch's fused softmax attention, the baseline a softmax user would run).

    python scripts/bench_train.py --config configs/pretrain/tiny_causal.yaml --steps 20 --repeats 2 \
        --output-dir outputs/bench_train

Set MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 for stable CPU timings (REFERENCE.md 5).
"""

import argparse
import logging
import sys


def main(argv=None) -> int:
    from ssa_hf.train.bench import DEFAULT_VARIANTS, BenchConfig, benchmark_training
    from ssa_hf.options import parse_scalar

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/pretrain/tiny_causal.yaml", help="pretraining config to time")
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), help="scoring[@attn_implementation]")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps at the start of each run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per variant (median reported)")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="config overrides (data.block_size=256)")
    parser.add_argument("--output-dir", default="outputs/bench_train", help="bench_train.json and bench_train.md")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = parse_scalar(value)
    result = benchmark_training(
        BenchConfig(config=args.config, variants=args.variants, steps=args.steps, warmup_steps=args.warmup_steps,
                    repeats=args.repeats, overrides=overrides),
        output_dir=args.output_dir,
    )
    print(result.table)
    if result.ratio_ssa_over_softmax:
        print(f"\nSSA / softmax tokens/s: {result.ratio_ssa_over_softmax:.3f}")
    print(f"machine: {result.machine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
