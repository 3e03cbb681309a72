#!/usr/bin/env python
"""GPU check of ssa-hf's FlexAttention backend: correctness against eager, then timing against SDPA (flash).

Run on the CUDA machine (one H200), from the source tree; it is meant to finish within about 6 minutes,
compilation included (--budget-s stops starting timing cells at 330 s):

    PYTHONPATH=. python scripts/gpu_check.py --output $OUT/gpu_check.json

    PYTHONPATH=. python scripts/gpu_check.py --quick                  # timing at L in 1024, 4096 only
    PYTHONPATH=. python scripts/gpu_check.py --lengths 2048,8192      # other lengths
    PYTHONPATH=. python scripts/gpu_check.py --cpu-smoke --output x.json   # tiny end-to-end run on CPU

1. Correctness (exit status 1 if any check fails):
   - `ssa_attention(..., backend="flex")` against `backend="eager"`: outputs and gradients of q, k, v and the
     per-head b, n ([H] tensors). fp32 (tolerance 1e-4 on outputs, 1e-3 on gradients) and bf16 (against the
     fp32 eager result on the same rounded inputs: 2e-2 and 5e-2; the eager bf16 error is shown beside it),
     causal or not, GQA (H=8, Hkv=2), a padding mask (bool [B, 1, 1, L], True = attend; with causal, the
     left-padded rows that see no key must give 0 and finite gradients), L=300, D=64.
     Error = max|got - want| / max|want|.
   - `scored_attention(..., "softmax", backend="flex")` against `F.scaled_dot_product_attention`.
   - a tiny `SSALlamaForCausalLM` (L=300, left padding): its default attn_implementation is "ssa_auto", the
     backend it picks on CUDA (logged by the `ssa_hf` logger) is flex, and its loss and the gradients of every
     b, n parameter equal those of the same model after `set_attn_implementation("ssa_eager")`.
2. Timing, causal, bf16, B=1, H=16, D=64, L in 1024, 4096, 8192, 16384: modes fwd (no grad) and fwd+bwd
   (gradients of q, k, v and of SSA's b, n); variants SDPA softmax (flash kernel), flex softmax and flex SSA
   (both through the public API, `is_causal=True`: a causal mask_mod whose block mask is built once per
   length and cached). Median of --repeats calls after --warmup calls;
   compile_s = first call - median (each sample: enough back-to-back calls between two synchronisations to
   last ~5 ms, so that launch and synchronisation overheads are amortised as in a training loop). Peak extra memory = torch.cuda.max_memory_allocated during one call minus
   the memory allocated before it. Target: flex SSA <= 1.3x SDPA of the same L and mode (reported; it does
   not change the exit status). Timing cells stop being run after --budget-s seconds (reported as skipped).

Every check and cell runs on its own: an error is reported in its row and the script goes on. Results go to
--output as JSON (default $OUT/gpu_check.json when OUT is set, else gpu_check.json), rewritten after each
section. With --cpu-smoke everything runs tiny on CPU; FlexAttention on CPU is forward-only, so its gradient
checks and fwd+bwd cells are skipped (said in the output), and the model check compares the CPU choice
(blockwise) with eager. Imports only torch, transformers and ssa_hf.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import statistics
import sys
import time
import traceback

import torch
import torch._dynamo
import torch.nn.functional as F
import transformers

import ssa_hf
from ssa_hf.models import backends as ssa_backends_module
from ssa_hf.models.attention import BACKENDS, choose_backend, scored_attention, ssa_attention
from ssa_hf.models.scoring import get_scoring_function

# sizes: (on CUDA, --cpu-smoke)
SIZES = {
    "cuda": dict(lengths=[1024, 4096, 8192, 16384], batch=1, heads=16, head_dim=64, repeats=10, warmup=2,
                 corr=dict(batch=2, heads=8, kv_heads=2, length=300, dim=64), model_len=300),
    "cpu": dict(lengths=[64, 128], batch=1, heads=2, head_dim=16, repeats=2, warmup=1,
                corr=dict(batch=2, heads=4, kv_heads=2, length=37, dim=16), model_len=40),
}
TOL = {("float32", "out"): 1e-4, ("float32", "grad"): 1e-3, ("bfloat16", "out"): 2e-2, ("bfloat16", "grad"): 5e-2}
TARGET = 1.3  # flex SSA time <= TARGET x SDPA


def rel_err(got, want) -> float:
    """max|got - want| / max|want| (NaN anywhere gives NaN, which fails every check)."""
    got, want = got.detach().float(), want.detach().float()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------------
# 1. Correctness
# --------------------------------------------------------------------------------------------------


def make_inputs(device, batch, heads, kv_heads, length, dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, length, dim, generator=g) * 2  # scores of std ~4: SSA differs from softmax
    k = torch.randn(batch, kv_heads, length, dim, generator=g) * 2
    v = torch.randn(batch, kv_heads, length, dim, generator=g)
    grad_out = torch.randn(batch, heads, length, dim, generator=g)
    b = torch.linspace(0.3, 2.0, heads)
    n = torch.linspace(1.0, 3.0, heads)
    # padding: batch 0 left-padded by 5 keys, batch 1 right-padded by 7
    pad = torch.ones(batch, length, dtype=torch.bool)
    pad[0, :5] = False
    pad[1, -7:] = False
    mask = pad[:, None, None, :]
    return [t.to(device) for t in (q, k, v, b, n, grad_out, mask)]


def run_attention(scoring, backend, q, k, v, b, n, mask, causal, gqa):
    if scoring == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
    if scoring == "softmax":
        return scored_attention(q, k, v, "softmax", {}, attn_mask=mask, is_causal=causal, enable_gqa=gqa, backend=backend)
    return ssa_attention(q, k, v, b, n, attn_mask=mask, is_causal=causal, enable_gqa=gqa, backend=backend)


def attention_check(device, sizes, scoring, dtype, causal, use_mask, kv_heads):
    """flex (in `dtype`) against the fp32 reference (eager for SSA, SDPA for softmax) on the same inputs."""
    shape = {**sizes, "kv_heads": kv_heads}
    q, k, v, b, n, grad_out, mask = make_inputs(device, **shape)
    # the fp32 reference sees the same inputs as the bf16 run: rounded to `dtype` first
    q, k, v, grad_out = (t.to(dtype).float() for t in (q, k, v, grad_out))
    mask = mask if use_mask else None
    gqa = kv_heads != shape["heads"]
    want_grads = BACKENDS["flex"].refuses(get_scoring_function(scoring), True, device, 0.0) is None  # not on CPU
    reference = "sdpa" if scoring == "softmax" else "eager"
    entry = {"check": f"flex {scoring} vs {reference}", "dtype": str(dtype).split(".")[-1], "causal": causal,
             "mask": use_mask, "gqa": f"H={shape['heads']} Hkv={kv_heads}", "L": shape["length"], "D": shape["dim"]}

    def forward(backend, cast, fn_scoring):
        leaves = [t.to(cast).detach().requires_grad_(want_grads) for t in (q, k, v)]
        params = [t.detach().requires_grad_(want_grads) for t in (b, n)]  # b, n stay fp32
        out = run_attention(fn_scoring, backend, *leaves, *params, mask, causal, gqa)
        if not want_grads:
            return out, {}
        names = ["q", "k", "v"] + (["b", "n"] if scoring == "ssa" else [])
        grads = torch.autograd.grad(out, (leaves + params)[: len(names)], grad_out.to(out.dtype))
        return out, dict(zip(names, grads))

    ref_scoring = "sdpa" if scoring == "softmax" else "ssa"
    want_out, want_g = forward("eager", torch.float32, ref_scoring)
    got_out, got_g = forward("flex", dtype, scoring)
    tol_out, tol_grad = TOL[(entry["dtype"], "out")], TOL[(entry["dtype"], "grad")]
    entry["out_err"] = rel_err(got_out, want_out)
    entry["grad_err"] = {name: rel_err(got_g[name], want_g[name]) for name in got_g}
    if dtype != torch.float32:  # the error the reference itself makes in this dtype, for scale
        ref_out, ref_g = forward("eager", dtype, ref_scoring)
        entry["ref_same_dtype_out_err"] = rel_err(ref_out, want_out)
        entry["ref_same_dtype_grad_err"] = {name: rel_err(ref_g[name], want_g[name]) for name in ref_g}
    entry["tol"] = {"out": tol_out, "grad": tol_grad}
    entry["passed"] = entry["out_err"] <= tol_out and all(e <= tol_grad for e in entry["grad_err"].values())
    if not want_grads:
        entry["note"] = "gradients skipped: " + BACKENDS["flex"].refuses(get_scoring_function(scoring), True, device, 0.0)
    return entry


def correctness_cases(device, sizes):
    """(scoring, dtype, causal, padding mask, kv_heads): few shapes, since each one is a compilation."""
    h, hkv = sizes["heads"], sizes["kv_heads"]
    cases = [
        ("ssa", torch.float32, True, True, hkv),
        ("ssa", torch.float32, False, False, h),
        ("ssa", torch.bfloat16, True, False, hkv),
        ("ssa", torch.bfloat16, False, True, hkv),
        ("softmax", torch.float32, True, False, hkv),
        ("softmax", torch.bfloat16, False, True, hkv),
    ]
    return [lambda c=c: attention_check(device, sizes, *c) for c in cases], [
        f"flex {c[0]} {str(c[1]).split('.')[-1]} causal={c[2]} mask={c[3]} Hkv={c[4]}" for c in cases
    ]


class LogRecords(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def model_check(device, length):
    """A tiny SSALlamaForCausalLM: default implementation, backend choice, and ssa_auto == ssa_eager."""
    torch.manual_seed(0)
    config = ssa_hf.SSALlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max(512, length), initializer_range=0.1, pad_token_id=0,
    )
    model = ssa_hf.SSALlamaForCausalLM(config).to(device).eval()
    with torch.no_grad():  # larger scores, so that the scoring function matters (as tests/models/tiny.py)
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(3.0)
    ids = torch.randint(1, 128, (2, length), generator=torch.Generator().manual_seed(0)).to(device)
    attention_mask = torch.ones_like(ids)
    attention_mask[1, :10] = 0  # left padding
    labels = ids.masked_fill(attention_mask == 0, -100)
    scoring_params = [(n, p) for n, p in model.named_parameters() if ".scoring." in n]

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        return loss.detach(), torch.cat([p.grad.reshape(-1) for _, p in scoring_params])

    handler, logger = LogRecords(), logging.getLogger("ssa_hf")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    ssa_backends_module._logged.clear()  # the backend choice is logged once per (scoring, backend, device)
    try:
        default = model.config._attn_implementation
        auto_loss, auto_grads = loss_and_grads()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    logged = sorted({m.group(1) for msg in handler.messages for m in [re.search(r"backend=(\w+)", msg)] if m})
    expected = choose_backend(get_scoring_function("ssa"), device, True, 0.0, length, length)[0]
    model.set_attn_implementation("ssa_eager")
    eager_loss, eager_grads = loss_and_grads()
    entry = {"check": "SSALlamaForCausalLM ssa_auto vs ssa_eager", "dtype": "float32", "causal": True, "mask": True,
             "gqa": "H=4 Hkv=2", "L": length, "D": config.hidden_size // config.num_attention_heads,
             "default_attn_implementation": default,
             "expected_backend": expected, "logged_backends": logged, "scoring_parameters": len(scoring_params),
             "out_err": abs(auto_loss - eager_loss).item() / abs(eager_loss).item(),
             "grad_err": {"b,n": rel_err(auto_grads, eager_grads)}, "tol": {"out": 1e-4, "grad": 1e-3}}
    entry["passed"] = (default == "ssa_auto" and logged == [expected] and len(scoring_params) > 0
                       and entry["out_err"] <= 1e-4 and entry["grad_err"]["b,n"] <= 1e-3
                       and (device.type != "cuda" or expected == "flex"))
    return entry


# --------------------------------------------------------------------------------------------------
# 2. Timing
# --------------------------------------------------------------------------------------------------


def time_cell(device, variant, mode, length, args):
    B, H, D = args.batch, args.heads, args.head_dim
    train = mode == "fwd+bwd"
    if variant in ("flex softmax", "flex ssa"):
        spec = get_scoring_function(variant.split()[1])
        refusal = BACKENDS["flex"].refuses(spec, train, device, 0.0)
        if refusal:
            return {"skipped": refusal}
    g = torch.Generator().manual_seed(0)
    q, k, v, grad_out = (torch.randn(B, H, length, D, generator=g).to(device, torch.bfloat16) for _ in range(4))
    b, n = torch.full((H,), 0.8, device=device), torch.full((H,), 1.5, device=device)
    leaves = [t.requires_grad_(train) for t in (q, k, v, b, n)]

    def attend():
        if variant == "sdpa softmax":
            if device.type == "cuda":
                from torch.nn.attention import SDPBackend, sdpa_kernel

                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if variant == "flex softmax":
            return scored_attention(q, k, v, "softmax", {}, is_causal=True, backend="flex")
        if variant == "flex ssa":
            return ssa_attention(q, k, v, b, n, is_causal=True, backend="flex")
        raise ValueError(variant)

    def call():
        if not train:
            with torch.no_grad():
                return attend()
        for t in leaves:
            t.grad = None
        attend().backward(grad_out)

    def seconds_per_call(calls):
        sync(device)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        sync(device)
        return (time.perf_counter() - start) / calls

    warm = [seconds_per_call(1) for _ in range(max(args.warmup, 1))]  # the first call compiles
    calls = max(1, min(50, int(5e-3 / warm[-1])))  # back-to-back calls per sample: >= ~5 ms between syncs
    times = [seconds_per_call(calls) for _ in range(args.repeats)]
    median = statistics.median(times)
    cell = {"ms": 1e3 * median, "min_ms": 1e3 * min(times), "first_call_s": warm[0],
            "compile_s": max(warm[0] - median, 0.0), "repeats": args.repeats, "calls_per_sample": calls}
    if device.type == "cuda":
        for t in leaves:
            t.grad = None
        sync(device)
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        call()
        sync(device)
        cell["peak_extra_mb"] = (torch.cuda.max_memory_allocated() - before) / 2**20
    return cell


VARIANTS = ("sdpa softmax", "flex softmax", "flex ssa")


def timing(device, args, started, save):
    rows = []
    for length in args.lengths:
        for mode in ("fwd", "fwd+bwd"):
            cells = {}
            for variant in VARIANTS:
                if time.perf_counter() - started > args.budget_s:
                    cells[variant] = {"skipped": f"time budget --budget-s {args.budget_s:.0f} s spent"}
                else:
                    try:
                        cells[variant] = time_cell(device, variant, mode, length, args)
                    except Exception as error:  # noqa: BLE001 - reported in the row, the script goes on
                        cells[variant] = {"error": f"{type(error).__name__}: {error}"[:300]}
                        traceback.print_exc()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                c = cells[variant]
                print(f"  L={length:<6} {mode:8s} {variant:22s} "
                      + (f"{c['ms']:9.3f} ms  (first call {c['first_call_s']:.1f} s)" if "ms" in c
                         else c.get("skipped") or c.get("error")), file=sys.stderr, flush=True)
            base = cells["sdpa softmax"].get("ms")
            for variant, cell in cells.items():
                row = {"L": length, "mode": mode, "variant": variant, "B": args.batch, "H": args.heads,
                       "D": args.head_dim, "dtype": "bfloat16", "causal": True, **cell}
                if "ms" in cell and base:
                    row["x_sdpa"] = cell["ms"] / base
                if variant == "flex ssa":
                    row["target"] = f"<= {TARGET}x SDPA"
                    # the target is about CUDA kernels: not judged in the CPU smoke run
                    row["target_met"] = row["x_sdpa"] <= TARGET if "x_sdpa" in row and device.type == "cuda" else None
                rows.append(row)
            save(rows)
    return rows


# --------------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------------


def _f(value, spec):
    return "-" if value is None else format(value, spec)


def _grad_text(grads: dict) -> str:
    qkv = [grads[x] for x in ("q", "k", "v") if x in grads]
    parts = ([f"qkv={max(qkv):.1e}"] if qkv else []) + [f"{x}={e:.1e}" for x, e in grads.items() if x not in ("q", "k", "v")]
    return " ".join(parts)


def correctness_table(entries) -> str:
    lines = ["| check | dtype | causal | mask | heads | out err | grad err | reference in same dtype: out / grad err | pass |",
             "|---|---|---|---|---|---:|---|---|---|"]
    for e in entries:
        grads = _grad_text(e.get("grad_err") or {}) or ("skipped (flex forward-only here)" if "note" in e else "-")
        same = "-"
        if "ref_same_dtype_out_err" in e:
            same = f"{e['ref_same_dtype_out_err']:.1e} / {_grad_text(e['ref_same_dtype_grad_err']) or '-'}"
        status = "pass" if e["passed"] else "FAIL" + (f" ({e['error'][:200]})" if "error" in e else "")
        lines.append(f"| {e['check']} | {e.get('dtype', '-')} | {e.get('causal', '-')} | {e.get('mask', '-')} | "
                     f"{e.get('gqa', '-')} | {_f(e.get('out_err'), '.1e')} | {grads} | {same} | {status} |")
    return "\n".join(lines)


def timing_table(rows) -> str:
    lines = ["| L | mode | variant | ms | x SDPA | peak extra MB | compile s | <= 1.3x SDPA | note |",
             "|---:|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        target = {True: "pass", False: "FAIL", None: "-"}[r.get("target_met")] if "target" in r else ""
        note = (r.get("skipped") or r.get("error") or "")[:120]
        lines.append(f"| {r['L']} | {r['mode']} | {r['variant']} | {_f(r.get('ms'), '.3f')} | {_f(r.get('x_sdpa'), '.2f')} "
                     f"| {_f(r.get('peak_extra_mb'), '.0f')} | {_f(r.get('compile_s'), '.1f')} | {target} | {note} |")
    return "\n".join(lines)


def environment(device) -> dict:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": triton_version, "transformers": transformers.__version__, "ssa_hf": ssa_hf.__version__,
           "device": device.type, "flex_compile": os.environ.get("SSA_HF_FLEX_COMPILE", "1") != "0"}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU (flex forward only)")
    parser.add_argument("--quick", action="store_true", help="timing at L in 1024, 4096 only")
    parser.add_argument("--lengths", nargs="+", default=None, help="timing lengths, e.g. 1024 4096 or 1024,4096")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls first (compilation happens there)")
    parser.add_argument("--budget-s", type=float, default=330.0,
                        help="no new timing cell once this many seconds have passed since the start")
    parser.add_argument("--skip-timing", action="store_true")
    default_output = os.path.join(os.environ["OUT"], "gpu_check.json") if os.environ.get("OUT") else "gpu_check.json"
    parser.add_argument("--output", default=default_output)
    args = parser.parse_args(argv)
    started = time.perf_counter()

    if args.cpu_smoke:
        os.environ.setdefault("SSA_HF_FLEX_COMPILE", "0")  # CPU compilation of flex would take minutes
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        parser.error("no CUDA device; use --cpu-smoke for the CPU run")
    else:
        device = torch.device("cuda")
    sizes = SIZES[device.type]
    lengths = args.lengths or [str(x) for x in ([1024, 4096] if args.quick and not args.cpu_smoke else sizes["lengths"])]
    args.lengths = [int(x) for value in lengths for x in str(value).split(",") if x]
    for name in ("batch", "heads", "head_dim", "repeats", "warmup"):
        if getattr(args, name, None) is None:
            setattr(args, name, sizes[name])
    # every (shape, grad mode, score_mod) is one compilation of the same compiled flex_attention
    dynamo = torch._dynamo.config
    setattr(dynamo, "recompile_limit" if hasattr(dynamo, "recompile_limit") else "cache_size_limit", 64)
    if hasattr(dynamo, "accumulated_recompile_limit"):
        dynamo.accumulated_recompile_limit = 512

    env = environment(device)
    print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    result = {"environment": env, "args": dict(vars(args)), "correctness": [], "timing": []}

    def save(timing_rows=None):
        if timing_rows is not None:
            result["timing"] = timing_rows
        result["wall_s"] = round(time.perf_counter() - started, 1)
        result["passed"] = all(e["passed"] for e in result["correctness"])
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(result, f, indent=2, default=str)

    checks, names = correctness_cases(device, sizes["corr"])
    checks.append(lambda: model_check(device, sizes["model_len"]))
    names.append("SSALlamaForCausalLM ssa_auto vs ssa_eager")
    print("\n## Correctness", flush=True)
    for check, name in zip(checks, names):
        t0 = time.perf_counter()
        try:
            entry = check()
        except Exception as error:  # noqa: BLE001 - reported, the script goes on
            traceback.print_exc()
            entry = {"check": name, "passed": False, "error": f"{type(error).__name__}: {error}"[:300]}
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        result["correctness"].append(entry)
        print(f"  {'pass' if entry['passed'] else 'FAIL'}  {name}  ({entry['seconds']} s)", file=sys.stderr, flush=True)
        save()
    if any("note" in e for e in result["correctness"]):
        print("gradients of flex: skipped here (FlexAttention on CPU is forward-only); checked on CUDA only")
    result["correctness_table"] = correctness_table(result["correctness"])
    print(result["correctness_table"], flush=True)

    if not args.skip_timing:
        print(f"\n## Timing: causal, bf16, B={args.batch} H={args.heads} D={args.head_dim}, median of {args.repeats} "
              f"samples (each >= ~5 ms of back-to-back calls) after {args.warmup} warm-up calls; x SDPA = against SDPA softmax "
              f"({'flash' if device.type == 'cuda' else 'default CPU'} kernel) of the same L and mode", flush=True)
        rows = timing(device, args, started, save)
        result["table"] = timing_table(rows)
        print(result["table"])
        compile_total = sum(r.get("compile_s", 0.0) for r in rows)
        print(f"\ncompile time (sum of first call - median): {compile_total:.1f} s")
    save()
    failed = [e["check"] for e in result["correctness"] if not e["passed"]]
    print(f"\ncorrectness: {'all passed' if not failed else f'{len(failed)} FAILED'}; wall {result['wall_s']} s; "
          f"wrote {args.output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
