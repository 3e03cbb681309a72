"""The configuration of a pretraining run (`PretrainConfig`), from a YAML file plus command-line overrides
(through `ssa_hf.options`, the one config loader). Light to import: no torch."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..data.config import TASKS, DataConfig
from ..data.tokenizer import TokenizerConfig
from ..options import (
    ConfigError,
    _field_help,
    add_dataclass_arguments,
    from_dict,
    load_yaml,
    options_given,
    set_dotted,
    to_dict,
)

SCHEDULERS = ("cosine", "linear", "constant")
FINITE_FIELDS = ("learning_rate", "min_learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
                 "max_grad_norm")
PRECISIONS = ("auto", "no", "bf16", "fp16")


@dataclass
class ModelConfig:
    """The model: a preset of configs/models (or a preset YAML path) with overrides.

    preset: preset name (tiny_llama, tiny_bert, decoder_114m, babyberta, ...) or a preset YAML file.
    attention_scoring: the scoring function (ssa, softmax, ...); null keeps the preset's.
    overrides: other config fields of the preset's family (vocab size and special-token ids come from the tokenizer).
    attn_implementation: transformers attention implementation (null: the model's default, ssa_auto).
    pretrained: an ssa-hf model folder to continue training (uptraining, e.g. the output of `ssa-hf convert --init matched`): weights, config and tokenizer come from it; preset, attention_scoring, overrides and tokenizer must then be left unset.
    """

    preset: str = "tiny_llama"
    attention_scoring: str | list[str] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    attn_implementation: str | None = None
    pretrained: str | None = None


@dataclass
class LoraSettings:
    """PEFT LoRA adapters (rank 0: off, every weight trains).

    rank: LoRA rank r (0: no LoRA).
    alpha: LoRA scaling alpha (the update is alpha / r x B A).
    dropout: dropout on the LoRA input.
    target_modules: module names that get adapters (null: the family's attention projections).
    train_scoring: keep the scoring parameters (b, n) trainable, as PEFT modules_to_save (saved and merged with the adapters).
    """

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | None = None
    train_scoring: bool = True


@dataclass
class PretrainConfig:
    """A pretraining run.

    task: causal (decoder, next-token prediction) or masked (encoder, masked-token prediction).
    output_dir: the run folder: checkpoints/, logs/, log_history.jsonl, and final/ (the Hub-ready model).
    run_name: name in the model card and the trackers (default: the output folder's name).
    seed: seeds model initialisation, data order, masking and dropout.
    max_steps: optimizer steps of the run (the learning-rate schedule spans them).
    stop_after_steps: end this invocation after this step with a checkpoint (resume later with --resume).
    per_device_train_batch_size: sequences per process per micro-batch.
    gradient_accumulation_steps: micro-batches per optimizer step.
    global_batch_size: if set, sequences per optimizer step over all processes; gradient_accumulation_steps is then derived (per_device x processes x accumulation).
    learning_rate: peak learning rate (AdamW).
    scoring_learning_rate: peak learning rate of the scoring parameters (SSA's b and n), their own AdamW group on the same schedule (null: learning_rate, in the no-decay group).
    scoring_warmup_steps: the first this many steps update only the scoring parameters (b, n); every other weight waits.
    min_learning_rate: cosine schedule: the learning rate it decays to (default 0.1 x learning_rate).
    lr_scheduler: cosine, linear (decay to 0) or constant, each after the warm-up.
    warmup_steps: linear warm-up from 0 to the peak.
    weight_decay: AdamW weight decay (not applied to biases, norms, embeddings and scoring parameters).
    adam_beta1: AdamW beta1.
    adam_beta2: AdamW beta2.
    adam_epsilon: AdamW epsilon.
    adam_fused: AdamW's fused kernel (one pass over each tensor; on a CPU an 85M-parameter float32 update takes
        51 ms instead of 544); false: torch's default for-each/for-loop update. Fixed on resume.
    max_grad_norm: clip the gradient norm to this (0: no clipping; the norm is still computed and checked).
    skip_nonfinite_steps: on a NaN/inf loss or gradient norm, skip that optimizer update (counted in the metrics as
        skipped_nonfinite_steps) instead of stopping the run with an error; an update that leaves a scoring parameter
        outside its range (b <= 0, n < 1, NaN, ...) has its scoring part undone instead (rejected_scoring_updates).
    mixed_precision: auto (bf16 where the GPU supports it, else no), no, bf16 or fp16.
    cpu: train on the CPU even if a GPU is present.
    cpu_threads: torch threads per process when training on the CPU (null: torch's default). Small models on a
        busy machine run much faster with 1 (no thread oversubscription).
    gradient_checkpointing: recompute activations in the backward pass (less memory, more time).
    torch_compile: torch.compile the model.
    logging_steps: log loss, learning rate, tokens/s and SSA parameters every this many steps.
    eval_steps: validation loss and perplexity every this many steps (0: only at the end).
    eval_at_start: validation loss before the first step too (logged at step 0; not on resume).
    per_device_eval_batch_size: validation sequences per process per batch.
    save_steps: write a checkpoint every this many steps (0: only at the end).
    save_total_limit: keep the last this many checkpoints (0: keep all).
    resume: continue from a checkpoint: latest (the newest intact one in output_dir/checkpoints), or a checkpoint folder.
    overwrite_output_dir: start afresh even if output_dir already has checkpoints (they are deleted; refused while
        another run holds the folder's lock).
    trust_remote_code: allow a pretrained tokenizer (tokenizer.pretrained) to run its own Python code.
    report_to: accelerate trackers (tensorboard, wandb, ...; none for no tracker).
    push_to_hub: after training, push the final model to this Hub repository id.
    hub_private: create the Hub repository as private.
    """

    task: str = "causal"
    output_dir: str = "outputs/pretrain"
    run_name: str | None = None
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    max_steps: int = 1000
    stop_after_steps: int | None = None
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    global_batch_size: int | None = None
    learning_rate: float = 3e-4
    scoring_learning_rate: float | None = None
    scoring_warmup_steps: int = 0
    min_learning_rate: float | None = None
    lr_scheduler: str = "cosine"
    warmup_steps: int = 0
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_epsilon: float = 1e-8
    adam_fused: bool = True
    max_grad_norm: float = 1.0
    skip_nonfinite_steps: bool = False
    mixed_precision: str = "auto"
    cpu: bool = False
    cpu_threads: int | None = None
    gradient_checkpointing: bool = False
    torch_compile: bool = False
    logging_steps: int = 10
    eval_steps: int = 0
    eval_at_start: bool = False
    per_device_eval_batch_size: int = 16
    save_steps: int = 0
    save_total_limit: int = 2
    resume: str | None = None
    overwrite_output_dir: bool = False
    trust_remote_code: bool = False
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    push_to_hub: str | None = None
    hub_private: bool = False

    def validate(self) -> None:
        """Raise ConfigError naming the key to fix."""
        if self.task not in TASKS:
            raise ConfigError(f"task: must be one of {TASKS}, got {self.task!r}")
        self.data.validate(self.task)
        self.tokenizer.validate()
        positive = ["max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps",
                    "per_device_eval_batch_size"]
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("eval_steps", "save_steps", "save_total_limit", "warmup_steps"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.stop_after_steps is not None and not 1 <= self.stop_after_steps <= self.max_steps:
            raise ConfigError(f"stop_after_steps: must be in 1..max_steps ({self.max_steps}), got {self.stop_after_steps}")
        if self.cpu_threads is not None and self.cpu_threads < 1:
            raise ConfigError(f"cpu_threads: must be >= 1 (or null), got {self.cpu_threads}")
        if self.global_batch_size is not None and self.global_batch_size < 1:
            raise ConfigError(f"global_batch_size: must be >= 1, got {self.global_batch_size}")
        if self.lr_scheduler not in SCHEDULERS:
            raise ConfigError(f"lr_scheduler: must be one of {SCHEDULERS}, got {self.lr_scheduler!r}")
        if self.mixed_precision not in PRECISIONS:
            raise ConfigError(f"mixed_precision: must be one of {PRECISIONS}, got {self.mixed_precision!r}")
        for name in FINITE_FIELDS:
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"{name}: must be a finite number, got {value}")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1):
            raise ConfigError(f"adam_beta1 and adam_beta2: must be in [0, 1), got {self.adam_beta1}, {self.adam_beta2}")
        if self.adam_epsilon <= 0:
            raise ConfigError(f"adam_epsilon: must be > 0, got {self.adam_epsilon}")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate: must be > 0, got {self.learning_rate}")
        if self.min_learning_rate is not None and not 0 <= self.min_learning_rate <= self.learning_rate:
            raise ConfigError(f"min_learning_rate: must be in [0, learning_rate], got {self.min_learning_rate}")
        if self.max_grad_norm < 0 or self.weight_decay < 0:
            raise ConfigError("max_grad_norm and weight_decay must be >= 0")
        self._validate_uptraining()
        if self.push_to_hub is not None and "/" not in self.push_to_hub:
            raise ConfigError(f"push_to_hub: give a repository id 'owner/name', got {self.push_to_hub!r}")

    def _validate_uptraining(self) -> None:
        """model.pretrained, the scoring learning rate and warm-up, LoRA."""
        if self.model.pretrained is not None and self.tokenizer.pretrained is not None:
            # (model.attention_scoring and model.overrides may stay: setup checks them against the folder's config,
            # so the config of the run that wrote the folder continues it unchanged)
            raise ConfigError("model.pretrained: the model folder gives the config and the tokenizer; drop "
                              "tokenizer.pretrained")
        if self.scoring_learning_rate is not None and not (math.isfinite(self.scoring_learning_rate)
                                                           and self.scoring_learning_rate > 0):
            raise ConfigError(f"scoring_learning_rate: must be a finite number > 0 (or null), got {self.scoring_learning_rate}")
        if not 0 <= self.scoring_warmup_steps < self.max_steps:
            raise ConfigError(f"scoring_warmup_steps: must be in 0..max_steps - 1 ({self.max_steps - 1}), got "
                              f"{self.scoring_warmup_steps}")
        lora = self.lora
        if lora.rank < 0:
            raise ConfigError(f"lora.rank: must be >= 0 (0: no LoRA), got {lora.rank}")
        if lora.rank and not (math.isfinite(lora.alpha) and lora.alpha > 0 and 0 <= lora.dropout < 1):
            raise ConfigError(f"lora.alpha must be > 0 and lora.dropout in [0, 1), got {lora.alpha}, {lora.dropout}")
        if lora.rank and self.torch_compile:
            raise ConfigError("lora.rank with torch_compile is not supported; set one of them off")

    def accumulation_steps(self, num_processes: int) -> int:
        """Micro-batches per optimizer step for this number of processes."""
        if self.global_batch_size is None:
            return self.gradient_accumulation_steps
        per_step = self.per_device_train_batch_size * num_processes
        if self.global_batch_size % per_step:
            raise ConfigError(
                f"global_batch_size={self.global_batch_size} is not a multiple of per_device_train_batch_size x "
                f"processes = {self.per_device_train_batch_size} x {num_processes}; change one of them"
            )
        return self.global_batch_size // per_step

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> PretrainConfig:
    """A `PretrainConfig` from a YAML file (or the defaults) with dotted-key overrides applied, validated."""
    data = load_yaml(path) if path is not None else {}
    from_file = dict((data.get("model") or {}).get("overrides") or {}) if isinstance(data.get("model"), dict) else {}
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    where = str(path) if path is not None else "config"
    try:
        config = from_dict(PretrainConfig, data)
        config.validate()
    except ValueError as error:  # ConfigError, and the checks of the data and tokenizer sections
        raise ConfigError(f"{where}: {error}") from None
    check_model_overrides(config, where, from_file, dict((overrides or {}).get("model.overrides") or {}))
    return config


def check_model_overrides(config: PretrainConfig, where: str, from_file: dict, from_command_line: dict) -> None:
    """model.overrides are merged key by key: the file's (with its `base:` files'), then `--model.overrides KEY=VALUE`
    (a key given there wins); `--model.overrides {}` drops the file's. A key the preset's family lacks (e.g. after
    `--model.preset tiny_gpt2` on a Llama config) is refused here, saying where it came from."""
    from ..presets import config_field_names, load_preset

    try:
        preset = load_preset(config.model.preset)
    except (FileNotFoundError, ValueError):
        return  # model_config_for reports a missing or bad preset with its own message
    known = config_field_names(preset.config_class)
    unknown = [k for k in config.model.overrides if k not in known]
    if not unknown:
        return
    origin = lambda key: ("--model.overrides" if key in from_command_line  # noqa: E731
                          else f"{where} (model.overrides, with its base: files)" if key in from_file else "the config")
    listed = "; ".join(f"{k} from {origin(k)}" for k in unknown)
    raise ConfigError(
        f"model.overrides has fields that {preset.config_class.__name__} (preset {preset.name!r}, family "
        f"{preset.family}) does not define: {listed}. The file's overrides and --model.overrides are merged key by "
        "key; to switch the model family from the command line drop the file's with `--model.overrides {}` "
        "(and give the new family's fields after it, e.g. `--model.overrides {} n_embd=64`)"
    )


NON_CONFIG_ARGS = ("config", "func", "command", "verbose")


def add_pretrain_arguments(parser: argparse.ArgumentParser) -> None:
    """`--config FILE` and one `--KEY VALUE` option per config key (`--data.block_size 128`, `--max_steps 50`)."""
    parser.add_argument("--config", help="YAML config (configs/pretrain/*.yaml); keys given as options override it")
    add_dataclass_arguments(parser, PretrainConfig, skip=("resume", "trust_remote_code"))
    parser.add_argument(
        "--trust_remote_code", "--trust-remote-code", dest="trust_remote_code", nargs="?", const="true",
        default=argparse.SUPPRESS, metavar="BOOL", help=_field_help(PretrainConfig, "trust_remote_code"),
    )
    parser.add_argument(
        "--resume", nargs="?", const="latest", default=argparse.SUPPRESS, metavar="CHECKPOINT",
        help="continue from the latest checkpoint in output_dir (or from the given checkpoint folder)",
    )


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    return load_config(args.config, options_given(args, exclude=NON_CONFIG_ARGS))
