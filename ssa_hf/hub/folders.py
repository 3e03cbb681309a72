"""Reading ssa-hf checkpoint folders without running their code: config.json, the family and task of a config,
and the scoring parameters stored in the safetensors files (without loading the other weights)."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import torch

from ..models.families import FAMILIES, FamilySpec, family_of_config, task_of_architecture
from ..models.scoring import ScoringModule
from ..reporting import markdown_table


def family_spec(config) -> FamilySpec:
    """The family of an ssa-hf config, or a ValueError saying how to get one."""
    spec = family_of_config(config)
    if spec is None:
        raise ValueError(f"not an ssa-hf config: {type(config).__name__} (model_type "
                         f"{getattr(config, 'model_type', None)!r}); convert the checkpoint with `ssa-hf convert`")
    return spec


def task_of(config, model=None) -> str:
    """The head of a model (by its class) or of a config (by its `architectures`, else its family's default)."""
    if model is not None:
        return task_of_architecture(type(model).__name__)
    architectures = getattr(config, "architectures", None) or []
    if architectures:
        return task_of_architecture(architectures[0])
    return family_spec(config).default_task


def read_config_json(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json; expected a checkpoint folder written by save_pretrained")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON: {error}") from None


PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


class PickledWeightsError(ValueError):
    """A model folder's weights exist only as pickle files, which are not opened unless the user asks."""


def safe_weights_kwargs(model: str | os.PathLike, trust_remote_code: bool = False, flag: str | None = "--trust-remote-code") -> dict:
    """What every loader of a model passes to `from_pretrained`: `use_safetensors=True` unless the user asked
    (`trust_remote_code`), so that a pickle file (pytorch_model.bin: unpickling can run code) is never opened. A
    local folder holding only pickled weights, or a damaged safetensors file, gets one line instead of a traceback."""
    folder = Path(model)
    check_weight_files(folder)
    if trust_remote_code:
        return {}
    if folder.is_dir() and not any(folder.glob("*.safetensors")):
        pickled = sorted(p.name for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern))
        if pickled:
            ask = f", or pass {flag} if you trust this folder's files" if flag else ""
            raise PickledWeightsError(
                f"{folder}: safetensors expected, found only {', '.join(pickled[:3])} (pickle files, which can run code "
                f"when loaded; ssa-hf does not open them): save the model again with save_pretrained (safetensors) "
                f"where you trust it{ask}")
    return {"use_safetensors": True}


SAFETENSORS_INDEX = "model.safetensors.index.json"


def check_weight_index(folder: Path) -> None:
    """Refuse a safetensors index (model.safetensors.index.json) whose weight map names a shard that is not a
    `.safetensors` file of this folder: transformers would open a `.bin` shard it names with torch's (restricted)
    unpickler despite `use_safetensors=True`, and a path with a folder in it reads outside the checkpoint."""
    path = folder / SAFETENSORS_INDEX
    if not folder.is_dir() or not path.is_file():
        return
    try:
        weight_map = json.loads(path.read_text(encoding="utf-8")).get("weight_map")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
        raise ValueError(f"{path}: not a valid safetensors index ({error}); copy or download it again") from None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{path}: has no 'weight_map' of tensor names to shard files; copy or download it again")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard.endswith(".safetensors") or Path(shard).name != shard:
            raise PickledWeightsError(
                f"{path}: tensor {tensor!r} is mapped to {shard!r}, which is not a .safetensors file of this folder "
                f"(a pickle shard, or a path leading elsewhere, is never opened): fix the index or save the model "
                f"again with save_pretrained")


def check_weight_files(folder: Path) -> None:
    """Refuse a local folder whose safetensors files do not open (a truncated download or copy, a file that is not
    safetensors), or whose safetensors index names anything but this folder's safetensors shards: the header and
    the extent it declares are checked, not the values."""
    from safetensors import SafetensorError, safe_open

    check_weight_index(folder)
    for path in weight_files(folder) if folder.is_dir() else []:
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise ValueError(f"{path}: not a readable safetensors file ({error}); it is damaged or truncated: "
                             "copy or download it again") from None


