"""Uptraining end to end on the CPU (`ssa-hf uptrain-demo`): pretrain a small softmax decoder, convert it to SSA with
the softmax-matched initialisation, continue training it beside a softmax control for the same steps (paired by
seed: same data order, same validation set), and report the validation loss at step 0 (which must equal the
source's) and after, the trajectories of b and n (a plot), and the paired differences to the control.

Arms: `softmax` (the source, trained on), and one SSA arm per entry of `scoring_learning_rates` (the learning rate
of b and n; the other weights use `learning_rate` in every arm), optionally with a warm-up of `scoring_warmup_steps`
steps training only b and n. Everything is the package's own: `pretrain` for every run, `convert_checkpoint` with
init="matched" for the conversion; the runs' folders stay in the output folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..regular_files import check_regular_file

# paired differences of validation loss within this many nats count as ties (neither arm better)
TIE = 1e-3
SOURCE_MODEL = {"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "max_position_embeddings": 128}


@dataclass
class UptrainDemoConfig:
    """The demo (defaults: about 4-6 CPU-minutes on two cores).

    train_path: JSON-lines text (field `text`; .gz allowed); the first `validation_documents` documents are the validation set of every run.
    max_documents: documents read from train_path.
    validation_documents: documents held out for validation (the same for the source and every arm).
    block_size: tokens per training block.
    vocab_size: byte-level BPE vocabulary trained for the source.
    source_steps: steps of the softmax source's pretraining.
    source_learning_rate: peak learning rate of the source's pretraining.
    uptrain_steps: steps of every uptraining arm.
    learning_rate: peak learning rate of the uptraining (all weights but b and n).
    scoring_learning_rates: one SSA arm per value: the peak learning rate of b and n.
    scoring_warmup_steps: SSA arms: the first this many steps train only b and n.
    temperature_learning_rate: if set, a second control: the source with a learnable softmax temperature t (from 1, so also starting exactly at the source), t trained at this rate; it tells a gain from SSA's shape from one a sharper or flatter softmax would give too (with n fixed, a growing b also raises b n, the inverse temperature).
    matched_b: b of the softmax-matched conversion (n = 1 / b).
    scoring_parametrization: how the converted model stores b and n (softplus, exp or raw).
    seeds: one paired run per arm and seed (data order, dropout).
    batch_size: sequences per step.
    eval_steps: validation every this many steps (and at step 0).
    cpu_threads: torch threads per run.
    """

    train_path: str = "${SSA_HF_DATA_DIR}/webtext_c4/c4_en_validation_2k.jsonl.gz"
    max_documents: int = 1500
    validation_documents: int = 100
    block_size: int = 64
    vocab_size: int = 2048
    source_steps: int = 300
    source_learning_rate: float = 3e-3
    uptrain_steps: int = 200
    learning_rate: float = 1e-3
    scoring_learning_rates: list[float] = field(default_factory=lambda: [1e-3, 3e-2, 1e-1])
    scoring_warmup_steps: int = 0
    temperature_learning_rate: float | None = 3e-2
    matched_b: float = 1e-3
    scoring_parametrization: str = "softplus"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    batch_size: int = 16
    eval_steps: int = 25
    cpu_threads: int = 1


def _split_documents(config: UptrainDemoConfig, out) -> tuple[Path, Path]:
    """train.jsonl and validation.jsonl (in out/data) from train_path: the first validation_documents documents
    validate."""
    from ..data.sources import expand_path, iter_jsonl_records
    from ..reporting import atomic_write_bytes

    path = Path(expand_path(config.train_path))
    if path.exists() and not path.is_dir():
        check_regular_file(path, "train_path")  # (a FIFO: refused, never waited on)
    if not path.is_file():
        raise FileNotFoundError(f"train_path {path} does not exist; give a JSON-lines file with a `text` field "
                                "(--train-path), e.g. the web-text sample of ../shared/data")
    texts = []
    # (gzip or not; a line that is not UTF-8 or not a JSON object: one line naming the file and the line)
    for _, record in iter_jsonl_records(path):
        if len(texts) >= config.max_documents:
            break
        text = record.get("text")
        if isinstance(text, str) and text.strip():
            texts.append(text)
    if len(texts) <= config.validation_documents:
        raise ValueError(f"{path}: {len(texts)} documents, not more than validation_documents="
                         f"{config.validation_documents}")
    out.folder("data")
    files = []
    for name, part in (("validation", texts[:config.validation_documents]), ("train", texts[config.validation_documents:])):
        files.append(out.file(f"data/{name}.jsonl"))  # (checked: a link there is refused, never written through)
        atomic_write_bytes(files[-1], "".join(json.dumps({"text": t}) + "\n" for t in part).encode("utf-8"))
    return files[1], files[0]


def _run_config(config: UptrainDemoConfig, output_dir: Path, train: Path, validation: Path, *, seed: int,
                steps: int, learning_rate: float, model: dict, **extra):
    from . import load_config

    values = {
        "task": "causal", "output_dir": str(output_dir), "seed": seed, "model": model,
        "tokenizer": {"vocab_size": config.vocab_size, "train_documents": None},
        "data": {"train": {"path": str(train)}, "validation": {"path": str(validation)},
                 "block_size": config.block_size, "validation_max_samples": 256},
        "max_steps": steps, "per_device_train_batch_size": config.batch_size, "learning_rate": learning_rate,
        "min_learning_rate": learning_rate / 10, "lr_scheduler": "cosine", "warmup_steps": max(1, steps // 20),
        "weight_decay": 0.1, "max_grad_norm": 1.0, "cpu": True, "cpu_threads": config.cpu_threads,
        "logging_steps": 5, "eval_steps": config.eval_steps, "save_steps": 0, "save_total_limit": 1,
        "per_device_eval_batch_size": 32, "report_to": ["none"], "overwrite_output_dir": True, **extra,
    }
    return load_config(None, values)


def _trajectory(history: list[dict], key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in history if key in r and isinstance(r[key], (int, float))]


def _scoring_means(history: list[dict], name: str) -> list[tuple[int, float]]:
    """(step, mean over layers of the per-layer mean of `name`) from the logged scoring statistics."""
    out = []
    for record in history:
        values = [v for k, v in record.items() if k.startswith("ssa/") and k.endswith(f"/{name}_mean")]
        if values:
            out.append((record["step"], sum(values) / len(values)))
    return out


def run_uptrain_demo(config: UptrainDemoConfig | None = None, output_dir: str = "outputs/uptrain_demo") -> dict:
    """Run the demo into `output_dir` (uptrain_demo.json, uptrain_demo.md, uptrain_demo.png, the runs' folders)."""
    from ..hub import convert_checkpoint
    from ..reporting import OutputDir
    from . import pretrain

    config = config or UptrainDemoConfig()
    if not config.seeds or not config.scoring_learning_rates:
        raise ValueError("seeds and scoring_learning_rates must each name at least one value")
    # the demo owns its folder whole: a link leading out of it anywhere is refused before anything is written,
    # and every folder a run writes or replaces is checked on its path (`OutputDir.folder`, `.replace`)
    out = OutputDir(output_dir, "uptrain-demo output folder", owned=True)
    root = out.path
    for name in ("data", "source", "softmax_source", "ssa_matched", "temperature_t1", "runs"):
        out.file(name)
    for child in sorted((root / "runs").iterdir()) if (root / "runs").is_dir() else []:
        out.file(f"runs/{child.name}")  # (a run folder linked to another inside the demo's folder: refused too)
    train, validation = _split_documents(config, out)

    source_run = pretrain(_run_config(config, out.folder("source"), train, validation, seed=0, steps=config.source_steps,
                                      learning_rate=config.source_learning_rate,
                                      model={"preset": "tiny_llama", "attention_scoring": "softmax",
                                             "overrides": dict(SOURCE_MODEL)}))
    source_folder = root / "softmax_source"
    _replace_folder(Path(source_run.final_dir), out, "softmax_source")
    matched = out.file("ssa_matched")
    conversion = convert_checkpoint(source_folder, matched, "ssa", init="matched", matched_b=config.matched_b,
                                    overwrite=True, scoring_parametrization=config.scoring_parametrization)

    arms: dict[str, dict[str, Any]] = {"softmax": {"folder": source_folder, "extra": {}}}
    if config.temperature_learning_rate is not None:
        temperature = out.file("temperature_t1")
        convert_checkpoint(source_folder, temperature, "temperature", overwrite=True, temperature_init=1.0,
                           temperature_learnable=True)
        arms[f"temperature (t lr {config.temperature_learning_rate:g})"] = {
            "folder": temperature, "extra": {"scoring_learning_rate": config.temperature_learning_rate}}
    for rate in config.scoring_learning_rates:
        extra = {"scoring_learning_rate": rate}
        if config.scoring_warmup_steps:
            extra["scoring_warmup_steps"] = config.scoring_warmup_steps
        arms[f"ssa (b, n lr {rate:g})"] = {"folder": matched, "extra": extra}

    runs: dict[str, dict[int, dict]] = {name: {} for name in arms}
    for seed in config.seeds:
        for name, arm in arms.items():
            folder = out.folder(f"runs/{_slug(name)}_seed{seed}")
            result = pretrain(_run_config(config, folder, train, validation, seed=seed, steps=config.uptrain_steps,
                                          learning_rate=config.learning_rate, model={"pretrained": str(arm["folder"])},
                                          eval_at_start=True, **arm["extra"]))
            history = result.log_history
            if arm["folder"] == matched:  # the values the run started from (the first logged ones are after step 5)
                history = [{"step": 0, "ssa/start/b_mean": conversion.init["b"], "ssa/start/n_mean": conversion.init["n"]},
                           *history]
            runs[name][seed] = {
                "eval_loss_at_start": result.metrics["eval_loss_at_start"], "eval_loss": result.metrics["eval_loss"],
                "eval_losses": _trajectory(history, "eval_loss"), "b": _scoring_means(history, "b"),
                "n": _scoring_means(history, "n"), "t": _scoring_means(history, "t"), "scoring_parameters": result.metrics["scoring_parameters"],
                "train_tokens_per_second": result.metrics["train_tokens_per_second"],
            }
    summary = _summarise(config, source_run.metrics["eval_loss"], runs)
    result = {"config": asdict(config), "source_eval_loss": source_run.metrics["eval_loss"],
              "source_steps": config.source_steps, "conversion_check": conversion.output_check,
              "conversion_init": conversion.init, "runs": runs, "summary": summary}
    out.write_json("uptrain_demo.json", result)
    out.write_markdown("uptrain_demo.md", _markdown(config, result))
    result["plot"] = str(_plot(out, config, runs))
    return result


def _replace_folder(src: Path, out, name: str) -> None:
    """A copy of the model folder `src` replaces out/name (a model folder this demo wrote: it has config.json)."""
    import shutil

    with out.replace(name, overwrite=True, sources=[src], owner_file="config.json") as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True, symlinks=True)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_").replace("__", "_")


