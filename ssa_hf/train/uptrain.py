"""Continuing to train a model folder (uptraining) and the parameter choices that go with it: the folder's config,
weights and tokenizer (`model.pretrained`), the record of where the run started, PEFT LoRA adapters with the
scoring parameters trainable, and the scoring parameters' own learning rate and warm-up (see docs/uptraining.md).

The folder is not trusted: its weights are read from safetensors only, its config by the ssa-hf config class, its
tokenizer without remote code; nothing in it is executed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from ..regular_files import read_json
from .config import ConfigError, PretrainConfig

logger = logging.getLogger("ssa_hf.train")

# the attention projections of each family (PEFT target_modules; suffixes of module names)
LORA_TARGETS = {
    "ssa_llama": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "ssa_gpt2": ["attn.c_attn", "attn.c_proj"],
    "ssa_bert": ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"],
}
SCORING_MARK = ".scoring."
# files of which at least one makes a tokenizer AutoTokenizer can load without code
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model",
                    "spiece.model", "sentencepiece.bpe.model")  # every scoring parameter's name has it (e.g. model.layers.0.self_attn.scoring.params.b.raw)


def pretrained_folder(config: PretrainConfig) -> Path | None:
    """The folder of `model.pretrained`, checked to be a model folder (None when the run starts from a preset)."""
    if config.model.pretrained is None:
        return None
    folder = Path(config.model.pretrained).expanduser()
    if not (folder / "config.json").is_file():
        raise ConfigError(f"model.pretrained: {folder} is not a model folder (no config.json); give a folder written "
                          "by ssa-hf (ssa-hf convert, the final/ folder of a run)")
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise ConfigError(f"model.pretrained: {folder} has no tokenizer files ({', '.join(_TOKENIZER_FILES[:3])}, ...); "
                          "save the tokenizer into the folder (tokenizer.save_pretrained) or convert a checkpoint "
                          "that has one (ssa-hf convert copies it)")
    if not any(folder.glob("*.safetensors")):
        raise ConfigError(f"model.pretrained: {folder} has no .safetensors weights (pickled weights are not loaded); "
                          "save the model with save_pretrained(safe_serialization=True)")
    return folder


def pretrained_model_config(config: PretrainConfig):
    """The config stored in `model.pretrained` (an ssa-hf family; stock checkpoints are converted first)."""
    from ..hub.folders import load_ssa_config

    folder = pretrained_folder(config)
    try:
        return load_ssa_config(folder)
    except ValueError as error:
        raise ConfigError(f"model.pretrained: {error}") from None


def load_pretrained_model(config: PretrainConfig, model_config, task: str):
    """The model of `model.pretrained` with its weights (float32; safetensors only, no remote code)."""
    from ..presets import model_class

    kwargs = {"attn_implementation": config.model.attn_implementation} if config.model.attn_implementation else {}
    cls = model_class(model_config, task)
    model, info = cls.from_pretrained(pretrained_folder(config), config=model_config, dtype="float32",
                                      use_safetensors=True, output_loading_info=True, **kwargs)
    missing = [k for k in info.get("missing_keys", []) if k]
    if missing:
        raise ConfigError(f"model.pretrained: {config.model.pretrained} lacks weights of {cls.__name__} "
                          f"({missing[:6]}); it would train from random values there. Give a complete folder")
    return model


def source_record(config: PretrainConfig) -> dict[str, Any] | None:
    """Where an uptraining run started, by name (never a local path): the folder's name and, for a converted
    folder (its ssa_conversion.json), the checkpoint it was converted from and how its scoring parameters started."""
    folder = pretrained_folder(config)
    if folder is None:
        return None
    record: dict[str, Any] = {"name": folder.resolve().name}
    conversion = folder / "ssa_conversion.json"
    if conversion.is_file():
        try:
            data = read_json(conversion)
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict):
            record["converted_from"] = str(data.get("source", "?"))
            init = data.get("init") if isinstance(data.get("init"), dict) else {"method": "config"}
            record["init"] = {k: init[k] for k in ("method", "b", "n", "c") if k in init}
    return record


def published_config(config: PretrainConfig) -> PretrainConfig:
    """The config as the final folder publishes it: `model.pretrained` by the folder's name, not its local path."""
    import copy

    if config.model.pretrained is None:
        return config
    published = copy.deepcopy(config)
    published.model.pretrained = Path(config.model.pretrained).resolve().name
    return published


