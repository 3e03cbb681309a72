"""Training state on disk without pickle: tensors in safetensors, everything else in JSON.

A checkpoint is untrusted input (it may come from elsewhere, or be edited): nothing in it is unpickled, so no file
in it can run code. The pieces:

- model weights: `model.safetensors` (the full, unsharded state dict; tied weights stored once, their other names
  in the file's metadata);
- optimizer: `optimizer.safetensors` (the per-parameter state tensors, keyed `<parameter name>/<state name>`) and
  `optimizer.json` (the parameter groups and any non-tensor state);
- scheduler and gradient scaler: `scheduler.json`, `scaler.json` (their state dicts are plain numbers);
- per process: `rng_state_rank<R>.json` (python `random`, numpy, torch CPU and CUDA generators; the byte states
  base64-encoded) and whatever JSON the caller adds (e.g. the data position).

`capture_state` gathers all of it in memory (collectively: FSDP-sharded weights and optimizer state are
gathered onto the main process), `write_state` writes it (main process only, so a failing write is seen by one
process and reported to all), `load_state` restores it on every process.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..regular_files import check_regular_file, read_json

MODEL_FILE = "model.safetensors"
OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_JSON = "optimizer.json"
SCHEDULER_FILE = "scheduler.json"
SCALER_FILE = "scaler.json"
_ALIASES_KEY = "ssa_hf_aliases"  # safetensors metadata: {"alias name": "stored name"} for tied weights


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or read as asked, with what to do about it."""


class NonFiniteError(FloatingPointError, ValueError):
    """NaN or inf where training needs finite numbers (loss, gradient norm, weights), with the step."""


class ScoringParameterError(ValueError):
    """An optimizer update that left scoring parameters (b, n, ...) non-finite or outside their range, with the step."""


def rng_file(rank: int) -> str:
    return f"rng_state_rank{rank}.json"


# ------------------------------------------------------------------------------------------------ RNG states


def _bytes(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().numpy().tobytes()).decode("ascii")


def _tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text, validate=True)), dtype=torch.uint8)


def rng_state() -> dict[str, Any]:
    """This process's random generators as JSON-able values."""
    version, keys, gauss = random.getstate()
    kind, mt, position, has_gauss, cached = np.random.get_state()
    state = {
        "python": {"version": version, "state": list(keys), "gauss_next": gauss},
        "numpy": {"kind": kind, "state": mt.tolist(), "position": int(position), "has_gauss": int(has_gauss),
                  "cached_gaussian": float(cached)},
        "torch": _bytes(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_bytes(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any], source: str) -> None:
    """Restore what `rng_state` returned; a CheckpointError naming `source` if it is not a valid state."""
    try:
        python, numpy_state = state["python"], state["numpy"]
        python_state = (int(python["version"]), tuple(int(v) for v in python["state"]), python["gauss_next"])
        numpy_tuple = (str(numpy_state["kind"]), np.asarray(numpy_state["state"], dtype=np.uint32),
                       int(numpy_state["position"]), int(numpy_state["has_gauss"]),
                       float(numpy_state["cached_gaussian"]))
        torch_state = _tensor(state["torch"])
        cuda_states = [_tensor(s) for s in state.get("cuda", [])]
        expected = torch.get_rng_state().numel()
        if torch_state.numel() != expected:
            raise ValueError(f"torch state of {torch_state.numel()} bytes, expected {expected}")
        random.setstate(python_state)
        np.random.set_state(numpy_tuple)
        torch.set_rng_state(torch_state)
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(
            f"{source}: not a valid random-generator state ({type(error).__name__}: {error}); resuming from it would "
            "not reproduce the run. Resume from another checkpoint (--resume PATH) or start afresh"
        ) from None
    if cuda_states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda_states)


# ------------------------------------------------------------------------------------- model and optimizer


def _state_dict_options(**kwargs):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def _inner(optimizer):
    return getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps the torch one


