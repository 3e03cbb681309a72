"""What evaluation results record about the model: where it came from, its config, a hash of its weights."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ..regular_files import sha256_file

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def resolve_model(model: str) -> tuple[str, bool]:
    """(model, is_local_folder). A local folder must hold config.json; anything that looks like a path but does not
    exist raises FileNotFoundError; the rest is taken as a Hub id."""
    text = str(model)
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise FileNotFoundError(f"model {text!r} is a file; give the checkpoint folder (with config.json)")
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model folder {path} has no config.json (not a save_pretrained checkpoint)")
        return str(path.resolve()), True
    looks_like_path = text.startswith(("/", "./", "../", "~")) or text.count("/") > 1 or text.endswith("/")
    if looks_like_path:
        raise FileNotFoundError(f"model folder {text!r} does not exist")
    return text, False


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "spiece.model", "vocab.txt")


def check_tokenizer(model: str, is_local: bool, tokenizer: str | None) -> None:
    """A local checkpoint needs its tokenizer saved beside it (or an explicit `tokenizer`)."""
    if tokenizer is not None or not is_local:
        return
    if not any((Path(model) / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"model folder {model} has no tokenizer files ({', '.join(TOKENIZER_FILES[:2])}, ...): save it with "
            "tokenizer.save_pretrained(folder), or name one with --tokenizer"
        )


def is_causal_lm_config(config) -> bool:
    """Whether a model config's architecture is a causal LM head: transformers' causal-LM classes (GPT2LMHeadModel
    among them, whose name does not end in ForCausalLM), ssa-hf's, and remote-code ones named *ForCausalLM. A
    config without `architectures` passes (loading it with AutoModelForCausalLM decides)."""
    architectures = getattr(config, "architectures", None) or []
    if not architectures:
        return True
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from ..models.families import FAMILIES

    names = {n for v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() for n in ([v] if isinstance(v, str) else v)}
    names |= {spec.model_classes["causal_lm"].__name__ for spec in FAMILIES.values() if "causal_lm" in spec.model_classes}
    return any(a in names or a.endswith("ForCausalLM") for a in architectures)


def start_model_run(config) -> tuple[str, bool]:
    """How every evaluation run starts: the config validated, torch's CPU threads set (`config.threads`), the model
    resolved (`resolve_model`) and a local checkpoint's tokenizer checked; returns (model, is_local_folder)."""
    import torch

    config.validate()
    if config.threads:
        torch.set_num_threads(int(config.threads))
    model, is_local = resolve_model(config.model)
    check_tokenizer(model, is_local, config.tokenizer)
    return model, is_local


def default_name(model: str) -> str:
    """A display name: the folder name, or RUN (RUN-checkpoint-N) for the final/ (checkpoint-N/) folder of a
    training run laid out as RUN/final."""
    path = Path(str(model).rstrip("/"))
    name = path.name or str(model)
    parent = path.parent.name
    if parent and name in ("final", "best", "last"):
        return parent
    if parent and name.startswith("checkpoint"):
        return f"{parent}-{name}"
    return name


def weights_sha256(folder: str | Path) -> dict[str, Any]:
    """sha256 of every weight file of a checkpoint folder, and one combined hash over (name, hash) pairs in name
    order. Raises FileNotFoundError when the folder has no weight file."""
    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        raise FileNotFoundError(f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) in {folder}")
    per_file = {path.name: sha256_file(path, "weight file") for path in files}
    combined = hashlib.sha256("".join(f"{name}:{h}\n" for name, h in per_file.items()).encode()).hexdigest()
    return {"sha256": combined, "files": per_file}


def hub_snapshot(model: str, revision: str | None = None) -> Path | None:
    """The local cache folder of a Hub model, when it is cached (never downloads)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached or not a Hub id: no hash, said so in the results
        return None


def checkpoint_info(model: str, is_local: bool, loaded_model=None,
                    weight_problems: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Source, weight hash, config and (for ssa-hf models) scoring parameters of a checkpoint; `weight_problems`
    (what `check_loaded_weights` let by under --allow-weight-mismatch / --allow-nonfinite-weights) is recorded, so
    that `compare` can refuse or mark the result."""
    info: dict[str, Any] = {"source": model, "local": is_local}
    if weight_problems:
        info["weight_problems"] = weight_problems
    folder = Path(model) if is_local else hub_snapshot(model)
    if folder is not None:
        try:
            info["checkpoint_hash"] = weights_sha256(folder)
        except FileNotFoundError as error:
            info["checkpoint_hash"] = {"sha256": None, "reason": str(error)}
    else:
        info["checkpoint_hash"] = {"sha256": None, "reason": "Hub model not in the local cache"}
    if loaded_model is not None:
        config = loaded_model.config
        info["config"] = config.to_dict()
        info["model_class"] = type(loaded_model).__name__
        info["attention_scoring"] = getattr(config, "attention_scoring", "softmax")
        info["num_parameters"] = sum(p.numel() for p in loaded_model.parameters())
        if hasattr(loaded_model, "scoring_parameters"):
            info["scoring_parameters"] = loaded_model.scoring_parameters()
    return info
