#!/usr/bin/env python
"""Training and decoding throughput of SSALlama with SSA against the same model with softmax, in one run.

Variants (same weights, same data):
- `ssa` and `softmax` through the same ssa-hf attention (`ssa_auto`: on CPU the blockwise kernel, for training,
  prompts and decoding steps alike);
- `softmax sdpa`: PyTorch's fused softmax attention (transformers' `sdpa`), the fastest softmax available.
Presets: `tiny_llama` and `decoder_114m` (12 layers, hidden 768, 24 heads / 8 key-value heads, 50k vocabulary).

    python scripts/bench_model.py --quick        # tiny at L=256, 1024; 114M at L=256, 1024 (~10 minutes, 2 cores)
    python scripts/bench_model.py --presets decoder_114m --lengths 1024 --batch 1 --steps 3
    python scripts/bench_model.py --quick --load 2      # beside two busy processes (data-loader workers)

Training: tokens/s of forward+backward+AdamW steps (median over steps after warm-up steps).
Decoding: new tokens/s of greedy `generate` with the KV cache (one-token steps), after a warm-up generate.
The three variants of a (preset, length) live side by side and are timed alternately, step by step (the order
rotating), so that each sees the same load: on a shared or loaded machine, timing one variant after another
compares the machine's moods, not the variants.
Prints a markdown table with ratios to softmax (same attention) and to SDPA, and writes JSON. Ratios to SDPA come
twice: of medians, and paired by round (the median of the per-round speed ratios, with a distribution-free 95%
interval), the steadier one on a loaded machine, whose state can change during a cell.
Timing pins glibc's malloc thresholds (REFERENCE section 5) by re-executing itself when they are unset.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import MALLOC_ENV, BusyProcesses, busy_fraction, paired_ratio, pin_malloc_env, split_args  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VARIANTS = [("ssa", "ssa", "ssa_auto"), ("softmax", "softmax", "ssa_auto"), ("softmax sdpa", "softmax", "sdpa")]
QUICK_PLAN = [("tiny_llama", 256), ("tiny_llama", 1024), ("decoder_114m", 256), ("decoder_114m", 1024)]


def build(preset: str, scoring: str, implementation: str, max_length: int):
    import torch

    from ssa_hf.presets import build_model, load_model_config

    from ssa_hf.models.attention import own_implementation_overrides

    torch.manual_seed(0)
    overrides = {"attention_scoring": scoring, **own_implementation_overrides(implementation)}
    config = load_model_config(preset)
    if getattr(config, "max_position_embeddings", 0) < max_length:
        overrides["max_position_embeddings"] = max_length
    config = load_model_config(preset, **overrides)
    model = build_model(config, "causal_lm", attn_implementation=implementation)
    if model.config._attn_implementation != implementation:  # a baseline must be what its row says it is
        raise RuntimeError(f"asked for attn_implementation={implementation!r}, the model runs "
                           f"{model.config._attn_implementation!r}")
    return model


class TrainingRun:
    """One variant's model, optimizer and batch; `step()` times one forward+backward+AdamW step."""

    def __init__(self, model, batch: int, length: int):
        import torch

        self.model = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(3, model.config.vocab_size, (batch, length), generator=g)

    def step(self) -> float:
        start = time.perf_counter()
        loss = self.model(input_ids=self.ids, labels=self.ids).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start


def alternate(calls: dict, repeats: int, min_seconds: float = 0.0, max_repeats: int = 200) -> dict:
    """Time every call at least `repeats` times and until `min_seconds` have passed (at most `max_repeats`), the
    variants interleaved (the order rotating each round) so that all see the same machine load; returns each
    variant's list of times.  Short calls thus get many samples: beside busy processes one sample of a few
    milliseconds mostly measures where the scheduler's time slices fell."""
    names = list(calls)
    times = {name: [] for name in names}
    start, r = time.perf_counter(), 0
    while r < repeats or (time.perf_counter() - start < min_seconds and r < max_repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(calls[name]())
        r += 1
    return times


def generate_call(model, prompt: int, new_tokens: int):
    """A zero-argument function timing one greedy generate of `new_tokens` with the KV cache."""
    import torch

    model.eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (1, prompt), generator=g)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)

    def call() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            model.generate(ids, **kwargs)
            return time.perf_counter() - start

    return call


