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
