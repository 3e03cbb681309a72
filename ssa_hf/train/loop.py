"""The pretraining loop (run it under `accelerate launch scripts/pretrain.py`, or in-process with `pretrain(config)`).

One step, as in nanoGPT: `gradient_accumulation_steps` micro-batches (gradients synchronised only on the last one),
gradient clipping, AdamW, the scheduler. accelerate provides the device, DDP/FSDP, mixed precision, the trackers
and the checkpoint state; the data position and the masking are this package's own (see `ssa_hf.data.corpus`), so
`--resume` continues exactly where the checkpoint was written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..data.corpus import (
    Corpus,
    MaskedCollator,
    batch_generator,
    build_corpus,
    collate_causal,
    iter_text_column,
    split_validation,
)
from ..data.tokenizer import load_pretrained_tokenizer, special_token_ids, train_bpe_tokenizer
from ..reporting import atomic_write_bytes, atomic_write_json, remove_stale_temporaries
from .checkpoint import (
    PATTERN,
    ResumePoint,
    checkpoints_dir,
    list_checkpoints,
    load_checkpoint,
    on_main,
    resolve_resume,
    save_checkpoint,
)
from .config import ConfigError, PretrainConfig
from .lock import RunLock
from .state import NonFiniteError

logger = logging.getLogger("ssa_hf.train")

PRESET_TASKS = {"causal": "causal_lm", "masked": "masked_lm"}
EVAL_SEED_KEY = 0x5EED  # masking of the validation set: seeded by (seed, this key, example index)


@dataclass
class PretrainResult:
    """What a run produced: folders and the figures of its metrics.json."""

    output_dir: str
    final_dir: str | None
    checkpoint: str | None
    steps: int
    metrics: dict[str, Any] = field(default_factory=dict)
    log_history: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------------


def obtain_tokenizer(config: PretrainConfig, train_texts):
    """The run's tokenizer: the pretrained one named in the config, or a byte-level BPE trained on the training split."""
    tok = config.tokenizer
    max_length = config.data.block_size if config.task == "causal" else config.data.max_length
    if tok.pretrained:
        tokenizer = load_pretrained_tokenizer(tok.pretrained, config.task, trust_remote_code=config.trust_remote_code)
        if tok.model_max_length:
            tokenizer.model_max_length = tok.model_max_length
        return tokenizer
    return train_bpe_tokenizer(
        iter_text_column(train_texts, tok.train_documents),
        config.task,
        vocab_size=tok.vocab_size,
        min_frequency=tok.min_frequency,
        add_prefix_space=tok.add_prefix_space,
        model_max_length=tok.model_max_length or max_length,
    )


def model_config_for(config: PretrainConfig, tokenizer=None):
    """The model config of the run: the preset with the overrides and (given a tokenizer) its vocabulary size and
    special-token ids; checked against the task and the sequence length."""
    from ..models.families import families_with_default_task
    from ..presets import family_of, load_model_config

    overrides = dict(config.model.overrides)
    if config.model.attention_scoring is not None:
        overrides["attention_scoring"] = config.model.attention_scoring
    if tokenizer is not None:
        ids = special_token_ids(tokenizer)
        if "vocab_size" in overrides and int(overrides["vocab_size"]) < ids["vocab_size"]:
            raise ConfigError(
                f"model.overrides.vocab_size={overrides['vocab_size']} is smaller than the tokenizer's vocabulary "
                f"({ids['vocab_size']}); remove it or raise it"
            )
        overrides.setdefault("vocab_size", ids.pop("vocab_size"))
        ids.pop("vocab_size", None)
        overrides.update(ids)
    model_config = load_model_config(config.model.preset, **overrides)
    family = family_of(model_config)
    families = families_with_default_task(PRESET_TASKS[config.task])  # the family table's, e.g. ssa_llama, ssa_gpt2
    if family not in families:
        raise ConfigError(
            f"model.preset {config.model.preset!r} is a {family} model; task {config.task!r} needs a "
            + " or ".join(f"{name} preset" for name in families)
        )
    positions = model_config.max_position_embeddings
    if config.task == "causal" and positions < config.data.block_size:
        raise ConfigError(
            f"data.block_size={config.data.block_size} exceeds the model's max_position_embeddings={positions}; "
            "lower the block size or set model.overrides max_position_embeddings"
        )
    if config.task == "masked":
        needed = config.data.max_length + model_config.pad_token_id + 1  # RoBERTa numbers positions from pad + 1
        if positions < needed:
            raise ConfigError(
                f"data.max_length={config.data.max_length} needs max_position_embeddings >= {needed} "
                f"(RoBERTa positions start at pad_token_id + 1); the model has {positions}"
            )
    return model_config