def measure(args, preset: str, length: int) -> list[dict]:
    """Training and decoding rates of every variant at one (preset, length), the variants alternating."""
    models = {name: build(preset, scoring, impl, max(length, args.prompt + args.new_tokens))
              for name, scoring, impl in VARIANTS}
    runs = {name: TrainingRun(model, args.batch, length) for name, model in models.items()}
    alternate({name: run.step for name, run in runs.items()}, args.warmup)  # builds kernels, warms caches
    train = alternate({name: run.step for name, run in runs.items()}, args.steps, args.min_seconds)
    decode = {}
    if args.decode:
        calls = {name: generate_call(model, args.prompt, args.new_tokens) for name, model in models.items()}
        alternate(calls, 1)  # warm-up
        decode = alternate(calls, args.decode_repeats, args.min_seconds)
    rows = []
    for name, scoring, impl in VARIANTS:
        step_s = statistics.median(train[name])
        row = {"preset": preset, "length": length, "variant": name, "attn_implementation": impl,
               "train_tokens_per_s": args.batch * length / step_s, "train_step_s": step_s,
               "train_steps_timed": len(train[name])}
        row["train_vs_sdpa_paired"] = paired_ratio(train["softmax sdpa"], train[name])
        if args.decode:
            row["decode_tokens_per_s"] = args.new_tokens / statistics.median(decode[name])
            row["generates_timed"] = len(decode[name])
            row["decode_vs_sdpa_paired"] = paired_ratio(decode["softmax sdpa"], decode[name])
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    return rows


def _interval(ratio: dict) -> str:
    """"0.95 [0.91, 0.99] (n=12)": a paired median ratio with its interval, or the median alone."""
    if ratio["low"] is None:
        return f"{ratio['median']:.2f} (n={ratio['rounds']})"
    return f"{ratio['median']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}] (n={ratio['rounds']})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["tiny_llama", "decoder_114m"])
    parser.add_argument("--lengths", nargs="+", default=["256", "1024"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="timed training steps (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed training steps first")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--decode-repeats", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="keep alternating training steps (and generates) until this long has passed per cell")
    parser.add_argument("--no-decode", dest="decode", action="store_false")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="tiny and decoder_114m at L=256 and 1024")
    parser.add_argument("--load", type=int, default=0,
                        help="busy processes (`while True: pass`) running during the whole measurement, as data-loader "
                             "workers or a second job would")
    parser.add_argument("--output", default="bench_model.json")
    args = parser.parse_args(argv)
    pin_malloc_env()
    sys.path.insert(0, str(REPO))
    import torch

    import ssa_hf  # noqa: F401  (registers the attention implementations)

    torch.set_num_threads(args.threads)
    plan = [(p, int(L)) for p in split_args(args.presets) for L in split_args(args.lengths)]
    if args.quick:
        plan = QUICK_PLAN
    busy_before = busy_fraction()
    rows = []
    with BusyProcesses(args.load):
        for preset, length in plan:
            rows += measure(args, preset, length)
            gc.collect()
    keys = ["train_tokens_per_s"] + (["decode_tokens_per_s"] if args.decode else [])
    for row in rows:
        same = {r["variant"]: r for r in rows if r["preset"] == row["preset"] and r["length"] == row["length"]}
        for key in keys:
            row[f"{key}_vs_softmax"] = row[key] / same["softmax"][key]
            row[f"{key}_vs_sdpa"] = row[key] / same["softmax sdpa"][key]
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
               "prompt": args.prompt, "new_tokens": args.new_tokens, "min_seconds": args.min_seconds, "malloc_env": MALLOC_ENV,
               "busy_before": busy_before, "busy_after": busy_fraction(), "busy_processes": args.load}
    lines = ["| preset | L | variant | train tok/s | x softmax | x sdpa | paired x sdpa [95% CI] | decode tok/s | x softmax "
             "| x sdpa | paired x sdpa [95% CI] |",
             "|---|---:|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        dec = (f"{r['decode_tokens_per_s']:.1f} | {r['decode_tokens_per_s_vs_softmax']:.2f} | "
               f"{r['decode_tokens_per_s_vs_sdpa']:.2f} | {_interval(r['decode_vs_sdpa_paired'])}") if args.decode \
            else "- | - | - | -"
        lines.append(f"| {r['preset']} | {r['length']} | {r['variant']} | {r['train_tokens_per_s']:.0f} | "
                     f"{r['train_tokens_per_s_vs_softmax']:.2f} | {r['train_tokens_per_s_vs_sdpa']:.2f} | "
                     f"{_interval(r['train_vs_sdpa_paired'])} | {dec} |")
    text = "\n".join(lines)
    Path(args.output).write_text(json.dumps({"machine": machine, "rows": rows, "table": text}, indent=2) + "\n")
    print(f"\nbatch {args.batch}, median of >= {args.steps} training steps (and >= {args.min_seconds} s) after {args.warmup} warm-up; decoding: prompt "
          f"{args.prompt}, {args.new_tokens} new tokens, greedy with KV cache (median of {args.decode_repeats}); "
          f"{machine['cores']} cores, {args.threads} threads, torch {machine['torch']}; {args.load} busy processes; machine busy before/after: "
          f"{busy_before}/{machine['busy_after']} (0 = idle)\n")
    print(text)
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
