#!/usr/bin/env python
"""Time the fused kernel's per-score pass alone (SSA's g(s), the exponential, and the backward's dS), vectorised
and portable, in ns per score, with its error against float64.

The pass runs in place on a [rows x cols] float32 tile (the kernel's `score_pass` op, one thread); each repeat
restores the tile first, and the restore alone is timed and subtracted. Both paths alternate round by round in
one process, so that they see the same machine load (say it: `uptime`).

    python scripts/bench_score_pass.py                      # 2048 x 256 tile, 7 rounds
    python scripts/bench_score_pass.py --rows 512 --output score_pass.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import busy_fraction, pin_malloc_env  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10, help="calls per round")
    parser.add_argument("--output", default="bench_score_pass.json")
    args = parser.parse_args(argv)
    pin_malloc_env()
    sys.path.insert(0, str(REPO))
    import torch

    from ssa_hf.models import native

    torch.set_num_threads(1)
    ops = native.load_kernels()
    if ops is None:
        raise SystemExit("the fused CPU kernel did not build")
    gen = torch.Generator().manual_seed(0)
    s0 = torch.randn(args.rows, args.cols, generator=gen) * 8
    dp0 = torch.randn(args.rows, args.cols, generator=gen)
    scale, b, n, d = 0.125, 0.8, 1.5, 0.3
    x = s0.double() * scale
    g = torch.copysign(n * torch.log1p(b * x.abs()), x)
    off = float(g.max()) + 0.5
    p_ref = torch.exp(g - off)
    ds_ref = p_ref * (dp0.double() - d) * n * b * scale / (1 + b * x.abs())
    ds_size = p_ref * (dp0.double().abs() + d) * n * b * scale / (1 + b * x.abs())
    s, dp, empty = s0.clone(), dp0.clone(), torch.empty(0)
    paths = ["vector", "portable"] if ops.vector_lanes() else ["portable"]
    rows = []
    for direction in ("forward", "backward"):
        times = {path: [] for path in paths}
        restore = []
        for _ in range(args.rounds):
            for path in paths:
                ops.set_portable(path == "portable")
                start = time.perf_counter()
                for _ in range(args.calls):
                    s.copy_(s0)
                    if direction == "backward":
                        dp.copy_(dp0)
                        ops.score_pass(s, dp, scale, b, n, off, d, True)
                    else:
                        ops.score_pass(s, empty, scale, b, n, off, 0.0, True)
                times[path].append(time.perf_counter() - start)
            start = time.perf_counter()
            for _ in range(args.calls):
                s.copy_(s0)
                if direction == "backward":
                    dp.copy_(dp0)
            restore.append(time.perf_counter() - start)
        for path in paths:
            ops.set_portable(path == "portable")
            s.copy_(s0)
            dp.copy_(dp0)
            ops.score_pass(s, dp if direction == "backward" else empty, scale, b, n, off, d, True)
            err_p = ((s.double() - p_ref).abs() / p_ref)[p_ref > 1e-30].max().item()
            err_ds = ((dp.double() - ds_ref).abs() / ds_size)[p_ref > 1e-30].max().item() if direction == "backward" else None
            ns = (min(times[path]) - min(restore)) / (args.calls * args.rows * args.cols) * 1e9
            rows.append({"direction": direction, "path": path, "ns_per_score": ns, "max_rel_error_p": err_p,
                         "max_rel_error_ds": err_ds})
    ops.set_portable(False)
    lines = ["| pass | path | ns / score | max rel. error P | max rel. error dS |", "|---|---|---:|---:|---:|"]
    for r in rows:
        ds = "-" if r["max_rel_error_ds"] is None else f"{r['max_rel_error_ds']:.1e}"
        lines.append(f"| {r['direction']} | {r['path']} | {r['ns_per_score']:.3f} | {r['max_rel_error_p']:.1e} | {ds} |")
    text = "\n".join(lines)
    machine = {"cpu": platform.processor() or platform.machine(), "kernel_vector_lanes": ops.vector_lanes(),
               "tile": [args.rows, args.cols], "rounds": args.rounds, "load_average": os.getloadavg(),
               "busy_after": busy_fraction()}
    Path(args.output).write_text(json.dumps({"machine": machine, "rows": rows, "table": text}, indent=2) + "\n")
    print(f"SSA per-score pass, one thread, {args.rows} x {args.cols} tile, best of {args.rounds} rounds; vector lanes "
          f"{ops.vector_lanes()}; load average {os.getloadavg()[0]:.1f}\n")
    print(text)
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