def build_model_for(config: PretrainConfig, tokenizer):
    """A freshly initialised model of the preset, with the tokenizer's vocabulary size and special-token ids."""
    from ..presets import build_model

    return build_model(
        model_config_for(config, tokenizer), PRESET_TASKS[config.task], attn_implementation=config.model.attn_implementation
    )


def parameter_groups(model, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups as nanoGPT: decay on matrices (>= 2-D: linear layers, embeddings), none on biases, norm
    weights and scoring parameters (1-D)."""
    decay, no_decay = [], []
    for parameter in model.parameters():
        if parameter.requires_grad:
            (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_scheduler(optimizer, config: PretrainConfig):
    from transformers import (
        get_constant_schedule_with_warmup,
        get_cosine_with_min_lr_schedule_with_warmup,
        get_linear_schedule_with_warmup,
    )

    if config.lr_scheduler == "cosine":
        min_lr = config.min_learning_rate if config.min_learning_rate is not None else 0.1 * config.learning_rate
        return get_cosine_with_min_lr_schedule_with_warmup(optimizer, config.warmup_steps, config.max_steps, min_lr=min_lr)
    if config.lr_scheduler == "linear":
        return get_linear_schedule_with_warmup(optimizer, config.warmup_steps, config.max_steps)
    return get_constant_schedule_with_warmup(optimizer, config.warmup_steps)


_LAYER = re.compile(r"\.(\d+)\.")


def _full(tensor: torch.Tensor) -> torch.Tensor:
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
                entry[f"{group}.{name}" if group else name] = _full(value).detach().double().cpu().tolist()
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


def prepare_validation(corpus: Corpus, tokenizer, config: PretrainConfig) -> list[tuple[list[int], list[int] | None]]:
    """Validation inputs with fixed masks (masked LM: seeded per example, the same at every evaluation)."""
    if config.task == "causal":
        return [(row, None) for row in corpus.validation]
    collator = MaskedCollator.from_config(tokenizer, config.data)  # the training corruption, fixed per sentence
    prepared = []
    for index, row in enumerate(corpus.validation):
        ids = torch.tensor([row])
        maskable = ~torch.isin(ids, collator.special)
        inputs, labels = collator.mask(ids, maskable, batch_generator(config.seed, EVAL_SEED_KEY, index))
        prepared.append((inputs[0].tolist(), labels[0].tolist()))
    return prepared


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    length = max(len(r) for r in rows)
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def token_nll(model, batch: dict[str, torch.Tensor], task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the negative log-likelihoods, number of predicted tokens) of a batch, in float32."""
    kwargs = {"input_ids": batch["input_ids"]}
    if "attention_mask" in batch:
        kwargs["attention_mask"] = batch["attention_mask"]
    logits = model(**kwargs).logits.float()
    labels = batch["labels"]
    if task == "causal":
        logits, labels = logits[:, :-1], labels[:, 1:]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum")
    return nll, (labels != -100).sum()


@torch.no_grad()
def evaluate(model, examples, task: str, pad_id: int, batch_size: int, accelerator) -> dict[str, float]:
    """Validation loss (mean token NLL) and perplexity over all processes (each takes every n-th example)."""
    was_training = model.training
    model.eval()
    mine = examples[accelerator.process_index :: accelerator.num_processes]
    total = torch.zeros(2, dtype=torch.float64, device=accelerator.device)
    for start in range(0, len(mine), batch_size):
        chunk = mine[start : start + batch_size]
        if task == "causal":
            batch = collate_causal([row for row, _ in chunk])
        else:
            inputs = _pad([row for row, _ in chunk], pad_id)
            batch = {
                "input_ids": inputs,
                "attention_mask": _pad([[1] * len(row) for row, _ in chunk], 0),
                "labels": _pad([labels for _, labels in chunk], -100),
            }
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        with accelerator.autocast():
            nll, count = token_nll(model, batch, task)
        total += torch.stack([nll.double(), count.double()])
    total = accelerator.reduce(total, reduction="sum")
    if was_training:
        model.train()
    loss = float(total[0] / total[1]) if total[1] > 0 else float("nan")
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf"), "tokens": int(total[1])}


def _flat_hparams(config: PretrainConfig) -> dict[str, Any]:
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
def _parameter_fingerprint(model) -> torch.Tensor:
    """Per-tensor (sum, position-weighted sum) in float64: equal across processes iff the weights are (in practice).
    Sharded parameters are gathered first (collective)."""
    rows = []
    for parameter in model.parameters():
        flat = _full(parameter).detach().double().flatten()
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device) / flat.numel()
        rows.append(torch.stack([flat.sum(), (flat * weights).sum()]))
    return torch.stack(rows).flatten()


