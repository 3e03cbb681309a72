#!/usr/bin/env python
"""Training and decoding throughput of ssa-hf models with SSA against softmax and against the stock transformers
class a user would pick instead, in one run.

Variants (same sizes and data; the ssa-hf variants share their weights):
- `ssa` and `softmax` through the same ssa-hf attention (`ssa_auto`: on CPU the blockwise kernel, for training,
  prompts and decoding steps alike);
- `softmax sdpa`: the ssa-hf model with PyTorch's fused softmax attention (transformers' `sdpa`);
- `stock sdpa`: the stock transformers class with the same sizes, MLP and norm (LlamaForCausalLM for SwiGLU +
  RMSNorm, NemotronForCausalLM for decoder_114m's squared-ReLU MLP + LayerNorm1P + partial RoPE,
  GPT2LMHeadModel, RobertaForMaskedLM), attn_implementation="sdpa"; its parameter count is checked against the
  ssa-hf model's (they differ by SSA's b and n only).
Presets: `tiny_llama` and `decoder_114m` (12 layers, hidden 768, 24 heads / 8 key-value heads, 50k vocabulary);
`tiny_gpt2`, `tiny_bert` (masked LM: training only) and the others work too.
`--dtype bfloat16` builds every model with bf16 weights; `--autocast` runs float32 weights under CPU bf16 autocast.

    python scripts/bench_model.py --quick        # tiny at L=256, 1024; 114M at L=256, 1024 (~10 minutes, 2 cores)
    python scripts/bench_model.py --presets decoder_114m --lengths 1024 --batch 1 --steps 3
    python scripts/bench_model.py --quick --load 2      # beside two busy processes (data-loader workers)

Training: tokens/s of forward+backward+AdamW steps (median over steps after warm-up steps). AdamW as `ssa-hf
pretrain` builds it (`adam_fused: true`, torch's fused update); `--optimizer loop` times torch's default update,
which on a CPU runs a loop of small ops per tensor (a fixed cost per tensor: SSA's b and n are 2 more per layer).
Decoding: new tokens/s of greedy `generate` with the KV cache (one-token steps), after a warm-up generate.
`--decode-steps`: only the per-token decoding step (a forward of one token against a KV cache of each --lengths
tokens, cropped back after each step), every variant alternating round by round, paired time ratios to the stock
class. `--decode-calls`: only the public `scored_attention` (argument checks included) against torch's SDPA at
decode shapes (B=1, Lq=1, --heads x --lengths, D=--head-dim), alternating call batch by call batch.

    python scripts/bench_model.py --decode-steps --presets tiny_llama decoder_114m --threads 1
    python scripts/bench_model.py --decode-calls --threads 1 --output decode_calls.json
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
import inspect
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import MALLOC_ENV, BusyProcesses, busy_fraction, paired_ratio, pin_malloc_env, ratio_text, split_args  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VARIANTS = [("ssa", "ssa", "ssa_auto"), ("softmax", "softmax", "ssa_auto"), ("softmax sdpa", "softmax", "sdpa"),
            ("stock sdpa", "softmax", "stock")]
QUICK_PLAN = [("tiny_llama", 256), ("tiny_llama", 1024), ("decoder_114m", 256), ("decoder_114m", 1024)]


def _task(config) -> str:
    from ssa_hf.presets import DEFAULT_TASK, family_of

    return DEFAULT_TASK[family_of(config)]


def stock_model(config, dtype=None):
    """The stock transformers model with `config`'s sizes, MLP and norm, on SDPA (see the module docstring)."""
    import transformers

    d = config.to_dict()
    family = config.model_type
    common = {k: d[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
                                "initializer_range", "tie_word_embeddings", "bos_token_id", "eos_token_id",
                                "pad_token_id", "rope_parameters") if k in d}
    if family == "ssa_llama":
        mlp, norm = d.get("mlp_type", "swiglu"), d.get("norm_type", "rmsnorm")
        if (mlp, norm) == ("swiglu", "rmsnorm"):
            stock_config = transformers.LlamaConfig(**common, rms_norm_eps=d["rms_norm_eps"],
                                                    attention_bias=d.get("attention_bias", False),
                                                    mlp_bias=d.get("mlp_bias", False), head_dim=d.get("head_dim"))
            cls = transformers.LlamaForCausalLM
        elif (mlp, norm) == ("relu2", "layernorm1p"):
            stock_config = transformers.NemotronConfig(**common, norm_eps=d["rms_norm_eps"], hidden_act="relu2",
                                                       attention_bias=d.get("attention_bias", False),
                                                       mlp_bias=d.get("mlp_bias", False), head_dim=d.get("head_dim"))
            cls = transformers.NemotronForCausalLM
        else:
            raise SystemExit(f"no stock transformers class has mlp_type={mlp!r} with norm_type={norm!r}")
    elif family == "ssa_gpt2":
        stock_config = transformers.GPT2Config(**{k: v for k, v in d.items() if k in transformers.GPT2Config().to_dict()
                                                  and k not in ("model_type", "architectures", "transformers_version")})
        cls = transformers.GPT2LMHeadModel
    elif family == "ssa_bert":
        stock_config = transformers.RobertaConfig(**{k: v for k, v in d.items()
                                                     if k in transformers.RobertaConfig().to_dict()
                                                     and k not in ("model_type", "architectures", "transformers_version")})
        cls = transformers.RobertaForMaskedLM
    else:
        raise SystemExit(f"no stock transformers class for {family!r}")
    kwargs = {"attn_implementation": "sdpa"} | ({"dtype": dtype} if dtype is not None else {})
    return cls._from_config(stock_config, **kwargs)


