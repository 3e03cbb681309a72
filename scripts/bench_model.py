"""Training and decoding throughput of SSALlama with SSA against the same model with softmax, in one run.

Variants: `ssa` and `softmax` through the same ssa-hf attention (`ssa_auto`: on CPU the blockwise kernel for
training at L > 256, eager for short problems and decoding steps), and `softmax` through PyTorch's SDPA
(transformers' `sdpa`, the fastest softmax available). Same weights, same data.

    python scripts/bench_model.py --quick                  # tiny preset at L=256 and 1024, 114M at L=256
    python scripts/bench_model.py --presets decoder_114m --lengths 1024 --batch 1

Training: tokens/s of forward+backward+AdamW steps (median over steps after one warm-up step). Decoding: new
tokens/s of greedy `generate` with the KV cache. Prints a markdown table with ratios to softmax (ssa_auto) and
to SDPA, and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

VARIANTS = [("ssa", "ssa", "ssa_auto"), ("softmax", "softmax", "ssa_auto"), ("softmax sdpa", "softmax", "sdpa")]


def build(preset: str, scoring: str, implementation: str):
    import torch

    from ssa_hf.presets import build_model, load_model_config

    torch.manual_seed(0)
    config = load_model_config(preset, attention_scoring=scoring)
    return build_model(config, "causal_lm", attn_implementation=implementation)


def train_tokens_per_s(model, batch: int, length: int, steps: int) -> float:
    import torch

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (batch, length), generator=g)
    times = []
    for step in range(steps + 1):
        start = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step:  # the first step compiles and warms caches
            times.append(time.perf_counter() - start)
    return batch * length / statistics.median(times)


def decode_tokens_per_s(model, prompt: int, new_tokens: int) -> float:
    import torch

    model.eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (1, prompt), generator=g)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
        start = time.perf_counter()
        model.generate(ids, **kwargs)
    return new_tokens / (time.perf_counter() - start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="tiny_llama,decoder_114m")
    parser.add_argument("--lengths", default="256,1024")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="tiny at 256 and 1024, decoder_114m at 256")
    parser.add_argument("--output", default="bench_model.json")
    args = parser.parse_args(argv)
    os.environ.update({"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"})
    import torch

    torch.set_num_threads(args.threads)
    presets = args.presets.split(",")
    lengths = [int(x) for x in args.lengths.split(",")]
    plan = [(p, L) for p in presets for L in lengths]
    if args.quick:
        plan = [("tiny_llama", 256), ("tiny_llama", 1024), ("decoder_114m", 256)]
    rows = []
    for preset, length in plan:
        for name, scoring, implementation in VARIANTS:
            model = build(preset, scoring, implementation)
            row = {"preset": preset, "length": length, "variant": name, "attn_implementation": implementation,
                   "train_tokens_per_s": train_tokens_per_s(model, args.batch, length, args.steps),
                   "decode_tokens_per_s": decode_tokens_per_s(model, args.prompt, args.new_tokens)}
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
            del model
    for row in rows:
        same = {r["variant"]: r for r in rows if r["preset"] == row["preset"] and r["length"] == row["length"]}
        for key in ("train_tokens_per_s", "decode_tokens_per_s"):
            row[f"{key}_vs_softmax"] = row[key] / same["softmax"][key]
            row[f"{key}_vs_sdpa"] = row[key] / same["softmax sdpa"][key]
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "batch": args.batch, "steps": args.steps, "prompt": args.prompt,
               "new_tokens": args.new_tokens}
    Path(args.output).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    print(f"\nbatch {args.batch}, median of {args.steps} steps; decoding: prompt {args.prompt}, {args.new_tokens} new "
          f"tokens, greedy with KV cache; {machine['cores']} cores, {args.threads} threads, torch {machine['torch']}\n")
    print("| preset | L | variant | train tok/s | x softmax | x sdpa | decode tok/s | x softmax | x sdpa |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['preset']} | {r['length']} | {r['variant']} | {r['train_tokens_per_s']:.0f} | "
              f"{r['train_tokens_per_s_vs_softmax']:.2f} | {r['train_tokens_per_s_vs_sdpa']:.2f} | "
              f"{r['decode_tokens_per_s']:.1f} | {r['decode_tokens_per_s_vs_softmax']:.2f} | "
              f"{r['decode_tokens_per_s_vs_sdpa']:.2f} |")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