def _mixed_precision(config: PretrainConfig, use_cpu: bool) -> str:
    if config.mixed_precision != "auto":
        return config.mixed_precision
    if not use_cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16"
    return "no"


def _make_accelerator(config: PretrainConfig, output_dir: Path):
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    has_gpu = torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())
    use_cpu = config.cpu or not has_gpu
    trackers = [t for t in config.report_to if t and t.lower() != "none"]
    accelerator = Accelerator(
        cpu=use_cpu,
        mixed_precision=_mixed_precision(config, use_cpu),
        log_with=trackers or None,
        project_config=ProjectConfiguration(project_dir=str(output_dir), logging_dir=str(output_dir / "logs")),
    )
    if accelerator.device.type == "cpu" and config.cpu_threads:
        torch.set_num_threads(config.cpu_threads)
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != accelerator.num_processes:
        raise RuntimeError(
            f"{launched} processes were launched (WORLD_SIZE) but accelerate sees {accelerator.num_processes}: the "
            "processes would train unsynchronised copies. On CPU launch with `torchrun --nproc_per_node N` or "
            "`accelerate launch --multi_gpu --num_processes N` (see docs/pretraining.md)"
        )
    return accelerator


# --------------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------------


def check_push_settings(config: PretrainConfig) -> None:
    """Fail before training, not after it, on push settings that cannot work: the repository id, a token, the
    network (HF_HUB_OFFLINE), hub_private without push_to_hub."""
    if config.push_to_hub is None:
        if config.hub_private:
            raise ConfigError("hub_private: true has no effect without push_to_hub REPO_ID; set push_to_hub or drop it")
        return
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(config.push_to_hub)
    except HFValidationError as error:
        raise ConfigError(f"push_to_hub: {error}") from None
    if constants.HF_HUB_OFFLINE:
        raise ConfigError("push_to_hub: HF_HUB_OFFLINE is set, so the push after training would fail; unset it, or "
                          "drop push_to_hub and push the final folder later with `ssa-hf push`")
    if get_token() is None:
        raise ConfigError("push_to_hub: no Hugging Face token, so the push after training would fail; run "
                          "`hf auth login` or set HF_TOKEN first")


