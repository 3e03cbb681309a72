"""Pretraining with accelerate: the config (`PretrainConfig`, YAML + command-line overrides), the training loop
(`pretrain`), atomic checkpoints with exact resumption, and perplexity on random fixed-length windows."""

from .checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .config import ModelConfig, PretrainConfig, add_pretrain_arguments, config_from_args, load_config
from .loop import PretrainResult, evaluate, pretrain, push_final, scoring_statistics
from .options import ConfigError

__all__ = [
    "ConfigError",
    "ModelConfig",
    "PretrainConfig",
    "PretrainResult",
    "add_pretrain_arguments",
    "config_from_args",
    "evaluate",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_config",
    "pretrain",
    "push_final",
    "save_checkpoint",
    "scoring_statistics",
]