def describe_source(record: dict[str, Any]) -> str:
    text = record["name"]
    if "converted_from" in record:
        init = record.get("init", {})
        how = (f"softmax-matched init, b={init['b']:g}, n={init['n']:g}" if init.get("method") == "matched"
               else "scoring parameters from the config")
        text += f" (converted from {record['converted_from']}, {how})"
    return text


# ------------------------------------------------------------------------------------------ scoring parameters


def is_scoring(name: str) -> bool:
    return SCORING_MARK in f".{name}"


def scoring_parameters(model) -> list:
    """The trainable scoring parameters (b, n, ...) of a model (PEFT-wrapped or not)."""
    return [p for name, p in model.named_parameters() if p.requires_grad and is_scoring(name)]


def check_scoring_options(config: PretrainConfig, model) -> None:
    """scoring_learning_rate and scoring_warmup_steps need trainable scoring parameters: without them the first would
    change nothing and the second would train nothing."""
    if (config.scoring_learning_rate is not None or config.scoring_warmup_steps) and not scoring_parameters(model):
        raise ConfigError(
            f"scoring_learning_rate / scoring_warmup_steps are set but the model (attention_scoring="
            f"{model.config.attention_scoring!r}) has no trainable scoring parameters; drop them (a softmax control "
            "run has no b and n)"
        )


def hold_all_but_scoring(model, step: int, config: PretrainConfig) -> None:
    """During the first `scoring_warmup_steps` steps, drop every gradient but the scoring parameters' (AdamW skips
    a parameter without a gradient: no update, no weight decay, no moment change)."""
    if step < config.scoring_warmup_steps:
        for name, parameter in model.named_parameters():
            if parameter.grad is not None and not is_scoring(name):
                parameter.grad = None


def prime_adam_state(optimizer) -> None:
    """Give every parameter of an AdamW optimizer the state AdamW would create on its first update (step 0, zero
    moments), so that a checkpoint written while some parameters have not been updated yet (the scoring warm-up)
    holds the state of every parameter: a resumed run then continues exactly (without it, restoring a partial state
    initialises the missing entries with a step of its own, and their first real update would differ)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    for group in inner.param_groups:
        for parameter in group["params"]:
            if parameter in inner.state and inner.state[parameter]:
                continue
            # the step tensor AdamW itself would create: on the parameter's device in float32 for the fused kernel
            step = (torch.zeros((), dtype=torch.float32, device=parameter.device)
                    if group.get("fused") or group.get("capturable") else torch.tensor(0.0, dtype=torch.get_default_dtype()))
            state = {"step": step,
                     "exp_avg": torch.zeros_like(parameter, memory_format=torch.preserve_format),
                     "exp_avg_sq": torch.zeros_like(parameter, memory_format=torch.preserve_format)}
            if group.get("amsgrad"):
                state["max_exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
            inner.state[parameter] = state


# ------------------------------------------------------------------------------------------------------ LoRA


def apply_lora(model, config: PretrainConfig):
    """The model with PEFT LoRA adapters on its attention projections (or `lora.target_modules`); with
    `lora.train_scoring`, the scoring parameter modules (`scoring.params.b`, `scoring.params.n`, ...) are PEFT
    `modules_to_save`: trained in full, saved with the adapters and merged back by `merge_lora`."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("lora.rank needs the `peft` package: pip install peft") from None
    from ..presets import family_of

    lora = config.lora
    targets = lora.target_modules or LORA_TARGETS[family_of(model.config)]
    names = sorted({name.split(".params.")[-1].split(".")[0] for name, _ in model.named_parameters() if is_scoring(name)})
    to_save = [f"scoring.params.{name}" for name in names] if lora.train_scoring else None
    if lora.train_scoring and not names:
        raise ConfigError(f"lora.train_scoring: the model (attention_scoring={model.config.attention_scoring!r}) has no "
                          "trainable scoring parameters; set lora.train_scoring false")
    peft_config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                             modules_to_save=to_save)
    wrapped = get_peft_model(model, peft_config)
    logger.info("LoRA r=%d on %s; scoring parameters %s", lora.rank, targets, "trained" if to_save else "frozen")
    return wrapped


def is_peft(model) -> bool:
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def merge_lora(model):
    """A plain ssa-hf model: the adapters merged into the weights, the trained scoring parameters in place."""
    return model.merge_and_unload() if is_peft(model) else model


__all__ = ["LORA_TARGETS", "apply_lora", "check_scoring_options", "describe_source", "hold_all_but_scoring", "is_peft",
           "is_scoring", "load_pretrained_model", "merge_lora", "pretrained_folder", "pretrained_model_config", "prime_adam_state", "published_config",
           "scoring_parameters", "source_record"]
