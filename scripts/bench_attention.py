#!/usr/bin/env python
"""Benchmark every attention backend against PyTorch's SDPA softmax, measured in the same run.

Cells: for each sequence length L and mode, SDPA softmax (the baseline) and every backend of ssa-hf's registry
(`ssa_hf.BACKENDS`) for each scoring function (default softmax, ssa, linear, cosformer; a backend that cannot run
a cell says why in the table), plus `blockwise-direct` (the blockwise kernel called with is_causal=True, no mask)
and `blockwise-tiles` (the same with the tile products forced off oneDNN's brgemm ukernel: float32 on MKL's sgemm
and the small-head-dim loops, bf16 on sgemm of converted tiles; the A/B of the ukernel where the CPU picks it).
Modes: `fwd` (no grad), `fwd+bwd` (gradients for q, k, v and for SSA's b, n), both causal unless `--no-causal`,
and `decode` (one query token against a KV cache of L keys, no grad, no mask).

Each cell runs in a fresh child process (allocator state and compiled caches of one variant cannot bias
another) that measures:
- time: the median wall time of `--repeats` calls after warm-up calls (compilation happens there);
- peak extra memory (fwd, fwd+bwd): resident memory at the peak of one call minus resident memory just before
  it (gc and glibc malloc_trim first; the peak is the kernel's VmHWM, reset through /proc/self/clear_refs). It
  counts everything the call touches: outputs, saved tensors, gradients, workspaces, allocator slack.
Ratios are against SDPA softmax of the same length and mode, measured in the same run.
Each row also gives its share of the machine's GEMM peak: the attention's useful flops (forward: Q K^T and P V;
fwd+bwd: those and the backward's four products; causal: the visible half) per second, over the rate of a large
torch.matmul measured at the start of the run with the same threads (float32; bfloat16 runs: the faster of the
bf16 and float32 rates, since a CPU without bf16 products multiplies bf16 far below its float32 rate while converted
tiles run at it; float16 runs: the kernel's tile products are float32 products of converted fp16 tiles, compared
with the float32 peak). The CPU's model and its
vector/matrix features (AVX2, AVX-512 and its bf16/VNNI/FP16 extensions, AMX; NEON/SVE on Arm) and the fused
kernel's vector lanes are recorded with the results.

    python scripts/bench_attention.py --quick           # L in 256, 1024, 2048; softmax, ssa; 3 repeats (~10 min)
    python scripts/bench_attention.py                   # L in 256, 1024, 2048, 4096
    python scripts/bench_attention.py --lengths 2048 --variants "sdpa softmax" "blockwise ssa" --output b.json
    python scripts/bench_attention.py --lengths 2048 --modes fwd fwd+bwd --variants "blockwise ssa" --load 1 2
    python scripts/bench_attention.py --quick --isa avx2 # as on a CPU without AVX-512 (both sides AVX2)
                                                        # quiet, beside 1 and 2 busy processes (alternating)

Timing pins glibc's malloc thresholds (REFERENCE section 5): without them tile buffers are mapped and zeroed
afresh or not depending on the process's history. The script re-executes itself with them when they are unset
and passes them to every child. Other processes on the machine distort the figures: the CPU load seen before
and after is recorded.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import MALLOC_ENV, BusyProcesses, busy_fraction, pin_malloc_env, split_args  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODES = ("fwd", "fwd+bwd", "decode")
DEFAULT_SCORINGS = ("softmax", "ssa", "linear", "cosformer")


# --------------------------------------------------------------------------------------------------
# Child: one cell
# --------------------------------------------------------------------------------------------------


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _refusal(variant: str, scoring: str, mode: str) -> str | None:
    import torch

    import ssa_hf

    if variant in ("sdpa", "blockwise-direct", "blockwise-tiles"):
        if variant != "sdpa" and scoring not in ("softmax", "ssa"):
            return "the blockwise kernel runs softmax and ssa only"
        return None
    if variant not in ssa_hf.BACKENDS:
        return f"unknown backend {variant!r}"
    return ssa_hf.BACKENDS[variant].refuses(ssa_hf.get_scoring_function(scoring), mode == "fwd+bwd",
                                            torch.device("cpu"), 0.0)


def _make_call(cell: dict, variant: str, scoring: str):
    """A zero-argument function running one call of `variant` on the cell's inputs (forward, or forward and
    backward for fwd+bwd), and the tensors whose gradients it writes."""
    import torch
    import torch.nn.functional as F

    import ssa_hf
    from ssa_hf.models.blockwise import blockwise_attention

    mode, length = cell["mode"], cell["length"]
    train = mode == "fwd+bwd"
    B, H, Hkv, D = cell["batch"], cell["heads"], cell["kv_heads"], cell["head_dim"]
    dtype = getattr(torch, cell["dtype"])
    q_len = 1 if mode == "decode" else length
    causal = mode != "decode" and cell.get("causal", True)
    gqa = Hkv != H
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, q_len, D, generator=g).to(dtype).requires_grad_(train)
    k = torch.randn(B, Hkv, length, D, generator=g).to(dtype).requires_grad_(train)
    v = torch.randn(B, Hkv, length, D, generator=g).to(dtype).requires_grad_(train)
    grad_out = torch.randn(B, H, q_len, D, generator=g).to(dtype)
    params = {}
    if scoring == "ssa":
        params = {"b": torch.full((H,), 0.8, requires_grad=train), "n": torch.full((H,), 1.5, requires_grad=train)}
    leaves = [q, k, v, *params.values()]

    if variant == "sdpa":
        def attend():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    elif variant in ("blockwise-direct", "blockwise-tiles"):
        def attend():
            return blockwise_attention(q, k, v, params.get("b"), params.get("n"), is_causal=causal, scoring=scoring)
    else:
        def attend():
            return ssa_hf.scored_attention(q, k, v, scoring, params or None, is_causal=causal, enable_gqa=gqa,
                                           backend=variant)

    def call():
        if not train:
            with torch.no_grad():
                return attend()
        for t in leaves:
            t.grad = None
        out = attend()
        out.backward(grad_out)
        return out

    if variant == "blockwise-tiles":
        from ssa_hf.models import native

        ops, plain = native.load_kernels(), call

        def call():  # forward and backward off the ukernel; other variants timed alternately keep the default
            if ops is not None:
                ops.set_bf16_brgemm(0)
                ops.set_f32_brgemm(0)
            try:
                return plain()
            finally:
                if ops is not None:
                    ops.set_bf16_brgemm(-1)
                    ops.set_f32_brgemm(-1)

    return call, leaves


def paired_child(cell: dict) -> dict:
    """Time every variant of the cell alternately in this one process (round-robin, `repeats` rounds after
    warm-up), so that each sees the same machine load; medians per variant."""
    import torch

    torch.set_num_threads(cell["threads"])
    calls, times, out = {}, {}, {}
    for label, variant, scoring in cell["variants"]:
        refusal = _refusal(variant, scoring, cell["mode"])
        if refusal:
            out[label] = {"skipped": refusal}
            continue
        calls[label] = _make_call(cell, variant, scoring)[0]
        times[label] = []
        for _ in range(cell["warmup"]):
            calls[label]()
    deadline = time.perf_counter() + cell["budget_s"]
    for i in range(cell["repeats"]):
        for label, call in calls.items():
            start = time.perf_counter()
            call()
            times[label].append(time.perf_counter() - start)
        if i >= 2 and time.perf_counter() > deadline:
            break
    for label, ts in times.items():
        out[label] = {"time_s": statistics.median(ts), "min_s": min(ts), "repeats": len(ts)}
    return out


def child(cell: dict) -> dict:
    import torch

    if "variants" in cell:
        return paired_child(cell)
    torch.set_num_threads(cell["threads"])
    variant, scoring, mode = cell["variant"], cell["scoring"], cell["mode"]
    refusal = _refusal(variant, scoring, mode)
    if refusal:
        return {"skipped": refusal}
    call, leaves = _make_call(cell, variant, scoring)

    start = time.perf_counter()
    for _ in range(cell["warmup"]):
        call()
    result = {"warmup_s": time.perf_counter() - start}
    if mode != "decode":
        for t in leaves:
            t.grad = None
        gc.collect()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
        before = _rss_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        out = call()
        peak = _rss_kb("VmHWM")
        del out
        result["extra_mb"] = max(peak - before, 0) / 1024
    times = []
    deadline = time.perf_counter() + cell["budget_s"]
    for i in range(cell["repeats"]):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
        if i >= 2 and time.perf_counter() > deadline:
            break
    result.update(time_s=statistics.median(times), min_s=min(times), repeats=len(times))
    return result


# --------------------------------------------------------------------------------------------------
# Parent
# --------------------------------------------------------------------------------------------------


def run_cell(cell: dict, timeout_s: float) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(cell)]
    env = {**os.environ, **MALLOC_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        return {"error": lines[-1][:300] if lines else f"exit {result.returncode}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def _variants(args) -> list[tuple[str, str, str]]:
    """(label, backend or sdpa/blockwise-direct, scoring)."""
    import ssa_hf

    out = [("sdpa softmax", "sdpa", "softmax")]
    for backend in list(ssa_hf.BACKENDS) + ["blockwise-direct", "blockwise-tiles"]:
        for scoring in args.scorings:
            out.append((f"{backend} {scoring}", backend, scoring))
    if args.variants:
        wanted = set(args.variants) | {"sdpa softmax"}
        unknown = wanted - {v[0] for v in out}
        if unknown:
            raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {[v[0] for v in out]}")
        out = [v for v in out if v[0] in wanted]
    return out


# what --isa sets for the whole run (children inherit it): ATEN_CPU_CAPABILITY picks torch's own kernels (SDPA's
# flash kernel among them), MKL_ENABLE_INSTRUCTIONS the GEMMs' code path, ONEDNN_MAX_CPU_ISA the brgemm ukernel's
# (oneDNN's JIT; capped at AVX2 it has no bf16 products, so the fused kernel's bf16 takes fp32 tiles), SSA_HF_KERNEL_ISA
# the fused kernel's build
ISA_ENV = {
    "native": {},
    "avx2": {"SSA_HF_KERNEL_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "portable": {"SSA_HF_KERNEL_ISA": "portable"},
}

VECTOR_FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                   "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
                   "asimd", "sve", "sve2", "bf16", "i8mm")


def cpu_description() -> dict:
    """The CPU's model name and which vector/matrix features it has (from /proc/cpuinfo), and the fused kernel's
    vector lanes (0: portable passes only)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            if key.strip() in ("flags", "Features"):
                flags |= set(value.split())
    except OSError:
        pass
    lanes = bf16_products = f32_products = None
    try:
        from ssa_hf.models import native

        ops = native.load_kernels()
        if ops is not None:
            lanes = ops.vector_lanes()
            bf16_products = "brgemm ukernel" if ops.bf16_brgemm() else "fp32 sgemm on converted tiles"
            f32_products = "brgemm" if ops.f32_brgemm() else "sgemm"
    except Exception:  # the description is informative only
        pass
    return {"model": model, "features": [f for f in VECTOR_FEATURES if f in flags], "kernel_vector_lanes": lanes,
            "kernel_bf16_products": bf16_products, "kernel_f32_products": f32_products}


