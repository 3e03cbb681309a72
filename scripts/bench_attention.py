"""Benchmark every attention backend against PyTorch's SDPA softmax, measured in the same run.

For each sequence length, mode (forward, forward+backward) and variant (SDPA softmax = the baseline; every ssa-hf
backend that can run softmax, SSA, linear and CosFormer), one child process measures:
- time: the median of `--repeats` calls after a warm-up call (compilation happens there);
- peak extra memory: the process's peak resident memory during one call above its resident memory just before
  (Linux: VmHWM reset through /proc/self/clear_refs, freed heap returned with malloc_trim first).
A fresh process per cell keeps allocator state and compiled caches of one variant from biasing another. Timing
pins glibc's malloc thresholds (REFERENCE §5): without them tile buffers are mapped and zeroed afresh or not
depending on the process's history.

    python scripts/bench_attention.py                       # L in 256, 1024, 2048, 4096
    python scripts/bench_attention.py --quick               # L in 256, 1024, fewer repeats
    python scripts/bench_attention.py --lengths 2048 --output bench_attention.json

Prints a markdown table (time and memory, and their ratios to SDPA) and writes JSON.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1073741824"}

# (name, scoring, backend); backend None = PyTorch SDPA softmax
VARIANTS = [
    ("sdpa softmax", "softmax", None),
    ("eager softmax", "softmax", "eager"),
    ("eager ssa", "ssa", "eager"),
    ("blockwise softmax", "softmax", "blockwise"),
    ("blockwise ssa", "ssa", "blockwise"),
    ("flex softmax", "softmax", "flex"),
    ("flex ssa", "ssa", "flex"),
    ("linear", "linear", "eager"),
    ("cosformer", "cosformer", "eager"),
]


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(args) -> dict:
    import torch
    import torch.nn.functional as F

    import ssa_hf

    torch.set_num_threads(args.threads)
    name, scoring, backend = next(v for v in VARIANTS if v[0] == args.variant)
    train = args.mode == "fwd+bwd"
    if backend == "flex" and train and not torch.cuda.is_available():
        return {"skipped": "FlexAttention has no backward on CPU"}
    g = torch.Generator().manual_seed(0)
    shape = (args.batch, args.heads, args.length, args.head_dim)
    q, k, v = (torch.randn(shape, generator=g).requires_grad_(train) for _ in range(3))
    params = {"b": torch.ones(args.heads, requires_grad=train), "n": torch.full((args.heads,), 1.5, requires_grad=train)}

    def call():
        if backend is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            p = params if scoring == "ssa" else None
            out = ssa_hf.scored_attention(q, k, v, scoring, p, is_causal=True, backend=backend)
        if train:
            out.backward(torch.ones_like(out))
            for t in (q, k, v, *params.values()):
                t.grad = None
        return out

    context = torch.no_grad() if not train else torch.enable_grad()
    with context:
        call()  # warm-up: compilation, caches
        libc = ctypes.CDLL("libc.so.6")
        import gc

        gc.collect()
        libc.malloc_trim(0)
        before = _rss_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        call()
        peak = _rss_kb("VmHWM")
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    return {"time_s": statistics.median(times), "times_s": times, "extra_mb": max(peak - before, 0) / 1024}


def run_cell(args, variant: str, length: int, mode: str) -> dict:
    command = [sys.executable, __file__, "--child", "--variant", variant, "--length", str(length), "--mode", mode,
               "--batch", str(args.batch), "--heads", str(args.heads), "--head-dim", str(args.head_dim),
               "--repeats", str(args.repeats), "--threads", str(args.threads)]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **MALLOC_ENV}, timeout=1800)
    if result.returncode != 0:
        return {"error": result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="256,1024,2048,4096")
    parser.add_argument("--modes", default="fwd,fwd+bwd")
    parser.add_argument("--variants", default=",".join(v[0] for v in VARIANTS), help="comma-separated names")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="L in 256, 1024 and 3 repeats")
    parser.add_argument("--output", default="bench_attention.json")
    # internal: one measurement in this process
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    if args.quick:
        args.lengths, args.repeats = "256,1024", 3
    lengths = [int(x) for x in args.lengths.split(",")]
    modes = args.modes.split(",")
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - {v[0] for v in VARIANTS}
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {[v[0] for v in VARIANTS]}")
    rows = []
    for length in lengths:
        for mode in modes:
            cells = {}
            for variant in ["sdpa softmax"] + [v for v in variants if v != "sdpa softmax"]:
                cells[variant] = run_cell(args, variant, length, mode)
                print(f"L={length} {mode:8s} {variant:18s} {cells[variant]}", file=sys.stderr, flush=True)
            base = cells["sdpa softmax"]
            for variant, cell in cells.items():
                row = {"length": length, "mode": mode, "variant": variant, **cell}
                if "time_s" in cell and "time_s" in base:
                    row["time_ratio"] = cell["time_s"] / base["time_s"]
                    row["memory_ratio"] = cell["extra_mb"] / base["extra_mb"] if base["extra_mb"] > 0 else None
                rows.append(row)
    import torch

    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "python": platform.python_version(),
               "shape": f"B={args.batch} H={args.heads} D={args.head_dim} float32 causal", "repeats": args.repeats}
    Path(args.output).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")
    print(f"\n{machine['shape']}; {machine['cores']} cores, {args.threads} threads, torch {machine['torch']}; "
          f"median of {args.repeats}; ratios against SDPA softmax in the same run\n")
    print("| L | mode | variant | time (s) | x SDPA | peak extra MB | x SDPA |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "time_s" in r:
            mem_ratio = f"{r['memory_ratio']:.2f}" if r.get("memory_ratio") is not None else "-"
            print(f"| {r['length']} | {r['mode']} | {r['variant']} | {r['time_s']:.4f} | {r.get('time_ratio', 1):.2f} | "
                  f"{r['extra_mb']:.1f} | {mem_ratio} |")
        else:
            print(f"| {r['length']} | {r['mode']} | {r['variant']} | - | - | - | {r.get('skipped') or r.get('error')} |")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
