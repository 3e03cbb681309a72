"""What a pretraining run reports: the scoring parameters' values and statistics, the hyperparameters for the
trackers, the distributed bookkeeping, metrics.json, the model card's training section, and the final folder
(`export_final`) with its optional push to the Hub."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch

from ..regular_files import check_regular_file, read_text
from ..reporting import atomic_write_bytes
from .checkpoint import on_main
from .config import PretrainConfig

_LAYER = re.compile(r"\.(\d+)\.")


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (FSDP2 DTensor) value gathered whole; every process must call this in the same order."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


@torch.no_grad()
def scoring_values(model) -> dict[str, dict[str, list[float]]]:
    """Every scoring parameter's current value per head, keyed by module path ({"model.layers.0.self_attn.scoring":
    {"b": [...], "n": [...]}}; a mixture of scoring heads gives "<function>.<name>" keys). Works on sharded models."""
    from ..models.scoring import ScoringModule

    out: dict[str, dict[str, list[float]]] = {}
    seen: list[str] = []
    for path, module in model.named_modules():
        if not isinstance(module, ScoringModule) or any(path.startswith(p + ".") for p in seen):
            continue  # (the groups inside a mixture are reported by the mixture)
        seen.append(path)
        values = module()
        nested = bool(values) and isinstance(next(iter(values.values())), dict)
        groups = values.items() if nested else [("", values)]
        entry = {}
        for group, params in groups:
            for name, value in params.items():
                entry[f"{group}.{name}" if group else name] = full_tensor(value).detach().double().cpu().tolist()
        if entry:
            out[path] = entry
    return out


def scoring_statistics(model) -> dict[str, float]:
    """Mean, min and max of every scoring parameter (b and n of SSA, t, s, alpha, ...) per layer, e.g.
    {"ssa/layer_00/n_mean": 1.49, ...}."""
    stats: dict[str, float] = {}
    for path, params in scoring_values(model).items():
        match = _LAYER.search(path + ".")
        layer = f"layer_{int(match.group(1)):02d}" if match else path
        for name, numbers in params.items():
            tensor = torch.tensor(numbers, dtype=torch.float64).reshape(-1)
            key = f"ssa/{layer}/{name.replace('.', '_')}"
            stats[f"{key}_mean"] = float(tensor.mean())
            stats[f"{key}_min"] = float(tensor.min())
            stats[f"{key}_max"] = float(tensor.max())
    return stats


def flat_hparams(config: PretrainConfig) -> dict[str, Any]:
    """The config as flat scalars (TensorBoard's hparams accept nothing else)."""
    flat: dict[str, Any] = {}

    def visit(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                visit(f"{prefix}/{key}" if prefix else str(key), item)
        elif isinstance(value, (int, float, str, bool)):
            flat[prefix] = value
        else:
            flat[prefix] = str(value)

    visit("", config.to_dict())
    return flat


@torch.no_grad()
def parameter_fingerprint(model) -> torch.Tensor:
    """Per-tensor (sum, position-weighted sum) in float64: equal across processes iff the weights are (in practice).
    Sharded parameters are gathered first (collective)."""
    rows = []
    for parameter in model.parameters():
        flat = full_tensor(parameter).detach().double().flatten()
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device) / flat.numel()
        rows.append(torch.stack([flat.sum(), (flat * weights).sum()]))
    return torch.stack(rows).flatten()


def distributed_summary(accelerator, model, examples_seen: int, first_indices: list[int] | None, width: int) -> dict:
    """Who took part, with what data, and whether the weights stayed identical on every process (collective)."""
    fingerprints = accelerator.gather(parameter_fingerprint(model).unsqueeze(0))
    processes = accelerator.gather(torch.tensor(
        [[accelerator.process_index, accelerator.num_processes, examples_seen]], device=accelerator.device
    ))
    first = (first_indices or [])[:width]
    firsts = accelerator.gather(torch.tensor([first + [-1] * (width - len(first))], device=accelerator.device))
    return {
        "num_processes": accelerator.num_processes,
        "processes": [
            {"rank": int(r[0]), "num_processes_seen": int(r[1]), "examples_seen": int(r[2]),
             "first_batch_indices": [int(i) for i in f.tolist()]}
            for r, f in zip(processes.tolist(), firsts)
        ],
        "parameter_fingerprint_max_abs_diff": float((fingerprints - fingerprints[0]).abs().max()),
    }


def gather_ints(accelerator, value: int) -> list[int]:
    """`value` of every process (collective)."""
    return [int(v) for v in accelerator.gather(torch.tensor([value], device=accelerator.device)).tolist()]


def gather_floats(accelerator, value: float) -> list[float]:
    """`value` of every process, in float64 (collective; a float32 sum comes back exactly)."""
    tensor = torch.tensor([value], dtype=torch.float64, device=accelerator.device)
    return [float(v) for v in accelerator.gather(tensor).tolist()]


def truncate_history(path: Path, step: int) -> None:
    """Drop the records written after the checkpoint a run resumes from."""
    kept = [line for line, record in _history_lines(path) if record.get("step", 0) <= step]
    if path.is_file():
        atomic_write_bytes(path, ("\n".join(kept) + "\n").encode() if kept else b"")


def _history_lines(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(line, record) of log_history.jsonl; a FIFO or a device there is refused (the run appends to the file: that
    would block), a line that is not a JSON object named."""
    check_regular_file(path, "the run's history")
    if not path.is_file():
        return []
    found = []
    for number, line in enumerate(read_text(path).splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError as error:
                record = error
            if not isinstance(record, dict):
                what = record if isinstance(record, ValueError) else f"a {type(record).__name__}"
                raise ValueError(f"{path}, line {number}: not a JSON object of the run's history ({what}); fix or "
                                 f"remove the line, or delete the file (the metrics of the steps before it are lost)")
            found.append((line, record))
    return found


def read_history(path: Path) -> list[dict[str, Any]]:
    return [record for _, record in _history_lines(path)]


def recorded_start_eval(path: Path) -> dict[str, Any] | None:
    """The validation before the first step (`eval_at_start`) as log_history.jsonl recorded it: a resumed run
    reports the one its first invocation ran."""
    for record in read_history(path):
        if record.get("step") == 0 and "eval_loss" in record:
            return {"loss": record["eval_loss"], "perplexity": record.get("eval_perplexity"),
                    "tokens": record.get("eval_tokens")}
    return None


def versions() -> dict[str, str]:
    import accelerate
    import datasets
    import tokenizers
    import transformers

    from .. import __version__

    return {"ssa_hf": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "datasets": datasets.__version__, "tokenizers": tokenizers.__version__}


def training_card_info(config: PretrainConfig, metrics: dict[str, Any]) -> dict[str, Any]:
    """The training section of the model card."""
    sources = [config.data.train] + ([config.data.validation] if config.data.validation else [])
    hub = [s.path for s in sources if not s.is_local]
    info: dict[str, Any] = {}
    if hub:
        info["datasets"] = hub
    info.update({
        "task": config.task,
        "data": config.data.train.describe() if not config.data.train.is_local else Path(config.data.train.describe()).name,
        "validation": metrics.get("validation_data"),
        "steps": metrics.get("steps"),
        "tokens": metrics.get("tokens_seen"),
        "global_batch_size": metrics.get("global_batch_size"),
        "sequence_length": config.data.block_size if config.task == "causal" else config.data.max_length,
        "learning_rate": config.learning_rate,
        "lr_scheduler": f"{config.lr_scheduler}, {config.warmup_steps} warm-up steps",
        "weight_decay": config.weight_decay,
        "max_grad_norm": config.max_grad_norm,
        "mixed_precision": metrics.get("mixed_precision"),
        "processes": metrics.get("distributed", {}).get("num_processes"),
        "final_train_loss": _round(metrics.get("final_train_loss")),
        "validation_loss": _round(metrics.get("eval_loss")),
        "validation_perplexity": _round(metrics.get("eval_perplexity")),
        "tokenizer": config.tokenizer.pretrained or f"byte-level BPE, {config.tokenizer.vocab_size} tokens, trained on the training split",
        "seed": config.seed,
        "trained_with": "ssa-hf pretrain (accelerate)",
    })
    source = metrics.get("uptrained_from")
    if source:  # uptraining: the folder it continued from, by name
        from .uptrain import describe_source

        info["uptrained_from"] = describe_source(source)
        info["trained_with"] = "ssa-hf pretrain (accelerate), continued from the weights of model.pretrained"
        info["validation_loss_at_start"] = _round(metrics.get("eval_loss_at_start"))
    if config.scoring_learning_rate is not None:
        info["scoring_learning_rate"] = config.scoring_learning_rate
    if config.scoring_warmup_steps:
        info["scoring_warmup_steps"] = config.scoring_warmup_steps
    if config.lora.rank:
        info["lora"] = (f"rank {config.lora.rank}, alpha {config.lora.alpha:g}, merged into the weights; scoring "
                        f"parameters {'trained' if config.lora.train_scoring else 'frozen'}")
    return {k: v for k, v in info.items() if v is not None}


# an absolute local path inside a string (a path itself, or a description such as "held-out documents of /a/b (20)")
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~$}])/[^\s,;()\[\]'\"]+")


def portable(value: Any, output_dir: Path) -> Any:
    """`value` (metrics, a config, card fields) without absolute local paths, for final/ (which `push` uploads): a
    path inside the run folder becomes relative to it (`checkpoints/checkpoint-40`), one under the data folder
    `${SSA_HF_DATA_DIR}/...`, any other its file or folder name (as convert records its source)."""
    from ..data.sources import DATA_DIR_ENV, default_data_dir

    roots = [(Path(output_dir).resolve(), None), (default_data_dir().resolve(), "${" + DATA_DIR_ENV + "}")]

    def rewrite(match: re.Match) -> str:
        path = Path(match.group(0))
        for root, prefix in roots:
            try:
                relative = path.resolve().relative_to(root)
            except ValueError:
                continue
            text = relative.as_posix()
            return text if prefix is None else f"{prefix}/{text}"
        return path.name or match.group(0)

    if isinstance(value, str):
        return _ABSOLUTE_PATH.sub(rewrite, value)
    if isinstance(value, dict):
        return {k: portable(v, output_dir) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v, output_dir) for v in value]
    return value


def _round(value):
    return round(value, 4) if isinstance(value, float) and math.isfinite(value) else value


def export_final(accelerator, model, tokenizer, config: PretrainConfig, metrics: dict[str, Any], output_dir: Path) -> Path:
    """Write `<output_dir>/final`: the Hub-ready checkpoint (weights + remote code, tokenizer, model card,
    training_config.yaml, metrics.json), atomically."""
    from ..hub import save_checkpoint_folder
    from .uptrain import merge_lora, published_config

    final = output_dir / "final"
    import yaml

    recorded = portable(yaml.safe_load(published_config(config).to_yaml()), output_dir)
    recorded["output_dir"] = Path(config.output_dir).name  # the run by name: final/ travels without its run folder
    accelerator.wait_for_everyone()
    model = merge_lora(model)  # LoRA: a plain model with the adapters merged (the run has ended)
    if accelerator.distributed_type.name.startswith("FSDP") or getattr(accelerator, "is_fsdp2", False):
        # sharded weights: gather the full state dict (collective) into an unsharded copy on the main process
        state = accelerator.get_state_dict(model)
        if accelerator.is_main_process:
            copy = type(model)(model.config)
            copy.load_state_dict(state)
            model = copy

    def write() -> None:
        save_checkpoint_folder(
            model,
            final,
            tokenizer=tokenizer,
            overwrite=True,
            extra_files={
                "training_config.yaml": yaml.safe_dump(recorded, sort_keys=False),
                "metrics.json": json.dumps(portable(_jsonable(metrics), output_dir), indent=2) + "\n",
            },
            training=portable(training_card_info(config, metrics), output_dir),
            base_preset=config.model.preset if config.model.pretrained is None else None,
            model_name=config.run_name or output_dir.resolve().name,
        )

    on_main(accelerator, write)  # (a failure, e.g. a full disk, stops every process, not only the main one)
    return final


def _jsonable(value):
    from ..reporting import _jsonable as convert

    return convert(value)


def push_final(final_dir: str | Path, config: PretrainConfig, dry_run: bool = False):
    """Upload the final folder to `config.push_to_hub` through `ssa_hf.hub.push_to_hub`."""
    from ..hub import push_to_hub

    return push_to_hub(final_dir, config.push_to_hub, private=config.hub_private, dry_run=dry_run)