def refuse_stock_class_for_scoring_weights(model: str | os.PathLike, trust_remote_code: bool = False) -> None:
    """Refuse a local folder whose weights hold scoring parameters (an ssa-hf checkpoint) but whose config.json names
    a stock transformers model type: loading it runs transformers' own class, i.e. softmax attention with the
    scoring tensors dropped as unexpected keys. (Remote code the user trusts may hold such tensors itself.)"""
    from safetensors import SafetensorError, safe_open
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    folder = Path(model)
    if not (folder / "config.json").is_file():
        return
    raw = read_config_json(folder)
    model_type = raw.get("model_type")
    if model_type in FAMILIES or model_type not in CONFIG_MAPPING_NAMES or (trust_remote_code and raw.get("auto_map")):
        return
    scoring = []
    for path in weight_files(folder):
        try:
            with safe_open(str(path), framework="pt") as weights:
                scoring += [key for key in weights.keys() if ".scoring." in f".{key}"]
        except (SafetensorError, OSError):
            return  # a damaged file: the load reports it
    if scoring:
        families = ", ".join(repr(name) for name in FAMILIES)
        raise ValueError(
            f"{folder}: its weights hold SSA scoring parameters ({len(scoring)} tensors, e.g. {scoring[0]}) but its "
            f"config.json says model_type {model_type!r}, which loads transformers' stock class: softmax attention, "
            f"the scoring parameters dropped. Restore the config.json saved with these weights (model_type one of "
            f"{families}).")


class WeightsError(ValueError):
    """A model's loaded weights are not what its folder says: tensors missing or left over (random values in their
    place, or a config of another model), or non-finite values."""


#: the options that let an evaluation run on such weights anyway (the same names in every command)
ALLOW_MISMATCH_FLAG = "--allow-weight-mismatch"
ALLOW_NONFINITE_FLAG = "--allow-nonfinite-weights"


def _listed(keys: list[str], limit: int = 4) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")


def nonfinite_tensors(model) -> list[str]:
    """The names of the model's floating-point parameters and buffers holding NaN or +-inf (tied tensors once)."""
    import itertools

    found, seen = [], set()
    for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
        if id(tensor) in seen or not tensor.is_floating_point() or tensor.device.type == "meta":
            continue
        seen.add(id(tensor))
        if not bool(torch.isfinite(tensor.detach()).all()):
            found.append(name)
    return found


def check_loaded_weights(model, source, loading_info: dict | None = None, *, allow_mismatch: bool = False,
                         allow_nonfinite: bool = False, offer_flags: bool = True) -> dict[str, list[str]]:
    """The one check every command runs on a model it has just loaded, before it reports on it: the tensors
    transformers found missing (filled with random values) or unexpected (left out) in the weight files
    (`from_pretrained(..., output_loading_info=True)`), and non-finite weights. Raises a one-line `WeightsError`
    naming the tensor and the option that allows it (`offer_flags`); with that option, returns the problems
    (recorded beside the results) instead. Returns {} for weights that are what they say."""
    problems: dict[str, list[str]] = {}
    info = loading_info or {}
    missing = sorted(str(k) for k in info.get("missing_keys", ()) or ())
    unexpected = sorted(str(k) for k in info.get("unexpected_keys", ()) or ())
    mismatched = sorted(str(k[0] if isinstance(k, (tuple, list)) else k) for k in info.get("mismatched_keys", ()) or ())
    for kind, keys in (("missing", missing), ("unexpected", unexpected), ("mismatched", mismatched)):
        if keys:
            problems[kind] = keys
    if problems and not allow_mismatch:
        config = getattr(model, "config", None)
        model_type = getattr(config, "model_type", None)
        expected = len(model.state_dict())
        found = "; ".join(f"{kind} {_listed(keys)}" for kind, keys in problems.items())
        if missing and len(missing) >= expected / 2:
            why = (f"config.json (model_type {model_type!r}, {type(model).__name__}) does not describe these weights "
                   f"({len(missing)} of {expected} tensors missing): it belongs to another model. Restore the "
                   f"config.json saved with these weights")
        else:
            why = (f"its weight files do not match its config.json ({type(model).__name__}): {found}; missing "
                   f"tensors would be random values. Give the complete checkpoint (save_pretrained of the model)")
        option = f", or pass {ALLOW_MISMATCH_FLAG} to evaluate it anyway" if offer_flags else ""
        raise WeightsError(f"{source}: {why}{option}")
    bad = nonfinite_tensors(model)
    if bad:
        problems["nonfinite"] = bad
        if not allow_nonfinite:
            more = f" and {len(bad) - 1} more tensors" if len(bad) > 1 else ""
            raise WeightsError(
                f"{source}: weight {bad[0]}{more} holds NaN or infinite values (as loaded, dtype "
                f"{next(model.parameters()).dtype}); every result of this model would be meaningless: use an earlier "
                f"checkpoint" + (f", or pass {ALLOW_NONFINITE_FLAG} to evaluate it anyway" if offer_flags else ""))
    return problems