def _dedupe(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tied weights (one tensor under two names) stored once: (tensors, {alias: stored name})."""
    kept: dict[str, torch.Tensor] = {}
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
        if tensor.numel() and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        kept[name] = tensor.detach().contiguous()
    return kept, aliases


def _split_optimizer_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for param, entries in state["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{param}/{name}"] = value.detach().contiguous()
            else:
                scalars.setdefault(str(param), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _join_optimizer_state(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        param, _, name = key.rpartition("/")
        state.setdefault(param, {})[name] = tensor
    for param, entries in meta.get("scalars", {}).items():
        state.setdefault(param, {}).update(entries)
    return {"state": state, "param_groups": meta["param_groups"]}


def _json_only(value: Any, what: str) -> Any:
    """`value` after a JSON round trip (tuples become lists), or a CheckpointError if it holds anything else."""
    try:
        return json.loads(json.dumps(value, allow_nan=True))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"the {what} state cannot be stored as JSON ({error}); it holds objects, not values")


@dataclass
class StateSnapshot:
    """Everything a checkpoint stores, in memory. The model and optimizer entries are filled on the main
    process only; `process_files` holds every process's JSON files (name -> content)."""

    model: dict[str, torch.Tensor] = field(default_factory=dict)
    model_aliases: dict[str, str] = field(default_factory=dict)
    optimizer_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    optimizer_meta: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] | None = None
    scaler: dict[str, Any] | None = None
    process_files: dict[str, Any] = field(default_factory=dict)


def capture_state(accelerator, model, optimizer, scheduler, process_json: dict[str, Any]) -> StateSnapshot:
    """The training state of all processes, gathered onto the main process (every process must call this).
    `process_json` maps file-name stems to this process's JSON content (e.g. {"data_state": {...}}); each is
    stored as `<stem>_rank<R>.json`, beside the RNG state."""
    from accelerate.utils import gather_object
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    options = _state_dict_options(cpu_offload=True)
    model_state = get_model_state_dict(model, options=options)
    optimizer_state = get_optimizer_state_dict(model, _inner(optimizer), options=options)
    rank = accelerator.process_index
    mine = {rng_file(rank): rng_state(), **{f"{stem}_rank{rank}.json": value for stem, value in process_json.items()}}
    gathered = gather_object([mine]) if accelerator.num_processes > 1 else [mine]
    snapshot = StateSnapshot()
    if accelerator.is_main_process:
        snapshot.model, snapshot.model_aliases = _dedupe(model_state)
        snapshot.optimizer_tensors, meta = _split_optimizer_state(optimizer_state)
        snapshot.optimizer_meta = _json_only(meta, "optimizer")
        snapshot.scheduler = _json_only(scheduler.state_dict(), "scheduler") if scheduler is not None else None
        scaler = getattr(accelerator, "scaler", None)
        snapshot.scaler = _json_only(scaler.state_dict(), "gradient scaler") if scaler is not None else None
        for files in gathered:
            snapshot.process_files.update(files)
    return snapshot


def non_finite_tensors(tensors: dict[str, torch.Tensor], limit: int = 3) -> list[str]:
    """Names of (up to `limit`) floating-point tensors holding NaN or inf."""
    bad = []
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad.append(name)
            if len(bad) == limit:
                break
    return bad


def write_state(folder: Path, snapshot: StateSnapshot) -> None:
    """Write a snapshot into `folder` (main process)."""
    from safetensors.torch import save_file

    from ..reporting import atomic_write_json, writing

    metadata = {"format": "pt", _ALIASES_KEY: json.dumps(snapshot.model_aliases)}
    with writing(folder / MODEL_FILE):
        save_file(snapshot.model, str(folder / MODEL_FILE), metadata=metadata)
    with writing(folder / OPTIMIZER_TENSORS):
        save_file(snapshot.optimizer_tensors, str(folder / OPTIMIZER_TENSORS), metadata={"format": "pt"})
    atomic_write_json(folder / OPTIMIZER_JSON, snapshot.optimizer_meta)
    if snapshot.scheduler is not None:
        atomic_write_json(folder / SCHEDULER_FILE, snapshot.scheduler)
    if snapshot.scaler is not None:
        atomic_write_json(folder / SCALER_FILE, snapshot.scaler)
    for name, content in snapshot.process_files.items():
        atomic_write_json(folder / name, content)


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise CheckpointError(f"{path.parent}: missing {path.name}; the checkpoint is incomplete")
    try:
        return read_json(path)  # (a FIFO is refused, never waited on)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error}); the checkpoint is damaged") from None