def _summarise(config: UptrainDemoConfig, source_loss: float, runs: dict) -> list[dict]:
    control = runs["softmax"]
    rows = []
    for name, by_seed in runs.items():
        starts = [r["eval_loss_at_start"] for r in by_seed.values()]
        finals = [r["eval_loss"] for r in by_seed.values()]
        diffs = [by_seed[s]["eval_loss"] - control[s]["eval_loss"] for s in config.seeds]
        row = {"arm": name, "seeds": list(config.seeds), "step0_loss": starts,
               "step0_max_abs_diff_to_source": max(abs(x - source_loss) for x in starts),
               "final_loss": finals, "final_loss_mean": sum(finals) / len(finals),
               "paired_diff_to_softmax": diffs, "paired_diff_mean": sum(diffs) / len(diffs),
               "seeds_better_than_softmax": sum(d < -TIE for d in diffs),
               "seeds_worse_than_softmax": sum(d > TIE for d in diffs)}
        b = [r["b"] for r in by_seed.values() if r["b"]]
        n = [r["n"] for r in by_seed.values() if r["n"]]
        t = [r["t"] for r in by_seed.values() if r["t"]]
        if t:
            row["t_end_mean"] = sum(x[-1][1] for x in t) / len(t)
        if b:
            row["b_end_mean"] = sum(t[-1][1] for t in b) / len(b)
            row["n_end_mean"] = sum(t[-1][1] for t in n) / len(n)
            row["bn_end_mean"] = sum(tb[-1][1] * tn[-1][1] for tb, tn in zip(b, n)) / len(b)
        rows.append(row)
    return rows