def _parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def build(preset: str, scoring: str, implementation: str, max_length: int, dtype=None):
    import torch

    from ssa_hf.presets import build_model, load_model_config

    from ssa_hf.models.attention import own_implementation_overrides

    torch.manual_seed(0)
    stock = implementation == "stock"
    overrides = {"attention_scoring": scoring, **own_implementation_overrides("sdpa" if stock else implementation)}
    config = load_model_config(preset)
    if getattr(config, "max_position_embeddings", 0) < max_length:
        overrides["max_position_embeddings"] = max_length
    config = load_model_config(preset, **overrides)
    if stock:
        model = stock_model(config, dtype)
        ours = build_model(load_model_config(preset, attention_scoring="ssa", **{
            k: v for k, v in overrides.items() if k == "max_position_embeddings"}), _task(config))
        extra = _parameters(ours) - _parameters(model)
        ssa_values = sum(p.numel() for name, p in ours.named_parameters() if name.endswith(("ssa_b", "ssa_n", ".b", ".n"))
                         or "scoring" in name)
        if extra != ssa_values:  # the same sizes, MLP and norm: only SSA's own values differ
            raise RuntimeError(f"stock {type(model).__name__} has {_parameters(model):,} parameters, the ssa-hf model "
                               f"{_parameters(ours):,} ({ssa_values} of them SSA's): not the same architecture")
        implementation = "sdpa"
    else:
        model = build_model(config, _task(config), attn_implementation=implementation, dtype=dtype)
    if model.config._attn_implementation != implementation:  # a baseline must be what its row says it is
        raise RuntimeError(f"asked for attn_implementation={implementation!r}, the model runs "
                           f"{model.config._attn_implementation!r}")
    return model


class TrainingRun:
    """One variant's model, optimizer and batch; `step()` times one forward+backward+AdamW step."""

    def __init__(self, model, batch: int, length: int, optimizer: str = "fused"):
        import torch

        self.model = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=optimizer == "fused" or None)
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(3, model.config.vocab_size, (batch, length), generator=g)

    autocast = False

    def step(self) -> float:
        import torch

        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
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


def decode_step_call(model, cache_length: int, steps: int):
    """A zero-argument function timing `steps` greedy decoding steps (one new token each, KV cache of
    `cache_length` tokens from a prefill), returning the mean seconds per step; the cache is cropped back after each
    step so that every step sees the same length."""
    import torch
    from transformers import DynamicCache

    model.eval()
    ids = torch.randint(3, model.config.vocab_size, (1, cache_length), generator=torch.Generator().manual_seed(1))
    # the cache argument is `cache` since transformers 5.2x, `past_key_values` before (the pin admits 5.17): an
    # unknown keyword is swallowed by **kwargs, and the model would run without its cache
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        token = model(input_ids=ids, use_cache=True, **{name: cache}).logits[:, -1:].argmax(-1)
    if cache.get_seq_length() != cache_length:
        raise RuntimeError(f"the prefill left {cache.get_seq_length()} tokens in the cache, not {cache_length}: "
                           f"{type(model).__name__}.forward did not take the cache as `{name}`")
    position = torch.tensor([cache_length])
    step_kwargs = {"input_ids": token, "use_cache": True, "cache_position": position, name: cache}

    def call() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(steps):
                model(**step_kwargs)
                cache.crop(-1)
            return (time.perf_counter() - start) / steps

    return call