def gemm_peak_gflops(dtype_name: str, threads: int, size: int = 2048, seconds: float = 3.0) -> float:
    """The best rate of a [size x size] @ [size x size] torch.matmul in `dtype_name` (GFLOP/s).  A dtype the CPU
    multiplies slowly (bf16 without AVX512-BF16 or AMX: 0.3 GFLOP/s, a minute for one 2048^3 product) is measured
    at a size whose product takes about 0.2 s instead, when a 256^3 product says `size` would take over 2 s."""
    import torch

    torch.set_num_threads(threads)
    dtype = getattr(torch, dtype_name)
    probe = torch.randn(256, 256).to(dtype)
    torch.matmul(probe, probe)
    start = time.perf_counter()
    torch.matmul(probe, probe)
    rate = 2.0 * 256 ** 3 / max(time.perf_counter() - start, 1e-9)
    if 2.0 * size ** 3 / rate > 2.0:
        size = int(max(256, (rate * 0.2 / 2.0) ** (1 / 3)))
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.matmul(a, b)
    best, deadline = float("inf"), time.perf_counter() + seconds
    for i in range(20):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
        if i >= 2 and time.perf_counter() > deadline:
            break
    return 2.0 * size ** 3 / best / 1e9


def attention_flops(mode: str, batch: int, heads: int, length: int, head_dim: int, causal: bool = True) -> float:
    """Useful flops of one call: 2 (forward) or 6 (fwd+bwd) products of 2 L_q L_k D flops; causal rows see half."""
    if mode == "decode":
        return 2 * 2.0 * batch * heads * length * head_dim
    products = 2 if mode == "fwd" else 6
    return products * 2.0 * batch * heads * length * length * head_dim * (0.5 if causal else 1.0)