def _markdown(config: UptrainDemoConfig, result: dict) -> str:
    from ..reporting import markdown_table

    fmt = lambda xs: ", ".join(f"{x:.4f}" for x in xs)  # noqa: E731
    rows = []
    for row in result["summary"]:
        rows.append([row["arm"], fmt(row["step0_loss"]), f"{row['step0_max_abs_diff_to_source']:.2g}",
                     fmt(row["final_loss"]), fmt(row["paired_diff_to_softmax"]),
                     f"{row['seeds_better_than_softmax']} / {row['seeds_worse_than_softmax']} / {len(row['seeds'])}",
                     f"{row['b_end_mean']:.3g}" if "b_end_mean" in row else "-",
                     f"{row['n_end_mean']:.4g}" if "n_end_mean" in row else "-",
                     f"{row['bn_end_mean']:.3g}" if "bn_end_mean" in row else
                     (f"1/t = {1 / row['t_end_mean']:.3g}" if "t_end_mean" in row else "-")])
    headers = ["arm", "val loss at step 0 (per seed)", "max abs diff to source", f"val loss at step {config.uptrain_steps}",
               "paired diff to softmax", f"seeds better / worse (beyond {TIE:g}) / all", "b end", "n end", "b n (or 1/t) end"]
    check = result["conversion_check"]
    return (
        "# Uptraining demo: a softmax decoder converted to SSA (matched init) and trained on beside a softmax control\n\n"
        f"Source: a {SOURCE_MODEL['num_hidden_layers']}-layer softmax Llama (width {SOURCE_MODEL['hidden_size']}) "
        f"pretrained for {config.source_steps} steps; validation loss {result['source_eval_loss']:.4f}. Converted with "
        f"`--init matched` (b = {result['conversion_init']['b']:g}, n = {result['conversion_init']['n']:g}, "
        f"{config.scoring_parametrization}); conversion check max |logit difference| {check['max_abs_diff']:.3g} "
        f"(tolerance {check['tolerance']:.3g}). Each arm trained {config.uptrain_steps} steps per seed "
        f"{config.seeds} (same data order and validation set per seed), learning rate {config.learning_rate:g}."
        "\n\n" + markdown_table(headers, rows) + "\n"
    )


def _plot(out, config: UptrainDemoConfig, runs: dict) -> Path:
    from ..reporting import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (name, by_seed) in enumerate(runs.items()):
        colour = colours[index % len(colours)]
        for number, (seed, run) in enumerate(by_seed.items()):
            label = name if number == 0 else None
            steps, losses = zip(*run["eval_losses"])
            axes[0].plot(steps, losses, color=colour, alpha=0.8, label=label, marker=".")
            for ax, key in ((axes[1], "b"), (axes[2], "n")):
                if run[key]:
                    s, v = zip(*run[key])
                    ax.plot(s, v, color=colour, alpha=0.8, label=label)
    axes[0].set_title("validation loss")
    axes[1].set_title("b (mean over layers and heads)")
    axes[2].set_title("n (mean over layers and heads)")
    for ax in axes:
        ax.set_xlabel("uptraining step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    fig.tight_layout()
    return out.save_figure("uptrain_demo.png", fig)


__all__ = ["UptrainDemoConfig", "run_uptrain_demo"]