def pretrain(config: PretrainConfig) -> PretrainResult:
    """Train a causal or masked LM as `config` says; returns the output folders and metrics. The output folder
    is locked for the run's lifetime: a second run into it fails with an error naming this one."""
    config.validate()
    model_config_for(config)  # fail before any data work on a model that cannot run this config
    output_dir = Path(config.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(f"output_dir {output_dir} is a file, not a folder; give a folder path")
    check_push_settings(config)
    accelerator = _make_accelerator(config, output_dir)
    lock = RunLock(output_dir, "pretraining run")
    on_main(accelerator, lambda: lock.acquire() and None)
    try:
        return _pretrain_locked(config, accelerator, output_dir)
    finally:
        lock.release()


def _start_point(config: PretrainConfig, output_dir: Path) -> ResumePoint:
    """(Main process, holding the lock.) The checkpoint to resume from; with --overwrite_output_dir, the old
    checkpoints removed. Temporary folders of a killed save are removed either way."""
    remove_stale_temporaries(checkpoints_dir(output_dir))
    point = resolve_resume(config.resume, output_dir)
    if point.checkpoint is None and any(PATTERN.match(p.name) for p in _children(checkpoints_dir(output_dir))):
        if not config.overwrite_output_dir:
            raise ConfigError(
                f"output_dir {output_dir} already has checkpoints; pass --resume to continue the run or "
                "--overwrite_output_dir to start afresh (its checkpoints are then deleted)"
            )
        shutil.rmtree(checkpoints_dir(output_dir), ignore_errors=True)
        (output_dir / "log_history.jsonl").unlink(missing_ok=True)
    return point


def _children(folder: Path) -> list[Path]:
    return list(folder.iterdir()) if folder.is_dir() else []


def _pretrain_locked(config: PretrainConfig, accelerator, output_dir: Path) -> PretrainResult:
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    run_name = config.run_name or output_dir.resolve().name
    main = accelerator.is_main_process
    start = on_main(accelerator, lambda: _start_point(config, output_dir))
    resume_from = start.checkpoint
    accumulation = config.accumulation_steps(accelerator.num_processes)

    # ---- tokenizer and data (the main process first: it trains the tokenizer and fills the datasets cache)
    set_seed(config.seed)
    with accelerator.main_process_first():
        texts = split_validation(config.data, config.seed)
        if resume_from is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(resume_from / "tokenizer"), trust_remote_code=False)
        elif main:
            tokenizer = obtain_tokenizer(config, texts[0])
            tokenizer.save_pretrained(str(output_dir / "tokenizer"))
        else:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(output_dir / "tokenizer"), trust_remote_code=False)
        corpus = build_corpus(config.data, tokenizer, config.task, texts=texts, seed=config.seed, show_progress=main)
    stream = corpus.batch_stream(
        config.per_device_train_batch_size, accelerator.process_index, accelerator.num_processes, config.seed, config.data
    )
    validation = prepare_validation(corpus, tokenizer, config)
    masked_collator = MaskedCollator.from_config(tokenizer, config.data) if config.task == "masked" else None

    # ---- model, optimizer, schedule
    set_seed(config.seed)
    model = build_model_for(config, tokenizer)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay),
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
    )
    scheduler = make_scheduler(optimizer, config)
    model, optimizer = accelerator.prepare(model, optimizer)
    prepared = model  # (before compilation: the checkpoint reads and restores its state)
    if config.torch_compile:
        model = torch.compile(model)
    unwrapped = accelerator.unwrap_model(model)
    parameters = sum(p.numel() for p in unwrapped.parameters())

    step, tokens_local, examples_seen, skipped_steps = 0, 0, 0, 0
    if resume_from is not None:
        trainer_state, data_state = load_checkpoint(accelerator, resume_from, prepared, optimizer, scheduler)
        step = int(trainer_state["step"])
        skipped_steps = int(trainer_state.get("skipped_nonfinite_steps", 0))
        tokens_local = int(trainer_state["tokens_seen_per_process"][accelerator.process_index])
        examples_seen = int(trainer_state["examples_seen_per_process"][accelerator.process_index])
        stream.load_state_dict(data_state)
        if main:
            _truncate_history(output_dir / "log_history.jsonl", step)
        logger.info("resumed from %s at step %d", resume_from, step)

    if main:
        output_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(output_dir / "training_config.yaml", config.to_yaml().encode())
    if any(t and t.lower() != "none" for t in config.report_to):
        accelerator.init_trackers(run_name, config=_flat_hparams(config))

    stop_at = config.stop_after_steps or config.max_steps
    history: list[dict[str, Any]] = []
    first_indices: list[int] | None = None
    progress = tqdm(total=config.max_steps, initial=step, disable=not accelerator.is_local_main_process,
                    desc=f"pretrain {run_name}", dynamic_ncols=True)
    # throughput is timed per logging window (ended by the reduce, which waits for the device), without the
    # time spent logging, evaluating and saving; the first window (warm-up, compilation) is left out of the total
    window_loss = torch.zeros((), device=accelerator.device)
    window_steps, window_counted, window_tokens = 0, 0, 0  # (counted: steps whose loss was finite)
    windows: list[tuple[float, float]] = []  # (global tokens, seconds) per window
    last_loss = float("nan")
    last_eval: dict[str, float] | None = None
    wall_start = time.perf_counter()
    model.train()

    def log(record: dict[str, Any]) -> None:
        record = {"step": step, **record}
        history.append(record)
        accelerator.log({k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float))}, step=step)
        if main:
            with open(output_dir / "log_history.jsonl", "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    window_start = time.perf_counter()
    while step < stop_at:
        step_loss = torch.zeros((), device=accelerator.device)
        for micro in range(accumulation):
            rows = stream.next_batch()
            if first_indices is None:
                first_indices = list(getattr(stream, "last_indices", []))
            if config.task == "causal":
                batch = collate_causal(rows)
            else:
                batch = masked_collator(rows, batch_generator(config.seed, accelerator.process_index, stream.batches_taken))
            tokens = int(batch["attention_mask"].sum()) if "attention_mask" in batch else batch["input_ids"].numel()
            window_tokens += tokens
            tokens_local += tokens
            examples_seen += len(rows)
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            sync = micro == accumulation - 1
            with contextlib.nullcontext() if sync else accelerator.no_sync(model):
                loss = model(**batch).loss
                accelerator.backward(loss / accumulation)
            step_loss += loss.detach().float() / accumulation
        # (max_grad_norm 0: an infinite bound computes the norm and leaves the gradients unchanged)
        grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
        grad_norm = _full(grad_norm) if grad_norm is not None else None
        skip = _nonfinite_step(accelerator, config, step + 1, step_loss, grad_norm)
        if skip:
            skipped_steps += 1
        else:
            optimizer.step()
            window_loss += step_loss
            window_counted += 1
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        window_steps += 1
        progress.update(1)

        is_last = step == stop_at
        if step % config.logging_steps == 0 or is_last:
            reduced = accelerator.reduce(
                torch.stack([window_loss.double() / max(window_counted, 1), step_loss.double(),
                             torch.tensor(float(window_tokens), dtype=torch.float64, device=accelerator.device)]),
                reduction="sum",
            ).tolist()
            seconds = time.perf_counter() - window_start
            windows.append((reduced[2], seconds))
            world = accelerator.num_processes
            last_loss = reduced[1] / world
            record = {
                "loss": reduced[0] / world,
                "step_loss": last_loss,
                "learning_rate": scheduler.get_last_lr()[0],
                "tokens_per_second": reduced[2] / max(seconds, 1e-9),
                "seconds_per_step": seconds / window_steps,
                "tokens_seen": sum(_gather_ints(accelerator, tokens_local)),
                "epoch": stream.epoch,
            }
            if grad_norm is not None:
                record["grad_norm"] = float(grad_norm)
            if config.skip_nonfinite_steps:
                record["skipped_nonfinite_steps"] = skipped_steps
            record.update(scoring_statistics(unwrapped))
            log(record)
            progress.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['learning_rate']:.2e}",
                                 tok_s=f"{record['tokens_per_second']:.0f}")
            window_loss.zero_()
            window_steps, window_counted, window_tokens = 0, 0, 0
        if validation and ((config.eval_steps and step % config.eval_steps == 0) or is_last):
            last_eval = evaluate(model, validation, config.task, tokenizer.pad_token_id,
                                 config.per_device_eval_batch_size, accelerator)
            log({"eval_loss": last_eval["loss"], "eval_perplexity": last_eval["perplexity"], "eval_tokens": last_eval["tokens"]})
        if (config.save_steps and step % config.save_steps == 0) or is_last:
            tokens_per_process = _gather_ints(accelerator, tokens_local)
            trainer_state = {
                "step": step,
                "max_steps": config.max_steps,
                "tokens_seen": sum(tokens_per_process),
                "tokens_seen_per_process": tokens_per_process,
                "num_processes": accelerator.num_processes,
                "examples_seen_per_process": _gather_ints(accelerator, examples_seen),
                "skipped_nonfinite_steps": skipped_steps,
                "run_name": run_name,
                "config": config.to_dict(),
            }
            save_checkpoint(accelerator, output_dir, step, trainer_state, stream.state_dict(), tokenizer,
                            config.save_total_limit, prepared, optimizer, scheduler)
        if window_steps == 0:
            window_start = time.perf_counter()  # the next window starts after logging, evaluating and saving
    progress.close()
    wall = time.perf_counter() - wall_start

    # ---- distributed bookkeeping: who took part, with what data, and whether the weights stayed identical
    fingerprints = accelerator.gather(_parameter_fingerprint(unwrapped).unsqueeze(0))
    processes = accelerator.gather(torch.tensor(
        [[accelerator.process_index, accelerator.num_processes, examples_seen]], device=accelerator.device
    ))
    width = config.per_device_train_batch_size
    first = (first_indices or [])[:width]
    firsts = accelerator.gather(torch.tensor([first + [-1] * (width - len(first))], device=accelerator.device))
    tokens_seen = sum(_gather_ints(accelerator, tokens_local))
    timed = windows[1:] if len(windows) > 1 else windows
    timed_seconds = sum(seconds for _, seconds in timed)
    distributed = {
        "num_processes": accelerator.num_processes,
        "processes": [
            {"rank": int(r[0]), "num_processes_seen": int(r[1]), "examples_seen": int(r[2]),
             "first_batch_indices": [int(i) for i in f.tolist()]}
            for r, f in zip(processes.tolist(), firsts)
        ],
        "parameter_fingerprint_max_abs_diff": float((fingerprints - fingerprints[0]).abs().max()),
    }

    metrics = {
        "run_name": run_name,
        "task": config.task,
        "model_preset": config.model.preset,
        "attention_scoring": unwrapped.config.attention_scoring,
        "parameters": parameters,
        "steps": step,
        "max_steps": config.max_steps,
        "tokens_seen": tokens_seen,
        "final_step_loss": last_loss,
        "final_train_loss": next((r["loss"] for r in reversed(history) if "loss" in r), None),
        "eval_loss": last_eval["loss"] if last_eval else None,
        "eval_perplexity": last_eval["perplexity"] if last_eval else None,
        "eval_tokens": last_eval["tokens"] if last_eval else None,
        "train_tokens_per_second": sum(t for t, _ in timed) / timed_seconds if timed_seconds > 0 else None,
        "wall_time_s": wall,
        "resumed_from": str(resume_from) if resume_from is not None else None,
        "resume_skipped_checkpoints": start.skipped,
        "skipped_nonfinite_steps": skipped_steps,
        "global_batch_size": config.per_device_train_batch_size * accumulation * accelerator.num_processes,
        "gradient_accumulation_steps": accumulation,
        "mixed_precision": accelerator.mixed_precision,
        "device": str(accelerator.device),
        "train_data": corpus.train_description,
        "train_examples": corpus.train_examples,
        "validation_data": corpus.validation_description,
        "validation_examples": len(validation),
        "scoring_parameters": scoring_values(unwrapped),
        "distributed": distributed,
        "versions": _versions(),
    }
    final_dir = None
    if main:
        atomic_write_json(output_dir / "metrics.json", metrics)
    if step == config.max_steps:
        final_dir = export_final(accelerator, unwrapped, tokenizer, config, metrics, output_dir)
    accelerator.wait_for_everyone()
    checkpoint = list_checkpoints(output_dir)[-1][1] if list_checkpoints(output_dir) else None
    result = PretrainResult(str(output_dir), str(final_dir) if final_dir else None, str(checkpoint) if checkpoint else None,
                            step, metrics, _read_history(output_dir / "log_history.jsonl") if main else history)
    if main and config.push_to_hub and final_dir is not None:
        push_final(final_dir, config)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # closes the trackers (and, when distributed, the process group): last
    return result


