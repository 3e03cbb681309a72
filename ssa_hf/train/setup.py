"""Everything a pretraining run sets up before its first step: the accelerator, the run folder (resume or start
afresh), the tokenizer, the data, the model, the optimizer and the schedule; gathered in a `Run`.

The main process goes first where work is shared (it trains the tokenizer and fills the datasets cache); the
others then read what it wrote.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.corpus import Corpus, MaskedCollator, build_corpus, iter_text_column, split_validation
from ..data.tokenizer import check_tokenizer_source, load_pretrained_tokenizer, special_token_ids, train_bpe_tokenizer
from ..reporting import atomic_write_bytes, remove_stale_temporaries
from .checkpoint import PATTERN, ResumePoint, checkpoints_dir, load_checkpoint, on_main, resolve_resume
from .config import ConfigError, PretrainConfig
from .metrics import flat_hparams, truncate_history
from .resume import check_resume
from .uptrain import (apply_lora, check_scoring_options, is_scoring, load_pretrained_model, pretrained_folder,
                      pretrained_model_config, prime_adam_state)
from .validation import prepare_validation

logger = logging.getLogger("ssa_hf.train")

PRESET_TASKS = {"causal": "causal_lm", "masked": "masked_lm"}


@dataclass
class Run:
    """A pretraining run in progress: what was set up, and the counters the loop advances (restored on resume)."""

    config: PretrainConfig
    accelerator: Any
    output_dir: Path
    run_name: str
    start: ResumePoint
    tokenizer: Any
    corpus: Corpus
    stream: Any  # the batch stream of this process (`Corpus.batch_stream`), its position saved in checkpoints
    validation: list
    masked_collator: MaskedCollator | None
    model: Any  # prepared (and maybe compiled): what the steps call
    prepared: Any  # prepared, not compiled: what checkpoints read and restore
    optimizer: Any
    scheduler: Any
    accumulation: int
    step: int = 0
    tokens_local: int = 0
    examples_seen: int = 0
    skipped_steps: int = 0
    rejected_scoring_updates: int = 0  # scoring updates undone under --skip_nonfinite_steps (loop.scoring_update_valid)
    open_window: dict[str, Any] | None = None  # the logging window a checkpoint was saved inside (loop.Report.resume)
    history: list[dict[str, Any]] = field(default_factory=list)
    first_indices: list[int] | None = None

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    @property
    def stop_at(self) -> int:
        return self.config.stop_after_steps or self.config.max_steps


def setup_run(config: PretrainConfig, accelerator, output_dir: Path, start: ResumePoint) -> Run:
    """(All processes, the lock held.) The run, ready for its next step: fresh, or restored from the checkpoint
    of `start` (`start_point`)."""
    from accelerate.utils import set_seed

    set_seed(config.seed)
    with accelerator.main_process_first():
        texts = split_validation(config.data, config.seed)
        tokenizer = run_tokenizer(config, accelerator, output_dir, start.checkpoint, texts[0])
        corpus = build_corpus(config.data, tokenizer, config.task, texts=texts, seed=config.seed,
                              show_progress=accelerator.is_main_process)
    stream = corpus.batch_stream(
        config.per_device_train_batch_size, accelerator.process_index, accelerator.num_processes, config.seed, config.data
    )
    validation = prepare_validation(corpus, tokenizer, config)
    masked_collator = MaskedCollator.from_config(tokenizer, config.data) if config.task == "masked" else None
    set_seed(config.seed)
    if config.lora.rank and accelerator.distributed_type.name.startswith("FSDP"):
        raise ConfigError("lora.rank with FSDP is not supported (the adapters and modules_to_save are not sharded "
                          "here); launch with DDP (configs/accelerate/cpu_2proc.yaml or multi_gpu.yaml) or drop lora")
    model, optimizer, scheduler = build_training(config, tokenizer)
    model, optimizer = accelerator.prepare(model, optimizer)
    if config.scoring_warmup_steps:
        prime_adam_state(optimizer)  # (the warm-up leaves most parameters without state: see its docstring)
    run = Run(config, accelerator, output_dir, config.run_name or output_dir.resolve().name, start, tokenizer, corpus,
              stream, validation, masked_collator, torch.compile(model) if config.torch_compile else model, model,
              optimizer, scheduler, config.accumulation_steps(accelerator.num_processes))
    if start.checkpoint is not None:
        restore(run, start.checkpoint)
    if run.main:
        output_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(output_dir / "training_config.yaml", config.to_yaml().encode())
    if any(t and t.lower() != "none" for t in config.report_to):
        accelerator.init_trackers(run.run_name, config=flat_hparams(config))
    return run


def run_tokenizer(config: PretrainConfig, accelerator, output_dir: Path, checkpoint: Path | None, train_texts):
    """The checkpoint's tokenizer when resuming; else the main process obtains one and saves it in the run
    folder, and the other processes read it from there."""
    from transformers import AutoTokenizer

    if checkpoint is not None:
        check_tokenizer_source(checkpoint / "tokenizer")  # (a FIFO there: one line, never a hang)
        return AutoTokenizer.from_pretrained(str(checkpoint / "tokenizer"), trust_remote_code=False)
    if accelerator.is_main_process:
        tokenizer = obtain_tokenizer(config, train_texts)
        tokenizer.save_pretrained(str(output_dir / "tokenizer"))
        return tokenizer
    return AutoTokenizer.from_pretrained(str(output_dir / "tokenizer"), trust_remote_code=False)


def build_training(config: PretrainConfig, tokenizer):
    """(model, AdamW optimizer, learning-rate schedule), not yet prepared by accelerate."""
    model = build_model_for(config, tokenizer)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.lora.rank:
        model = apply_lora(model, config)
    check_scoring_options(config, model)
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay, config.scoring_learning_rate),
        lr=config.learning_rate,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_epsilon,
        fused=config.adam_fused or None,
    )
    return model, optimizer, make_scheduler(optimizer, config)


def restore(run: Run, checkpoint: Path) -> None:
    """Weights, optimizer, schedule, RNG states, data position and counters from `checkpoint`."""
    trainer_state, data_state = load_checkpoint(run.accelerator, checkpoint, run.prepared, run.optimizer, run.scheduler)
    rank = run.accelerator.process_index
    run.step = int(trainer_state["step"])
    run.skipped_steps = int(trainer_state.get("skipped_nonfinite_steps", 0))
    run.rejected_scoring_updates = int(trainer_state.get("rejected_scoring_updates", 0))
    run.tokens_local = int(trainer_state["tokens_seen_per_process"][rank])
    run.examples_seen = int(trainer_state["examples_seen_per_process"][rank])
    run.open_window = trainer_state.get("logging_window")
    run.stream.load_state_dict(data_state)
    if run.main:
        truncate_history(run.output_dir / "log_history.jsonl", run.step)
    logger.info("resumed from %s at step %d", checkpoint, run.step)


def start_point(config: PretrainConfig, output_dir: Path) -> ResumePoint:
    """(Main process, holding the lock.) The checkpoint to resume from; with --overwrite_output_dir, the old
    checkpoints removed. Temporary folders of a killed save are removed either way."""
    remove_stale_temporaries(checkpoints_dir(output_dir))
    point = resolve_resume(config.resume, output_dir)
    if point.checkpoint is not None:
        point.step = check_resume(config, point.checkpoint)
    if point.checkpoint is None and any(PATTERN.match(p.name) for p in _children(checkpoints_dir(output_dir))):
        if not config.overwrite_output_dir:
            raise ConfigError(
                f"output_dir {output_dir} already has checkpoints; pass --resume to continue the run or "
                "--overwrite_output_dir to start afresh (its checkpoints are then deleted)"
            )
        shutil.rmtree(checkpoints_dir(output_dir), ignore_errors=True)
        (output_dir / "log_history.jsonl").unlink(missing_ok=True)
    return point


def refuse_foreign_run_folder(config: PretrainConfig, output_dir: Path) -> None:
    """Before the lock is taken (nothing written yet): --overwrite_output_dir deletes checkpoints only in a run folder
    ssa-hf wrote - every run writes training_config.yaml before its first checkpoint."""
    if (config.overwrite_output_dir and any(PATTERN.match(p.name) for p in _children(checkpoints_dir(output_dir)))
            and not (output_dir / "training_config.yaml").is_file()):
        raise ConfigError(f"output_dir {output_dir} has a checkpoints/ folder but is not a run folder ssa-hf wrote "
                          "(no training_config.yaml); --overwrite_output_dir deletes only such folders' checkpoints: "
                          "remove it yourself, or give another output_dir")


def _children(folder: Path) -> list[Path]:
    return list(folder.iterdir()) if folder.is_dir() else []


# --------------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------------


def obtain_tokenizer(config: PretrainConfig, train_texts):
    """The run's tokenizer: the pretrained one named in the config, or a byte-level BPE trained on the training split."""
    tok = config.tokenizer
    max_length = config.data.block_size if config.task == "causal" else config.data.max_length
    folder = pretrained_folder(config)
    if folder is not None:  # uptraining: the model folder's own tokenizer (never its code)
        return load_pretrained_tokenizer(str(folder), config.task, trust_remote_code=False)
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
    special-token ids; checked against the task and the sequence length. With `model.pretrained`: the folder's."""
    from ..presets import load_model_config

    if config.model.pretrained is not None:
        return _checked_model_config(config, _agreeing_with_folder(config, pretrained_model_config(config)), tokenizer)
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
    return _checked_model_config(config, load_model_config(config.model.preset, **overrides))