def measure_decode_steps(args, preset: str, length: int) -> list[dict]:
    """Per-token decoding step of every variant at one (preset, cache length), the variants alternating."""
    import torch

    dtype = getattr(torch, args.dtype)
    # Each variant `--copies` times, built in mirrored order (A B C D, then D C B A): where a model's weights land
    # in memory moves a 114M model's step (it streams its weights) by 2-3%, and the first one built is the slow one
    # whatever its kind (measured); a variant's time per round is the mean over its copies.
    copies = {}
    for copy in range(args.copies):
        for name, scoring, impl in (VARIANTS if copy % 2 == 0 else VARIANTS[::-1]):
            copies[(name, copy)] = build(preset, scoring, impl, length + 1, dtype)
    calls = {key: decode_step_call(model, length, args.steps_per_round) for key, model in copies.items()}
    alternate(calls, 2)  # warm-up: kernels built, layer states made, caches warm
    by_copy = alternate(calls, args.rounds, args.min_seconds, max_repeats=max(args.rounds, 2000))
    times = {name: [statistics.fmean(round_times) for round_times in zip(*(by_copy[(name, c)] for c in range(args.copies)))]
             for name, _, _ in VARIANTS}
    rows = []
    for name, scoring, impl in VARIANTS:
        rows.append({"preset": preset, "cache_length": length, "variant": name, "attn_implementation": impl,
                     "step_us": statistics.median(times[name]) * 1e6, "rounds": len(times[name]), "copies": args.copies,
                     "vs_stock_paired": paired_ratio(times[name], times["stock sdpa"]),
                     "vs_sdpa_paired": paired_ratio(times[name], times["softmax sdpa"])})
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def measure_decode_calls(args) -> list[dict]:
    """The public `scored_attention` (its argument checks included) against torch's SDPA at decode shapes: one
    query against Lk keys, batch 1, no mask, no grad, the two alternating call by call."""
    import torch
    import torch.nn.functional as F

    from ssa_hf.models.attention import scored_attention

    rows = []
    for heads in (int(h) for h in split_args(args.heads)):
        for length in (int(L) for L in split_args(args.lengths)):
            g = torch.Generator().manual_seed(heads * 7919 + length)
            q, k, v = (torch.randn(1, heads, n, args.head_dim, generator=g) for n in (1, length, length))
            b, n = torch.full((heads,), 0.8), torch.full((heads,), 1.5)
            variants = {
                "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
                "scored_attention ssa (tensor b, n)": lambda: scored_attention(q, k, v, "ssa", {"b": b, "n": n}),
                "scored_attention ssa (float b, n)": lambda: scored_attention(q, k, v, "ssa", {"b": 0.8, "n": 1.5}),
                "scored_attention softmax": lambda: scored_attention(q, k, v, "softmax"),
            }

            def timed(fn, count=args.steps_per_round):
                def call() -> float:
                    start = time.perf_counter()
                    for _ in range(count):
                        fn()
                    return (time.perf_counter() - start) / count
                return call

            with torch.no_grad():
                calls = {name: timed(fn) for name, fn in variants.items()}
                alternate(calls, 3)
                times = alternate(calls, args.rounds, args.min_seconds, max_repeats=max(args.rounds, 2000))
            for name in variants:
                rows.append({"heads": heads, "kv_length": length, "head_dim": args.head_dim, "variant": name,
                             "us_per_call": statistics.median(times[name]) * 1e6, "rounds": len(times[name]),
                             "vs_sdpa_paired": paired_ratio(times[name], times["sdpa"])})
                print(rows[-1], file=sys.stderr, flush=True)
    return rows


def measure(args, preset: str, length: int) -> list[dict]:
    """Training and decoding rates of every variant at one (preset, length), the variants alternating."""
    import torch

    dtype = getattr(torch, args.dtype)
    models = {name: build(preset, scoring, impl, max(length, args.prompt + args.new_tokens), dtype)
              for name, scoring, impl in VARIANTS}
    causal = all(getattr(m, "can_generate", lambda: False)() for m in models.values())
    runs = {name: TrainingRun(model, args.batch, length, args.optimizer) for name, model in models.items()}
    for run in runs.values():
        run.autocast = args.autocast
    alternate({name: run.step for name, run in runs.items()}, args.warmup)  # builds kernels, warms caches
    train = alternate({name: run.step for name, run in runs.items()}, args.steps, args.min_seconds)
    decode = {}
    if args.decode and causal:
        calls = {name: generate_call(model, args.prompt, args.new_tokens) for name, model in models.items()}
        alternate(calls, 1)  # warm-up
        decode = alternate(calls, args.decode_repeats, args.min_seconds)
    rows = []
    for name, scoring, impl in VARIANTS:
        step_s = statistics.median(train[name])
        row = {"preset": preset, "length": length, "variant": name, "attn_implementation": impl,
               "train_tokens_per_s": args.batch * length / step_s, "train_step_s": step_s,
               "train_steps_timed": len(train[name]), "optimizer": args.optimizer}
        row["parameters"] = _parameters(models[name])
        row["train_vs_sdpa_paired"] = paired_ratio(train["softmax sdpa"], train[name])
        row["train_vs_stock_paired"] = paired_ratio(train["stock sdpa"], train[name])
        if decode:
            row["decode_tokens_per_s"] = args.new_tokens / statistics.median(decode[name])
            row["generates_timed"] = len(decode[name])
            row["decode_vs_sdpa_paired"] = paired_ratio(decode["softmax sdpa"], decode[name])
            row["decode_vs_stock_paired"] = paired_ratio(decode["stock sdpa"], decode[name])
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    return rows


