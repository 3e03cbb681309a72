"""Continuous-batching throughput of an SSA model against the stock LlamaForCausalLM, and (optionally) latency
through the server.

    python scripts/bench_serving.py                          # tiny decoder, 1/8/32 concurrent requests, fp32+bf16
    python scripts/bench_serving.py --preset decoder_114m    # the 114M decoder (configs/models/decoder_114m.yaml)
    python scripts/bench_serving.py --preset decoder_114m --llama-block   # its sizes, Llama's block: stock Llama
    python scripts/bench_serving.py --serve                  # also time to first token / inter-token latency
    python scripts/bench_serving.py --quick                  # one round, fewer tokens (a smoke run)

Throughput: transformers' continuous batching (`init_continuous_batching`, the manager behind `generate_batch` and
`transformers serve --continuous-batching`) with N requests of mixed prompt and answer lengths submitted at once,
greedy; tokens/s = generated tokens / wall time until the last request finishes. Variants, built from one config
and the same weights: `ssa` (SSALlamaForCausalLM, ssa-hf's paged attention `ssa_paged`), `stock sdpa` and
`stock paged|eager` (the stock class, LlamaForCausalLM, or NemotronForCausalLM for decoder_114m, under continuous
batching with transformers' own softmax attention). Each
round runs every variant once, the order rotating, so that all see the same machine load; ratios are paired by
round against `stock sdpa` (median and a distribution-free 95% interval).

--serve: `ssa-hf serve --continuous-batching` of each model folder (the stock model loads through transformers'
own path), queried with the openai client, one streaming request at a time: time to first token and the mean gap
between later tokens (median over requests).

Prints a table and writes JSON (machine: date, CPU model and vector ISA flags, load average, command, torch and
transformers versions).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import inspect
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import BusyProcesses, busy_fraction, paired_ratio, ratio_text, split_args  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512)
VARIANTS = ("ssa", "stock sdpa", "stock paged|eager")
BASELINE = "stock sdpa"


# the Llama block (SwiGLU MLP, RMSNorm, RoPE on every dimension) over a preset's sizes, whose stock class is then
# LlamaForCausalLM, which batches under transformers' continuous batching (NemotronForCausalLM does not, 5.25)
LLAMA_BLOCK = {"mlp_type": "swiglu", "norm_type": "rmsnorm",
               "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}


def build_models(preset: str | None, dtype, llama_block: bool = False):
    """variant -> model: the SSA model and the stock transformers class a user would pick instead, with the same
    sizes, MLP and norm (bench_model.stock_model: LlamaForCausalLM, or NemotronForCausalLM for decoder_114m); the
    stock models take the SSA model's weights where their names match (answers are as long as asked either way:
    no end-of-sequence token)."""
    import torch

    from bench_model import stock_model
    from ssa_hf import SSALlamaConfig, SSALlamaForCausalLM

    torch.manual_seed(0)
    if preset:
        from ssa_hf.presets import build_model, load_model_config

        ssa = build_model(load_model_config(preset, attention_scoring="ssa", **(LLAMA_BLOCK if llama_block else {})))
    else:
        ssa = SSALlamaForCausalLM(SSALlamaConfig(**TINY, pad_token_id=0, bos_token_id=1, eos_token_id=2))
    if type(ssa).__name__ != "SSALlamaForCausalLM":
        raise ValueError(f"preset {preset!r} builds a {type(ssa).__name__}; this benchmark compares SSALlama decoders")
    models = {"ssa": ssa}
    for variant, implementation in (("stock sdpa", "sdpa"), ("stock paged|eager", "paged|eager")):
        stock = stock_model(copy.deepcopy(ssa.config))  # a config of its own: the implementation is set on it
        own = stock.state_dict()
        stock.load_state_dict({k: v for k, v in ssa.state_dict().items() if k in own and own[k].shape == v.shape},
                              strict=False)
        stock.set_attn_implementation(implementation)
        models[variant] = stock
    return {name: model.to(dtype).eval() for name, model in models.items()}


def workload(concurrency: int, vocab: int, new_tokens: int, seed: int = 0):
    """`concurrency` requests: prompts of 8-96 tokens and answers of new_tokens/2 .. 3 new_tokens/2 tokens."""
    import random

    rng = random.Random(seed + concurrency)
    requests = []
    for _ in range(concurrency):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randrange(8, 97))]
        requests.append((prompt, rng.randrange(max(1, new_tokens // 2), new_tokens * 3 // 2 + 1)))
    return requests


def start_manager(model, max_batch_tokens: int):
    from transformers import ContinuousBatchingConfig, GenerationConfig

    generation = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0)
    # tokens per cache page: `page_size` in current transformers, `block_size` in 5.17
    page = "page_size" if "page_size" in inspect.signature(ContinuousBatchingConfig.__init__).parameters else "block_size"
    config = ContinuousBatchingConfig(num_blocks=256, max_batch_tokens=max_batch_tokens, **{page: 32})
    manager = model.init_continuous_batching(generation_config=generation, continuous_batching_config=config)
    manager.start()
    return manager


def run_requests(manager, requests, tag: str, timeout: float = 900.0) -> tuple[float, int]:
    """Submit all requests at once; (seconds until the last one finished, tokens generated)."""
    start = time.perf_counter()
    ids = [manager.add_request(prompt, request_id=f"{tag}-{i}", max_new_tokens=new)
           for i, (prompt, new) in enumerate(requests)]
    pending, tokens = set(ids), 0
    while pending:
        result = manager.get_result(timeout=1.0)
        if result is None:
            if not manager.is_running() or time.perf_counter() - start > timeout:
                raise RuntimeError(f"continuous batching stopped with {len(pending)} requests pending")
            continue
        if result.is_finished() and result.request_id in pending:
            if result.error is not None:
                raise RuntimeError(f"request {result.request_id} failed: {result.error}")
            pending.discard(result.request_id)
            tokens += len(result.generated_tokens)
    return time.perf_counter() - start, tokens


def measure_throughput(args, dtype_name: str) -> list[dict]:
    import torch

    dtype = getattr(torch, dtype_name)
    models = build_models(args.preset, dtype, args.llama_block)
    vocab = models["ssa"].config.vocab_size
    managers = {name: start_manager(model, args.max_batch_tokens) for name, model in models.items()}
    rows, failed = [], {}
    try:
        for name, manager in managers.items():  # warm-up: allocation, first calls; a variant that cannot batch is
            try:                                 # reported as such (transformers' NemotronForCausalLM, 5.25)
                run_requests(manager, workload(2, vocab, 4), f"warm-{name}")
            except RuntimeError as error:
                failed[name] = f"{type(models[name]).__name__}: {str(error).split(' failed: ', 1)[-1]}"
                print(f"  {dtype_name} {name}: {failed[name]}", flush=True)
        running = [name for name in models if name not in failed]
        for concurrency in args.concurrency:
            requests = workload(concurrency, vocab, args.new_tokens)
            times = {name: [] for name in running}
            tokens = {}
            for round_index in range(args.rounds):
                order = running[round_index % len(running):] + running[:round_index % len(running)]
                for name in order:
                    seconds, count = run_requests(managers[name], requests, f"{name}-{concurrency}-{round_index}")
                    times[name].append(seconds)
                    tokens[name] = count
            for name in models:
                row = {"dtype": dtype_name, "concurrency": concurrency, "variant": name,
                       "class": type(models[name]).__name__, "attention": models[name].config._attn_implementation,
                       "prompt_tokens": sum(len(p) for p, _ in requests)}
                if name in failed:
                    rows.append({**row, "error": failed[name]})
                    continue
                median = sorted(times[name])[len(times[name]) // 2]
                rows.append({**row, "tokens": tokens[name], "seconds": times[name], "tokens_per_s": tokens[name] / median,
                             "vs_stock_sdpa": paired_ratio(times[BASELINE], times[name]) if BASELINE in times else None})
                print(f"  {dtype_name} N={concurrency:<3} {name:<18} {tokens[name] / median:8.1f} tok/s", flush=True)
    finally:
        for manager in managers.values():
            manager.stop(block=True, timeout=30)
    return rows


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure_serving(args) -> list[dict]:
    """Time to first token and inter-token latency through `ssa-hf serve --continuous-batching` (fp32)."""
    import torch
    from openai import OpenAI
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    built = build_models(args.preset, torch.float32, args.llama_block)
    vocab = built["ssa"].config.vocab_size
    # a word-level tokenizer over the model's vocabulary: every token id is one word, so prompts are exact
    words = {f"w{i}": i for i in range(vocab)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="w0", bos_token="w1", eos_token="w2")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("ssa", "stock sdpa"):
            folder = Path(tmp) / name.replace(" ", "_")
            built[name].save_pretrained(folder)
            fast.save_pretrained(folder)
            port = _free_port()
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            process = subprocess.Popen([sys.executable, "-m", "ssa_hf.cli", "serve", str(folder), "--port", str(port),
                                        "--device", "cpu", "--continuous-batching", "--exit-after", "1200"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            try:
                deadline = time.monotonic() + 300
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                            break
                    except OSError:
                        if process.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"the server for {name} did not start")
                        time.sleep(1)
                client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=300)
                first, gaps = [], []
                for i, (prompt, _) in enumerate(workload(args.serve_requests + 1, vocab, args.new_tokens)):
                    text = " ".join(f"w{t}" for t in prompt)
                    sent = time.perf_counter()
                    arrivals = []
                    stream = client.chat.completions.create(model=str(folder), messages=[{"role": "user", "content": text}],
                                                            max_tokens=args.new_tokens, temperature=0, stream=True)
                    for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            arrivals.append(time.perf_counter())
                    if i == 0 or not arrivals:  # the first request warms the server up
                        continue
                    first.append(arrivals[0] - sent)
                    if len(arrivals) > 1:
                        gaps.append((arrivals[-1] - arrivals[0]) / (len(arrivals) - 1))
            finally:
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            rows.append({"variant": name, "requests": len(first), "ttft_s": sorted(first)[len(first) // 2],
                         "itl_s": sorted(gaps)[len(gaps) // 2] if gaps else None, "ttft_all": first, "itl_all": gaps})
            print(f"  serve {name:<12} TTFT {rows[-1]['ttft_s'] * 1000:.0f} ms  ITL "
                  f"{(rows[-1]['itl_s'] or 0) * 1000:.1f} ms", flush=True)
    return rows


def machine_description(args, load_before, busy_before) -> dict:
    import torch
    import transformers

    from bench_attention import cpu_description

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]), **cpu_description(),
            "cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "busy_before": busy_before,
            "busy_after": busy_fraction(), "busy_processes": args.load, "preset": args.preset or "tiny",
            "llama_block": args.llama_block, "new_tokens": args.new_tokens, "rounds": args.rounds, "max_batch_tokens": args.max_batch_tokens}


DOCS_BLOCK = ("<!-- generated: serving-figures -->\n", "\n<!-- end: serving-figures -->")


TARGET = 0.95  # SSA tokens/s over the stock class's (sdpa) under continuous batching, at every concurrency and dtype
SERVE_TARGET = 1.1  # SSA's time to first token and inter-token latency through serve over the stock model's


def target_sentence(result: dict) -> str:
    """What the run says about the throughput target, in words: the cells whose median paired ratio reaches it,
    those whose interval lies above it, and the lowest median."""
    cells = [(row["vs_stock_sdpa"], row) for row in result["rows"]
             if row["variant"] == "ssa" and row.get("vs_stock_sdpa")]
    if not cells:
        return "No SSA row has a paired ratio."
    median_met = sum(ratio["median"] >= TARGET for ratio, _ in cells)
    settled = sum(ratio["low"] is not None and ratio["low"] >= TARGET for ratio, _ in cells)
    lowest, row = min(cells, key=lambda cell: cell[0]["median"])
    machine = result["machine"]
    load = (f"{machine['busy_processes']} busy processes beside it" if machine.get("busy_processes")
            else "no busy processes added")  # (how busy it was is in the JSON: busy_before, busy_after)
    text = (f"Target: SSA at least {TARGET:.2f}x the stock `sdpa` tokens/s. Measured with {load}: the median paired "
            f"ratio reaches it in {median_met} of {len(cells)} cells (lowest {lowest['median']:.2f}, {row['dtype']} "
            f"with {row['concurrency']} request{'' if str(row['concurrency']) == '1' else 's'}); "
            + (f"the interval lies wholly above it in {settled} of {len(cells)}." if any(
                ratio["low"] is not None for ratio, _ in cells) else
               f"{cells[0][0]['rounds']} rounds are too few for a 95% interval."))
    served = {r["variant"]: r for r in result.get("serving") or []}
    if "ssa" in served and BASELINE in served:
        ssa, stock = served["ssa"], served[BASELINE]
        text += (f" Through serve (target: within {SERVE_TARGET:g}x the stock model's latencies, lower is better): "
                 f"time to first token {ssa['ttft_s'] / stock['ttft_s']:.2f}x, inter-token latency "
                 f"{ssa['itl_s'] / stock['itl_s']:.2f}x.")
    return text


def docs_block(result: dict, source: str) -> str:
    """The figures block of docs/serving.md from a result JSON (its table, what it says about the target and
    where it came from)."""
    machine = result["machine"]
    command = " ".join(["python", *machine["command"].split()[1:]])
    return (f"{DOCS_BLOCK[0]}Source: `{source}`, written by `{command}` ({machine['cores']} CPU cores, torch "
            f"{machine['torch']}, transformers {machine['transformers']}).\n\n{result['table']}\n"
            f"{target_sentence(result)}\n{DOCS_BLOCK[1]}")


def render_docs(json_path: str, doc_path: str) -> None:
    """Rewrite the figures block of `doc_path` from `json_path`."""
    doc = Path(doc_path).read_text()
    start, end = doc.find(DOCS_BLOCK[0]), doc.find(DOCS_BLOCK[1])
    if start < 0 or end < 0:
        raise ValueError(f"{doc_path} has no block {DOCS_BLOCK[0].strip()} ... {DOCS_BLOCK[1].strip()}")
    block = docs_block(json.loads(Path(json_path).read_text()), json_path)
    Path(doc_path).write_text(doc[:start] + block + doc[end + len(DOCS_BLOCK[1]):])
    print(f"rewrote the figures of {doc_path} from {json_path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default=None, help="a model preset (e.g. decoder_114m); default: a tiny decoder")
    parser.add_argument("--llama-block", action="store_true",
                        help="with --preset: its sizes with the Llama block (SwiGLU, RMSNorm, full RoPE), compared "
                             "with the stock LlamaForCausalLM (decoder_114m's stock Nemotron class cannot batch)")
    parser.add_argument("--concurrency", nargs="+", default=["1", "8", "32"], help="concurrent requests (default 1 8 32)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--new-tokens", type=int, default=32, help="mean answer length (answers: 0.5x to 1.5x)")
    parser.add_argument("--rounds", type=int, default=7,
                        help="rounds per cell, every variant once per round (6 or more give a 95%% interval)")
    parser.add_argument("--max-batch-tokens", type=int, default=256, help="continuous batching's token budget per step")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--load", type=int, default=0, help="busy processes running during the measurement")
    parser.add_argument("--serve", action="store_true", help="also time to first token / inter-token latency (serve)")
    parser.add_argument("--serve-requests", type=int, default=8, help="--serve: timed requests per model")
    parser.add_argument("--quick", action="store_true", help="one round, 8 new tokens (smoke run)")
    parser.add_argument("--output", default="bench_serving.json")
    parser.add_argument("--docs", default=None, metavar="MARKDOWN",
                        help="also rewrite the figures block of this file (docs/serving.md) from the JSON written")
    parser.add_argument("--render-docs", default=None, metavar="JSON",
                        help="only rewrite the --docs file's figures block from this earlier result")
    args = parser.parse_args(argv)
    if args.llama_block and not args.preset:
        parser.error("--llama-block takes the sizes of a --preset (e.g. --preset decoder_114m)")
    if args.render_docs:
        render_docs(args.render_docs, args.docs or str(REPO / "docs" / "serving.md"))
        return 0
    args.concurrency = [int(c) for c in split_args(args.concurrency)]
    args.dtypes = split_args(args.dtypes)
    if args.quick:
        args.rounds, args.new_tokens = 1, 8
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    load_before, busy_before = os.getloadavg(), busy_fraction()
    rows, serving = [], []
    with BusyProcesses(args.load):
        for dtype in args.dtypes:
            rows += measure_throughput(args, dtype)
        if args.serve:
            serving = measure_serving(args)
    machine = machine_description(args, load_before, busy_before)
    lines = ["| dtype | concurrent | variant | attention | tokens | tok/s | paired x stock sdpa [95% CI] |",
             "|---|---:|---|---|---:|---:|---|"]
    lines += [f"| {r['dtype']} | {r['concurrency']} | {r['variant']} | `{r['attention']}` | " + (
              f"- | failed: {r['error'][:80]} | - |" if "error" in r else
              f"{r['tokens']} | {r['tokens_per_s']:.1f} | {ratio_text(r['vs_stock_sdpa'])} |") for r in rows]
    if serving:
        base = next(r for r in serving if r["variant"] == "stock sdpa")
        lines += ["", "| served (continuous batching, fp32) | TTFT ms | x stock | ITL ms | x stock |", "|---|---:|---:|---:|---:|"]
        for r in serving:
            itl = f"{r['itl_s'] * 1000:.1f} | {r['itl_s'] / base['itl_s']:.2f}" if r["itl_s"] and base["itl_s"] else "- | -"
            lines.append(f"| {r['variant']} | {r['ttft_s'] * 1000:.0f} | {r['ttft_s'] / base['ttft_s']:.2f} | {itl} |")
    text = "\n".join(lines)
    Path(args.output).write_text(json.dumps({"machine": machine, "rows": rows, "serving": serving, "table": text},
                                            indent=2) + "\n")
    print(f"\ncontinuous batching, greedy, prompts 8-96 tokens, answers {args.new_tokens // 2}-{args.new_tokens * 3 // 2}"
          f" tokens; {machine['model']}; {machine['cores']} cores, "
          f"{machine['threads']} threads; torch {machine['torch']}, transformers {machine['transformers']}; load average "
          f"before/after {load_before[0]:.2f}/{machine['loadavg_after'][0]:.2f}\n")
    print(text)
    print(f"\nwrote {args.output}")
    if args.docs:
        render_docs(args.output, args.docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
