"""The device a command runs on: `None`/"auto" picks CUDA when present; a device that is not there is a clear
error instead of a library traceback ("Torch not compiled with CUDA enabled")."""

from __future__ import annotations


def resolve_device(device: str | None) -> str:
    """`device` checked against what torch sees ("cpu", "cuda", "cuda:1", "mps", ...; None or "auto": CUDA if
    available, else CPU); a ValueError that says what to pass instead."""
    import torch

    if device is None or str(device).lower() == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device {device!r} is not a torch device ({error}); use cpu, cuda, cuda:N or auto") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: torch sees no CUDA device here; use --device cpu (or auto)")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    if parsed.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError(f"device {device!r}: MPS is not available here; use --device cpu (or auto)")
    return str(parsed)


def free_cpu_threads() -> int:
    """CPU threads for a job that sizes itself to the machine: the cores this process may use minus the 1-minute
    load average (other jobs), at least 1. On a busy shared machine torch's default (every core) oversubscribes:
    `ssa-hf probe` ran 5.4x slower with it than with one thread at load 8 on 2 cores."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return max(1, min(cores, int(cores - load + 0.5)))