def _nonfinite_step(accelerator, config: PretrainConfig, step: int, loss: torch.Tensor, grad_norm) -> bool:
    """True if this step's loss (on any process) or gradient norm is NaN/inf and the user asked to skip such
    steps; raises NonFiniteError naming the step if not. With fp16 loss scaling, non-finite gradients are the
    scaler's business (it skips those updates itself), so only the loss is checked."""
    checks = [loss.detach().float().reshape(())]
    if grad_norm is not None and getattr(accelerator, "scaler", None) is None:
        checks.append(grad_norm.detach().float().reshape(()).to(loss.device))
    bad = (~torch.isfinite(torch.stack(checks))).float()
    bad = accelerator.reduce(bad, reduction="sum") if accelerator.num_processes > 1 else bad
    if not bool(bad.any()):
        return False
    if config.skip_nonfinite_steps:
        logger.warning("step %d: non-finite loss or gradient norm; update skipped (--skip_nonfinite_steps)", step)
        return True
    what = "the loss" if bad[0] > 0 else "the gradient norm"
    raise NonFiniteError(
        f"step {step}: {what} is not finite (loss {float(loss):.6g}"
        + (f", gradient norm {float(grad_norm):.6g}" if grad_norm is not None else "")
        + "); training stopped before the update, no checkpoint of this step is written. Lower learning_rate, "
        "check the data, or pass --skip_nonfinite_steps to skip such steps (counted in metrics.json)"
    )


def _gather_ints(accelerator, value: int) -> list[int]:
    return [int(v) for v in accelerator.gather(torch.tensor([value], device=accelerator.device)).tolist()]


def _truncate_history(path: Path, step: int) -> None:
    """Drop the records written after the checkpoint a run resumes from."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step]
    atomic_write_bytes(path, ("\n".join(kept) + "\n").encode() if kept else b"")


def _read_history(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _versions() -> dict[str, str]:
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
    return {k: v for k, v in info.items() if v is not None}


def _round(value):
    return round(value, 4) if isinstance(value, float) and math.isfinite(value) else value


def export_final(accelerator, model, tokenizer, config: PretrainConfig, metrics: dict[str, Any], output_dir: Path) -> Path:
    """Write `<output_dir>/final`: the Hub-ready checkpoint (weights + remote code, tokenizer, model card,
    training_config.yaml, metrics.json), atomically."""
    from ..hub import save_checkpoint_folder

    final = output_dir / "final"
    accelerator.wait_for_everyone()
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
                "training_config.yaml": config.to_yaml(),
                "metrics.json": json.dumps(_jsonable(metrics), indent=2) + "\n",
            },
            training=training_card_info(config, metrics),
            base_preset=config.model.preset,
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