def _interval(ratio: dict) -> str:
    return ratio_text(ratio, rounds=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["tiny_llama", "decoder_114m"])
    parser.add_argument("--lengths", nargs="+", default=None,
                        help="sequence lengths (default 256 1024); KV-cache lengths for --decode-steps (default 128 512) "
                             "and --decode-calls (default 16 128 512)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="timed training steps (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed training steps first")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--decode-repeats", type=int, default=2)
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="keep alternating training steps (and generates) until this long has passed per cell")
    parser.add_argument("--no-decode", dest="decode", action="store_false")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="weights' dtype")
    parser.add_argument("--autocast", action="store_true", help="training under CPU bfloat16 autocast")
    parser.add_argument("--optimizer", default="fused", choices=["fused", "loop"],
                        help="AdamW update: fused (as ssa-hf pretrain's adam_fused: true) or torch's default loop")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="tiny and decoder_114m at L=256 and 1024")
    parser.add_argument("--load", type=int, default=0,
                        help="busy processes (`while True: pass`) running during the whole measurement, as data-loader "
                             "workers or a second job would")
    parser.add_argument("--decode-steps", action="store_true",
                        help="only per-token decoding steps (KV cache of each --lengths), every variant alternating")
    parser.add_argument("--decode-calls", action="store_true",
                        help="only the public scored_attention against torch SDPA per decode-shaped call")
    parser.add_argument("--heads", nargs="+", default=["4", "8", "12"], help="--decode-calls: query heads")
    parser.add_argument("--head-dim", type=int, default=64, help="--decode-calls: head dim")
    parser.add_argument("--rounds", type=int, default=30, help="--decode-steps/--decode-calls: timed rounds (median)")
    parser.add_argument("--copies", type=int, default=2,
                        help="--decode-steps: models built per variant, in mirrored order (memory placement balanced)")
    parser.add_argument("--steps-per-round", type=int, default=20,
                        help="--decode-steps/--decode-calls: steps (calls) timed together per variant per round")
    parser.add_argument("--output", default="bench_model.json")
    args = parser.parse_args(argv)
    if args.lengths is None:
        args.lengths = ["16", "128", "512"] if args.decode_calls else ["128", "512"] if args.decode_steps else ["256", "1024"]
    pin_malloc_env()
    sys.path.insert(0, str(REPO))
    import torch

    import ssa_hf  # noqa: F401  (registers the attention implementations)

    torch.set_num_threads(args.threads)
    if args.decode_steps or args.decode_calls:
        return decode_main(args)
    plan = [(p, int(L)) for p in split_args(args.presets) for L in split_args(args.lengths)]
    if args.quick:
        plan = QUICK_PLAN
    busy_before = busy_fraction()
    rows = []
    with BusyProcesses(args.load):
        for preset, length in plan:
            rows += measure(args, preset, length)
            gc.collect()
    for row in rows:
        same = {r["variant"]: r for r in rows if r["preset"] == row["preset"] and r["length"] == row["length"]}
        for key in ("train_tokens_per_s", "decode_tokens_per_s"):
            if key in row:
                row[f"{key}_vs_softmax"] = row[key] / same["softmax"][key]
                row[f"{key}_vs_sdpa"] = row[key] / same["softmax sdpa"][key]
                row[f"{key}_vs_stock"] = row[key] / same["stock sdpa"][key]
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "threads": args.threads,
               "torch": torch.__version__, "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
               "prompt": args.prompt, "new_tokens": args.new_tokens, "min_seconds": args.min_seconds, "malloc_env": MALLOC_ENV,
               "busy_before": busy_before, "busy_after": busy_fraction(), "busy_processes": args.load,
               "dtype": args.dtype, "autocast": args.autocast, "optimizer": args.optimizer}
    lines = ["| preset | L | variant | params | train tok/s | x softmax | x sdpa | paired x stock [95% CI] | decode tok/s "
             "| x softmax | x sdpa | paired x stock [95% CI] |",
             "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---|"]
    for r in rows:
        dec = (f"{r['decode_tokens_per_s']:.1f} | {r['decode_tokens_per_s_vs_softmax']:.2f} | "
               f"{r['decode_tokens_per_s_vs_sdpa']:.2f} | {_interval(r['decode_vs_stock_paired'])}") \
            if "decode_tokens_per_s" in r else "- | - | - | -"
        lines.append(f"| {r['preset']} | {r['length']} | {r['variant']} | {r['parameters']:,} | "
                     f"{r['train_tokens_per_s']:.0f} | {r['train_tokens_per_s_vs_softmax']:.2f} | "
                     f"{r['train_tokens_per_s_vs_sdpa']:.2f} | {_interval(r['train_vs_stock_paired'])} | {dec} |")
    _write_and_print(args.output, machine, rows, lines, f"{args.dtype} weights{' under bf16 autocast' if args.autocast else ''}; batch {args.batch}, AdamW {args.optimizer}, median of >= {args.steps} training steps (and >= {args.min_seconds} s) after {args.warmup} warm-up; decoding: prompt "
          f"{args.prompt}, {args.new_tokens} new tokens, greedy with KV cache (median of {args.decode_repeats}); "
          f"{machine['cores']} cores, {args.threads} threads, torch {machine['torch']}; {args.load} busy processes; machine busy before/after: "
          f"{busy_before}/{machine['busy_after']} (0 = idle)")
    return 0