def share_peak(peaks: dict, dtype_name: str) -> float | None:
    """The GEMM peak a cell's share is taken against: float32's, and for bfloat16 the faster of bf16's and float32's
    (a CPU without native bf16 products -- no AVX512-BF16 or AMX, e.g. an AVX2-only one -- runs torch's bf16 matmul
    far below its float32 rate, 0.3 against 116 GFLOP/s on an AVX2 Zen 3, while either kernel can multiply
    converted tiles at the float32 rate: a share of the slow bf16 rate would read thousands of percent)."""
    if dtype_name == "bfloat16" and "bfloat16" in peaks:
        return max(peaks["bfloat16"], peaks.get("float32") or 0.0)
    return peaks.get("float32")


def _add_shares(rows: list[dict], peaks: dict, cell: dict) -> None:
    peak = share_peak(peaks, cell["dtype"])
    for r in rows:
        if "time_s" in r and peak:
            flops = attention_flops(r["mode"], cell["batch"], cell["heads"], r["length"], cell["head_dim"],
                                    cell.get("causal", True))
            r["gemm_share"] = flops / r["time_s"] / 1e9 / peak


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(rows: list[dict]) -> str:
    lines = ["| L | mode | variant | time (ms) | x SDPA | share of GEMM peak | peak extra MB | x SDPA | note |",
             "|---:|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        note = r.get("skipped") or r.get("error") or ""
        lines.append(f"| {r['length']} | {r['mode']} | {r['variant']} | {_fmt(r.get('time_s') and 1e3 * r['time_s'], '.2f')} "
                     f"| {_fmt(r.get('time_ratio'), '.2f')} | {_fmt(r.get('gemm_share') and 100 * r['gemm_share'], '.0f')}% "
                     f"| {_fmt(r.get('extra_mb'), '.1f')} | {_fmt(r.get('memory_ratio'), '.2f')} | {note[:100]} |")
    return "\n".join(lines)


def run_paired(args, variants, lengths, modes, base_cell) -> list[dict]:
    """Every (load, length, mode): all variants timed alternately in one child process while `load` busy
    processes run; ratios against SDPA softmax of the same child."""
    rows = []
    for load in dict.fromkeys([0] + [int(x) for x in split_args(args.load)]):  # `--load 0`: quiet only
        with BusyProcesses(load):
            for length in lengths:
                for mode in modes:
                    cell = {**base_cell, "length": length, "mode": mode, "variants": variants,
                            "repeats": args.decode_repeats if mode == "decode" else args.repeats}
                    result = run_cell(cell, args.timeout_s)
                    cells = {label: result.get(label, result) for label, _, _ in variants}
                    base = cells["sdpa softmax"]
                    for label, c in cells.items():
                        row = {"load": load, "length": length, "mode": mode, "variant": label, **c}
                        if "time_s" in c and "time_s" in base:
                            row["time_ratio"] = c["time_s"] / base["time_s"]
                        rows.append(row)
                        print(f"load={load} L={length:<5} {mode:8s} {label:26s} "
                              + (f"{1e3 * c['time_s']:9.2f} ms  x{row.get('time_ratio', float('nan')):.2f}"
                                 if "time_s" in c else str(c.get("skipped") or c.get("error"))[:100]),
                              file=sys.stderr, flush=True)
    return rows


def paired_table(rows: list[dict]) -> str:
    lines = ["| busy processes | L | mode | variant | time (ms) | x SDPA (same load) | share of GEMM peak | note |",
             "|---:|---:|---|---|---:|---:|---:|---|"]
    for r in rows:
        note = r.get("skipped") or r.get("error") or ""
        lines.append(f"| {r['load']} | {r['length']} | {r['mode']} | {r['variant']} "
                     f"| {_fmt(r.get('time_s') and 1e3 * r['time_s'], '.2f')} | {_fmt(r.get('time_ratio'), '.2f')} "
                     f"| {_fmt(r.get('gemm_share') and 100 * r['gemm_share'], '.0f')}% | {note[:100]} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", nargs="+", default=["256", "1024", "2048", "4096"], help="e.g. 256 1024 or 256,1024")
    parser.add_argument("--modes", nargs="+", default=list(MODES), help=f"subset of {MODES}")
    parser.add_argument("--scorings", nargs="+", default=list(DEFAULT_SCORINGS))
    parser.add_argument("--variants", nargs="+", default=None, help='labels, e.g. "blockwise ssa" (default: all)')
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=None, help="key/value heads (GQA); default --heads")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--no-causal", action="store_true", help="fwd and fwd+bwd without the causal mask (full rows)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed calls first (compilation)")
    parser.add_argument("--decode-repeats", type=int, default=200)
    parser.add_argument("--eager-max-length", type=int, default=2048,
                        help="eager backend above this length is skipped in fwd/fwd+bwd ([L, L] weights per head)")
    parser.add_argument("--budget-s", type=float, default=60.0, help="stop repeating a cell after this long (>= 3 calls)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per cell")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="L in 256, 1024, 2048; scorings softmax, ssa; 3 repeats; eager up to 1024")
    parser.add_argument("--load", nargs="+", default=None,
                        help="also time beside N busy processes (e.g. --load 1 2): every variant is then timed "
                             "alternately with SDPA in one process, quiet first, then at each load (time only)")
    parser.add_argument("--isa", default="native", choices=list(ISA_ENV),
                        help="native: this CPU; avx2: as on a CPU without AVX-512 (the kernel built for AVX2, torch "
                             "and MKL told to use AVX2 only); portable: the kernel's scalar build beside torch as is")
    parser.add_argument("--output", default="bench_attention.json")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    isa_env = ISA_ENV[args.isa]
    if any(os.environ.get(k) != v for k, v in isa_env.items()):  # read at import by torch and MKL: re-execute
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **MALLOC_ENV, **isa_env})
    pin_malloc_env()
    sys.path.insert(0, str(REPO))
    lengths = [int(x) for x in split_args(args.lengths)]
    modes = split_args(args.modes)
    if args.quick:
        if args.lengths == parser.get_default("lengths"):
            lengths = [256, 1024, 2048]
        args.repeats, args.decode_repeats = min(args.repeats, 3), min(args.decode_repeats, 100)
        args.eager_max_length = min(args.eager_max_length, 1024)
        args.budget_s = min(args.budget_s, 20.0)
        if args.scorings == parser.get_default("scorings"):
            args.scorings = ["softmax", "ssa"]
    bad = set(modes) - set(MODES)
    if bad:
        parser.error(f"unknown modes {sorted(bad)}; choose from {MODES}")
    variants = _variants(args)
    from ssa_hf.models.linear import LINEAR_ATTENTIONS  # linear attention materialises nothing [L, L]

    cpu = cpu_description()
    peaks = {"float32": gemm_peak_gflops("float32", args.threads)}
    if args.dtype == "bfloat16":
        peaks["bfloat16"] = gemm_peak_gflops("bfloat16", args.threads)
    print(f"{cpu['model']}: {' '.join(cpu['features'])}; kernel vector lanes {cpu['kernel_vector_lanes']}; GEMM peak "
          + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()), file=sys.stderr, flush=True)
    busy_before = busy_fraction()
    base_cell = {"batch": args.batch, "heads": args.heads, "kv_heads": args.kv_heads or args.heads,
                 "causal": not args.no_causal,
                 "head_dim": args.head_dim, "dtype": args.dtype, "threads": args.threads, "warmup": args.warmup,
                 "budget_s": args.budget_s}
    rows = []
    started = time.perf_counter()
    if args.load:
        rows = run_paired(args, variants, lengths, modes, base_cell)
    for length in ([] if args.load else lengths):
        for mode in modes:
            cells = {}
            for label, backend, scoring in variants:
                cell = {**base_cell, "length": length, "mode": mode, "variant": backend, "scoring": scoring,
                        "repeats": args.decode_repeats if mode == "decode" else args.repeats}
                quadratic = scoring not in LINEAR_ATTENTIONS
                if backend == "eager" and quadratic and mode != "decode" and length > args.eager_max_length:
                    cells[label] = {"skipped": f"eager materialises [L, L] weights; L > --eager-max-length {args.eager_max_length}"}
                else:
                    cells[label] = run_cell(cell, args.timeout_s)
                c = cells[label]
                print(f"L={length:<5} {mode:8s} {label:26s} "
                      + (f"{1e3 * c['time_s']:9.2f} ms  {c.get('extra_mb', float('nan')):8.1f} MB" if "time_s" in c
                         else str(c.get("skipped") or c.get("error"))[:100]), file=sys.stderr, flush=True)
            base = cells["sdpa softmax"]
            for label, cell in cells.items():
                row = {"length": length, "mode": mode, "variant": label, **cell}
                if "time_s" in cell and "time_s" in base:
                    row["time_ratio"] = cell["time_s"] / base["time_s"]
                if cell.get("extra_mb") is not None and base.get("extra_mb"):
                    row["memory_ratio"] = cell["extra_mb"] / base["extra_mb"]
                rows.append(row)
    import torch

    _add_shares(rows, peaks, base_cell)
    machine = {"cpu": cpu["model"], "cpu_features": cpu["features"], "kernel_vector_lanes": cpu["kernel_vector_lanes"],
               "kernel_bf16_products": cpu["kernel_bf16_products"], "kernel_f32_products": cpu["kernel_f32_products"],
               "gemm_peak_gflops": peaks, "cores": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "python": platform.python_version(), "isa": args.isa,
               "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(), "isa_env": isa_env,
               "shape": f"B={args.batch} H={args.heads} Hkv={args.kv_heads or args.heads} D={args.head_dim} "
                        f"{args.dtype}, {'non-causal' if args.no_causal else 'causal'} (decode: 1 query, no mask)",
               "repeats": args.repeats, "decode_repeats": args.decode_repeats, "malloc_env": MALLOC_ENV,
               "busy_before": busy_before, "load": args.load, "busy_after": busy_fraction(), "wall_s": round(time.perf_counter() - started, 1)}
    text = paired_table(rows) if args.load else table(rows)
    Path(args.output).write_text(json.dumps({"machine": machine, "rows": rows, "table": text}, indent=2) + "\n")
    print(f"\n{cpu['model']} ({' '.join(cpu['features'])}; kernel vector lanes {cpu['kernel_vector_lanes']}; tile "
          f"products: float32 {cpu['kernel_f32_products']}, bf16 {cpu['kernel_bf16_products']}); GEMM peak "
          + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()))
    print(f"build: --isa {args.isa} (torch CPU capability {machine['torch_cpu_capability']}"
          + (f"; {' '.join(f'{k}={v}' for k, v in isa_env.items())}" if isa_env else "") + ")")
    print(f"{machine['shape']}; {machine['cores']} cores, {args.threads} threads, torch {machine['torch']}; median of "
          f"{args.repeats} (decode {args.decode_repeats}); ratios against SDPA softmax in the same run; machine busy "
          f"before/after: {busy_before}/{machine['busy_after']} (0 = idle)\n")
    print(text)
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
