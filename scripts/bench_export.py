"""onnxruntime against eager PyTorch for ssa-hf models exported to ONNX (`ssa_hf.serving.export.export_onnx`): the
latency of one forward (logits of a [batch, length] input, no gradient) and the largest difference of the outputs.

Each preset is built with random weights (seeded), exported once (dynamic batch and length, checked by the export
itself), then timed in rounds: eager and onnxruntime back to back in each round, on the same inputs, with the same
number of threads; the ratio is paired by round (bench_common.paired_ratio; > 1: onnxruntime faster).

    python scripts/bench_export.py                                  # tiny_llama, a few seconds
    python scripts/bench_export.py --presets tiny_llama decoder_114m --lengths 128,512 --output bench_export.json

Writes JSON (date, command, CPU model and ISA flags, load, versions, rows, table) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_attention import cpu_description  # noqa: E402
from bench_common import MALLOC_ENV, BusyProcesses, busy_fraction, paired_ratio, pin_malloc_env, ratio_text, split_args  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _versions() -> dict:
    import importlib.metadata as metadata

    found = {}
    for name in ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "ssa-hf"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _time(call, min_seconds: float) -> float:
    """Median seconds of `call()` over at least 3 calls and `min_seconds`."""
    times, start = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(args, preset: str, lengths: list[int]) -> list[dict]:
    import numpy as np
    import onnxruntime
    import torch

    from ssa_hf.presets import build_model, load_model_config
    from ssa_hf.serving import export as ex

    torch.manual_seed(0)
    model = build_model(load_model_config(preset), "causal_lm").eval()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = ex.export_onnx(model, Path(tmp) / "onnx")
        export_seconds = time.perf_counter() - start
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
        session = onnxruntime.InferenceSession(str(result.artifact), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        for length in lengths:
            inputs = ex.sample_inputs(model, batch_size=args.batch, length=length, seed=length)
            feeds = {name: inputs[name].numpy() for name in ex.INPUT_NAMES}
            with torch.no_grad():
                want = model(**inputs).logits
                got = session.run(None, feeds)[0]
                diff = float(np.abs(got - want.numpy()).max())
                eager_times, ort_times = [], []
                for _ in range(args.rounds):
                    eager_times.append(_time(lambda: model(**inputs), args.min_seconds))
                    ort_times.append(_time(lambda: session.run(None, feeds), args.min_seconds))
            rows.append({"preset": preset, "parameters": sum(p.numel() for p in model.parameters()),
                         "batch": args.batch, "length": length, "eager_ms": 1e3 * statistics.median(eager_times),
                         "onnxruntime_ms": 1e3 * statistics.median(ort_times),
                         "onnxruntime_vs_eager": paired_ratio(eager_times, ort_times),
                         "max_abs_diff": diff, "max_abs_logit": float(want.abs().max()),
                         "export_check_max_abs_diff": result.max_abs_diff, "export_seconds": export_seconds})
            gc.collect()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["tiny_llama"], help="model presets (configs/models/)")
    parser.add_argument("--lengths", nargs="+", default=["16", "128"], help="sequence lengths (comma or space)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds (eager, then onnxruntime)")
    parser.add_argument("--min-seconds", type=float, default=0.3, help="least time per measurement")
    parser.add_argument("--threads", type=int, default=1, help="threads of both runtimes")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the benchmark")
    parser.add_argument("--output", default="bench_export.json")
    args = parser.parse_args(argv)
    pin_malloc_env()
    sys.path.insert(0, str(REPO))
    import torch

    torch.set_num_threads(args.threads)
    lengths = [int(x) for x in split_args(args.lengths)]
    busy_before, load_before = busy_fraction(), os.getloadavg()
    rows = []
    with BusyProcesses(args.load):
        for preset in split_args(args.presets):
            rows += measure(args, preset, lengths)
    machine = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "command": " ".join([Path(sys.executable).name, *sys.argv]), **cpu_description(),
               "cores": os.cpu_count(), "threads": args.threads, "malloc_env": MALLOC_ENV,
               "busy_before": busy_before, "busy_after": busy_fraction(), "loadavg_before": load_before,
               "loadavg_after": os.getloadavg(), "busy_processes": args.load, "versions": _versions(),
               "batch": args.batch, "rounds": args.rounds, "min_seconds": args.min_seconds}
    lines = ["| preset | params | batch x length | eager ms | onnxruntime ms | paired x eager [95% CI] (> 1: faster) "
             "| max abs diff | max abs logit |", "|---|---:|---|---:|---:|---|---:|---:|"]
    lines += [f"| {r['preset']} | {r['parameters']:,} | {r['batch']} x {r['length']} | {r['eager_ms']:.2f} | "
              f"{r['onnxruntime_ms']:.2f} | {ratio_text(r['onnxruntime_vs_eager'])} | {r['max_abs_diff']:.2g} | "
              f"{r['max_abs_logit']:.3g} |" for r in rows]
    table = "\n".join(lines)
    Path(args.output).write_text(json.dumps({"machine": machine, "rows": rows, "table": table}, indent=2) + "\n")
    versions = machine["versions"]
    print(f"\nONNX (onnxruntime {versions['onnxruntime']}, CPU) vs eager torch {versions['torch']}, float32, no gradient;"
          f" {machine.get('model', '')}, {args.threads} thread(s); load average before/after "
          f"{load_before[0]:.2f}/{machine['loadavg_after'][0]:.2f}, {args.load} busy processes\n")
    print(table)
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