def load_checked(auto_class, source, settings, **kwargs):
    """(`auto_class.from_pretrained(source, **kwargs)`, the problems `check_loaded_weights` let by or None), with
    the options of `settings` (its `allow_weight_mismatch`, `allow_nonfinite_weights`)."""
    model, loading_info = auto_class.from_pretrained(source, output_loading_info=True, **kwargs)
    problems = check_loaded_weights(model, source, loading_info,
                                    allow_mismatch=getattr(settings, "allow_weight_mismatch", False),
                                    allow_nonfinite=getattr(settings, "allow_nonfinite_weights", False))
    return model, problems or None


def load_ssa_config(folder: str | os.PathLike):
    """The config (SSALlamaConfig, SSABertConfig, ...) of a checkpoint folder (no remote code is run)."""
    folder = Path(folder)
    raw = read_config_json(folder)
    model_type = raw.get("model_type")
    if model_type not in FAMILIES:
        raise ValueError(f"{folder}: model_type {model_type!r} is not an ssa-hf model ({list(FAMILIES)}); "
                         f"convert it first with `ssa-hf convert {folder} DST`")
    return FAMILIES[model_type].config_class.from_pretrained(folder)


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors"))


def read_scoring_parameters(folder: str | os.PathLike, config=None) -> dict[str, dict[str, list[float]]] | None:
    """The scoring parameters stored in a checkpoint folder, as `model.scoring_parameters()` returns them, read
    from the safetensors files without loading the other weights. None when the folder has no safetensors."""
    from safetensors import safe_open

    folder = Path(folder)
    files = weight_files(folder)
    if not files:
        return None
    config = config if config is not None else load_ssa_config(folder)
    cls = family_spec(config).model_class(task_of(config))
    with torch.device("meta"):
        model = cls(copy.deepcopy(config))
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                if ".scoring." in f".{key}":
                    tensors[key] = handle.get_tensor(key)
    for name, module in model.named_modules():
        if isinstance(module, ScoringModule) and not any(isinstance(m, ScoringModule) for m in _parents(model, name)):
            own = {k[len(name) + 1:]: v for k, v in tensors.items() if k.startswith(name + ".")}
            module.to_empty(device="cpu")
            try:
                module.load_state_dict(own, strict=True)
            except RuntimeError as error:
                raise ValueError(f"{folder}: the scoring parameters of {name} do not match the config: {error}") from None
    return model.scoring_parameters()


def _parents(model, name: str):
    parts = name.split(".")
    return [model.get_submodule(".".join(parts[:i])) for i in range(1, len(parts))]


def _layer_of(module_name: str) -> str:
    match = re.search(r"\.(\d+)\.", f".{module_name}.")
    return match.group(1) if match else module_name


def format_value(value: float) -> str:
    return f"{value:.4g}"


def scoring_parameter_table(values: dict[str, dict[str, list[float]]]) -> str:
    """Per layer: each scoring parameter's value (one value per layer) or mean and range over heads."""
    names = sorted({p for params in values.values() for p in params})
    rows = []
    for module, params in values.items():
        row = [_layer_of(module)]
        for name in names:
            v = params.get(name)
            if not v:
                row.append("")
            elif max(v) - min(v) <= 1e-12 * max(1.0, abs(max(v))):
                row.append(format_value(v[0]))
            else:
                row.append(f"{format_value(sum(v) / len(v))} ({format_value(min(v))} to {format_value(max(v))})")
        rows.append(row)
    return markdown_table(["layer"] + [f"{n} (mean over heads, range)" for n in names], rows)


__all__ = ["WeightsError", "check_loaded_weights", "family_spec", "load_checked", "load_ssa_config",
           "read_scoring_parameters", "scoring_parameter_table", "task_of_architecture"]