def _read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    if not path.is_file():
        raise CheckpointError(f"{path.parent}: missing {path.name}; the checkpoint is incomplete")
    check_regular_file(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
        return load_file(str(path)), metadata
    except Exception as error:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{path}: not a readable safetensors file ({error}); the checkpoint is damaged") from None


def _restore_tuples(groups: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON made the groups' tuples (Adam's betas) lists; give them back the types the optimizer has now."""
    for saved, now in zip(groups, current):
        for key, value in now.items():
            if isinstance(value, tuple) and isinstance(saved.get(key), list):
                saved[key] = tuple(saved[key])
    return groups


def load_state(folder: Path, accelerator, model, optimizer, scheduler) -> None:
    """Restore model, optimizer, scheduler, scaler and this process's RNG state from `folder` (every process)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    folder = Path(folder)
    weights, metadata = _read_tensors(folder / MODEL_FILE)
    for alias, stored in json.loads(metadata.get(_ALIASES_KEY, "{}")).items():
        weights[alias] = weights[stored]
    optimizer_tensors, _ = _read_tensors(folder / OPTIMIZER_TENSORS)
    inner = _inner(optimizer)
    groups = [{**{k: g[k] for k in ("lr", "betas", "eps", "weight_decay") if k in g}, "params": [None] * len(g["params"])}
              for g in json.loads(json.dumps(inner.state_dict()["param_groups"], default=str))]
    meta = _read_json(folder / OPTIMIZER_JSON)
    _checked_like(folder / OPTIMIZER_JSON, {"param_groups": groups}, {"param_groups": (meta or {}).get("param_groups")}
                  if isinstance(meta, dict) else meta)
    optimizer_state = _join_optimizer_state(optimizer_tensors, meta)
    optimizer_state["param_groups"] = _restore_tuples(optimizer_state["param_groups"], inner.param_groups)
    try:
        set_model_state_dict(model, weights, options=_state_dict_options())
        # (not strict: a parameter that never received a gradient, e.g. an unused embedding, has no state)
        set_optimizer_state_dict(model, inner, optimizer_state, options=_state_dict_options(strict=False))
    except (KeyError, RuntimeError, ValueError) as error:
        raise CheckpointError(f"{folder}: its weights or optimizer state do not fit this model ({error}); resume "
                              "with the configuration that wrote it") from None
    if scheduler is not None:
        scheduler.load_state_dict(_checked_like(folder / SCHEDULER_FILE, scheduler.state_dict()))
    scaler = getattr(accelerator, "scaler", None)
    if scaler is not None:
        scaler.load_state_dict(_checked_like(folder / SCALER_FILE, scaler.state_dict()))
    path = folder / rng_file(accelerator.process_index)
    set_rng_state(_read_json(path), str(path))


def _mismatch(saved: Any, reference: Any, where: str) -> str | None:
    """Where `saved` (JSON) differs in structure from `reference` (what this run's object writes): missing or extra
    keys, list lengths, value types (a number for a number)."""
    if isinstance(reference, dict):
        if not isinstance(saved, dict):
            return f"{where or 'the file'} should be a mapping, got {type(saved).__name__}"
        missing = [str(k) for k in reference if k not in saved]  # (extra keys: another torch version's, harmless)
        if missing:
            return f"{where or 'the file'} lacks {', '.join(missing[:4])}"
        return next((m for k in reference if (m := _mismatch(saved[k], reference[k], f"{where}.{k}".lstrip(".")))), None)
    if isinstance(reference, (list, tuple)):
        if not isinstance(saved, list) or len(saved) != len(reference):
            return f"{where} should be a list of {len(reference)}, got {saved!r:.60}"
        return next((m for i, (s, r) in enumerate(zip(saved, reference)) if (m := _mismatch(s, r, f"{where}[{i}]"))), None)
    if isinstance(reference, bool) or reference is None:
        return None if isinstance(saved, bool) or saved is None or reference is None else f"{where} should be true/false"
    if isinstance(reference, (int, float)):
        ok = isinstance(saved, (int, float)) and not isinstance(saved, bool)
        return None if ok else f"{where} should be a number, got {saved!r:.60}"
    return None


def _checked_like(path: Path, reference: Any, saved: Any = ...) -> Any:
    """The JSON of `path` once it has the structure this run's own state has; else a CheckpointError naming the
    file and the field (a damaged or foreign file must not fail deep inside torch)."""
    saved = _read_json(path) if saved is ... else saved
    problem = _mismatch(saved, json.loads(json.dumps(reference, default=str)), "")
    if problem:
        raise CheckpointError(f"{path}: not a state this run can resume ({problem}); the checkpoint is damaged or "
                              "from another configuration: resume from another checkpoint (--resume PATH)")
    return saved


def read_process_json(folder: Path, stem: str, rank: int) -> Any:
    return _read_json(Path(folder) / f"{stem}_rank{rank}.json")