def _write_and_print(output, machine, rows, lines, header) -> None:
    """The JSON (machine, rows, the markdown table) and the header line and table on stdout."""
    text = "\n".join(lines)
    Path(output).write_text(json.dumps({"machine": machine, "rows": rows, "table": text}, indent=2) + "\n")
    print(f"\n{header}\n")
    print(text)
    print(f"\nwrote {output}")


def decode_main(args) -> int:
    """--decode-steps / --decode-calls: a table of per-step (per-call) times and paired cost ratios, and JSON."""
    import torch

    busy_before, load_before = busy_fraction(), os.getloadavg()
    with BusyProcesses(args.load):
        if args.decode_calls:
            rows = measure_decode_calls(args)
        else:
            rows = []
            for preset in split_args(args.presets):
                for length in split_args(args.lengths):
                    rows += measure_decode_steps(args, preset, int(length))
                    gc.collect()
    machine = {"cpu": _cpu_name(), "cores": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
               "dtype": args.dtype, "rounds": args.rounds, "steps_per_round": args.steps_per_round,
               "malloc_env": MALLOC_ENV, "busy_before": busy_before, "busy_after": busy_fraction(),
               "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "busy_processes": args.load}
    if args.decode_calls:
        lines = ["| H | Lk | D | variant | us/call | paired x SDPA [95% CI] |", "|---:|---:|---:|---|---:|---|"]
        lines += [f"| {r['heads']} | {r['kv_length']} | {r['head_dim']} | {r['variant']} | {r['us_per_call']:.1f} | "
                  f"{_interval(r['vs_sdpa_paired'])} |" for r in rows]
        what = "decode-shaped calls (B=1, Lq=1, no mask, no grad), time ratios (> 1: slower than torch SDPA)"
    else:
        lines = ["| preset | cache | variant | us/step | paired x stock [95% CI] | paired x softmax sdpa |",
                 "|---|---:|---|---:|---|---|"]
        lines += [f"| {r['preset']} | {r['cache_length']} | {r['variant']} | {r['step_us']:.0f} | "
                  f"{_interval(r['vs_stock_paired'])} | {_interval(r['vs_sdpa_paired'])} |" for r in rows]
        what = "greedy decoding steps (one token, KV cache), time ratios (> 1: slower than the stock class)"
    _write_and_print(args.output, machine, rows, lines, f"{what}; {args.dtype}; {machine['cpu']}, {machine['cores']} cores, {args.threads} threads, torch "
          f"{machine['torch']}; median of {args.rounds} rounds of {args.steps_per_round}; load average before/after "
          f"{load_before[0]:.2f}/{machine['loadavg_after'][0]:.2f}, busy before/after {busy_before}/{machine['busy_after']}, "
          f"{args.load} busy processes")
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    sys.exit(main())