def _agreeing_with_folder(config: PretrainConfig, model_config):
    """The config of `model.pretrained`, once the run config's model.attention_scoring and model.overrides (where
    given) agree with it: the config of the run that wrote the folder continues it as it is, and nothing given is
    silently ignored."""
    given = dict(config.model.overrides)
    if config.model.attention_scoring is not None:
        given["attention_scoring"] = config.model.attention_scoring

    def same(a, b) -> bool:
        return (list(a) == list(b)) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b

    differ = [f"{key}={value!r} (the folder has {getattr(model_config, key, None)!r})" for key, value in given.items()
              if not same(value, getattr(model_config, key, None))]
    if differ:
        raise ConfigError(f"model.pretrained: the model folder gives the model config, and the run config differs: "
                          f"{'; '.join(differ)}. Drop these from model (e.g. --model.attention_scoring null), or to "
                          f"change the scoring function convert the folder first: ssa-hf convert SRC DST --init matched")
    return model_config


def _checked_model_config(config: PretrainConfig, model_config, tokenizer=None):
    """`model_config` checked against the task, the sequence length and (from a model folder) the tokenizer."""
    from ..models.families import families_with_default_task
    from ..presets import family_of

    where = "model.pretrained" if config.model.pretrained is not None else f"model.preset {config.model.preset!r}"
    if config.model.pretrained is not None and tokenizer is not None:
        if len(tokenizer) > model_config.vocab_size:
            raise ConfigError(f"model.pretrained: its tokenizer has {len(tokenizer)} tokens, more than the model's "
                              f"vocab_size {model_config.vocab_size}; the folder's tokenizer does not belong to it")
        if config.task == "masked" and tokenizer.pad_token_id != model_config.pad_token_id:
            raise ConfigError(f"model.pretrained: the tokenizer's pad id {tokenizer.pad_token_id} is not the model's "
                              f"pad_token_id {model_config.pad_token_id} (RoBERTa positions start after it)")
    family = family_of(model_config)
    families = families_with_default_task(PRESET_TASKS[config.task])  # the family table's, e.g. ssa_llama, ssa_gpt2
    if family not in families:
        raise ConfigError(
            f"{where} is a {family} model; task {config.task!r} needs a "
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
    """A freshly initialised model of the preset, with the tokenizer's vocabulary size and special-token ids; or,
    with `model.pretrained`, the folder's model with its weights."""
    from ..presets import build_model

    if config.model.pretrained is not None:
        return load_pretrained_model(config, model_config_for(config, tokenizer), PRESET_TASKS[config.task])
    return build_model(
        model_config_for(config, tokenizer), PRESET_TASKS[config.task], attn_implementation=config.model.attn_implementation
    )


def parameter_groups(model, weight_decay: float, scoring_learning_rate: float | None = None) -> list[dict[str, Any]]:
    """AdamW groups as nanoGPT: decay on matrices (>= 2-D: linear layers, embeddings), none on biases, norm
    weights and scoring parameters (1-D). With `scoring_learning_rate`, the scoring parameters (b, n, ...) form a
    third group (no decay) with that peak learning rate; the schedule scales every group alike."""
    decay, no_decay, scoring = [], [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if scoring_learning_rate is not None and is_scoring(name):
            scoring.append(parameter)
        else:
            (decay if parameter.dim() >= 2 else no_decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if scoring_learning_rate is not None:
        groups.append({"params": scoring, "weight_decay": 0.0, "lr": scoring_learning_rate})
    return groups


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


def _mixed_precision(config: PretrainConfig, use_cpu: bool) -> str:
    if config.mixed_precision == "fp16" and use_cpu:  # accelerate has no CPU fp16: it would train in float32
        raise ConfigError("mixed_precision: fp16 needs a GPU (float16 autocast with loss scaling); on the CPU it "
                          "would train in float32 while the run records fp16. Use bf16 (CPU autocast) or no")
    if config.mixed_precision != "auto":
        return config.mixed_precision
    if not use_cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16"
    return "no"


def make_accelerator(config: PretrainConfig, output_dir: Path):
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


def check_schedule(config: PretrainConfig) -> None:
    """Warn at the start of a run whose warm-up does not end before its last step (e.g. a paper config's 24,000
    warm-up steps kept under `--max_steps 300`): the learning rate would never reach its peak."""
    if config.warmup_steps >= config.max_steps > 0:
        peak = config.learning_rate * config.max_steps / config.warmup_steps
        logger.warning(
            "warmup_steps (%d) >= max_steps (%d): the learning rate rises linearly for the whole run and ends at "
            "%.3g, never reaching learning_rate %.3g; lower --warmup_steps (e.g. to %d, 10%% of the steps)",
            config.warmup_steps, config.max_steps, peak, config.learning_rate, max(1, config.max_steps // 10))


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
