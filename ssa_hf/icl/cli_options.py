"""From `ssa-hf icl` options to an ICLConfig: a preset (or YAML file), then the options given on top."""

from __future__ import annotations

from .config import ICLConfig, config_from_dict, load_config, preset

# option -> path in the config
OVERRIDES = {
    "tasks": ("tasks",),
    "scoring": ("scoring",),
    "seeds": ("seeds",),
    "layers": ("model", "layers"),
    "heads": ("model", "heads"),
    "width": ("model", "width"),
    "attention_only": ("model", "attention_only"),
    "backbone": ("model", "backbone"),
    "steps": ("train", "steps"),
    "batch_size": ("train", "batch_size"),
    "lr": ("train", "lr"),
    "sigmas": ("eval", "sigmas"),
    "lengths": ("eval", "lengths"),
    "linear_sigmas": (("eval", "linear_sigmas_x"), ("eval", "linear_sigmas_ab")),
    "eval_batches": ("eval", "batches"),
    "linear_protocol": ("eval", "linear_protocol"),
    "device": ("device",),
    "threads": ("threads",),
    "workers": ("workers",),
}


def config_from_args(args) -> ICLConfig:
    base = load_config(args.config) if getattr(args, "config", None) else preset(args.preset)
    update: dict = {}
    for option, paths in OVERRIDES.items():
        value = getattr(args, option, None)
        if value is None:
            continue
        for path in paths if isinstance(paths[0], tuple) else (paths,):
            node = update
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
    return config_from_dict(update, base=base)
