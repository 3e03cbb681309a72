"""Export ssa-hf models for runtimes other than eager PyTorch, each result checked against the eager model.

- `export_program`: a ``torch.export`` program saved as ``model.pt2`` (``torch.export.save``). The attention stays
  the custom op ``ssa_hf::attention_forward_v2`` (the fused kernel); ``import ssa_hf`` (or loading the model's
  remote code) before ``torch.export.load`` defines it. ``decompose=True`` writes it in ATen operators instead, a
  program that loads where ssa-hf is not installed. ``decode_step=True`` exports one decoding step of a causal LM
  over a static KV cache (transformers' ``TorchExportableModuleForDecoderOnlyLM``).
- `export_onnx`: ``model.onnx`` through ``torch.onnx.export(dynamo=True)``, the custom op translated to standard
  ONNX operators (``onnx_translation_table``, ssa_hf/models/onnx_ops.py), checked with onnxruntime on the CPU.
- `export_aoti`: an AOTInductor package (``model_aoti.pt2``, ``torch._inductor.aoti_compile_and_package``) of
  the program in ATen operators: compiled C++ that ``torch._inductor.aoti_load_package`` runs with torch alone.

Exported graphs take ``input_ids`` and ``attention_mask`` (batch and length dynamic unless ``dynamic=False``) and
return the model's first output (``logits``; ``last_hidden_state`` for a base model). Each export is run on an
input of another shape than it was traced with and compared with the eager model; a result off by more than the
tolerance is refused. The output folder appears whole or not at all (``ssa_hf.reporting.atomic_folder``), with
``export.json`` beside the file (what was exported, how, the check's figures, versions).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..reporting import atomic_folder, atomic_write_json, check_replaceable, refuse_link_path, refuse_links_out

__all__ = ["ARTIFACTS", "FORMATS", "MANIFEST", "ExportCheckError", "ExportResult", "MainOutput", "decomposition_table",
           "export_aoti", "export_model", "export_onnx", "export_program", "load_for_export", "onnx_translation_table",
           "register_onnx_translation", "run_onnx", "sample_inputs"]

# format -> the file it writes in the output folder
ARTIFACTS = {"pt2": "model.pt2", "onnx": "model.onnx", "aoti": "model_aoti.pt2"}
FORMATS = tuple(ARTIFACTS)
MANIFEST = "export.json"
INPUT_NAMES = ("input_ids", "attention_mask")
# largest |exported - eager| accepted, relative to max(1, max |eager|): float32 results agree to ~1e-6 (the kernel
# and an exported graph sum in different orders); half precision rounds each output to 2^-8 or 2^-11
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-9, torch.bfloat16: 5e-2, torch.float16: 1e-2}


class ExportCheckError(ValueError):
    """An exported model whose outputs differ from the eager model's by more than the tolerance."""


@dataclass
class ExportResult:
    format: str
    folder: Path
    artifact: Path
    output_name: str
    dynamic: bool
    decode_step: bool = False
    max_abs_diff: float | None = None  # against the eager model, on inputs of another shape than traced with
    tolerance: float | None = None
    checked_with: str = ""
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def summary(self) -> str:
        check = (f"; max |{self.checked_with} - eager| = {self.max_abs_diff:.3g} (tolerance {self.tolerance:.3g})"
                 if self.max_abs_diff is not None else "")
        return f"wrote {self.artifact} ({self.format}, {self.seconds:.1f} s){check}"


def onnx_translation_table() -> dict:
    """The ``custom_translation_table`` that makes ``torch.onnx.export(..., dynamo=True)`` translate ssa-hf's
    attention op into standard ONNX operators."""
    _require_onnx("onnxscript")
    from ..models.onnx_ops import onnx_translation_table as table

    return table()


def register_onnx_translation() -> None:
    """Make every ``torch.onnx.export(..., dynamo=True)`` of this process translate ssa-hf's attention op
    (transformers' ``OnnxExporter`` included), through onnxscript's registry of torch ops."""
    _require_onnx("onnxscript")
    from ..models.onnx_ops import register_onnx_translation as register

    register()


def decomposition_table() -> dict:
    """The ``ExportedProgram.run_decompositions`` table that writes ssa-hf's attention op in ATen operators."""
    from ..models.onnx_ops import decomposition_table as table

    return table()


def _require_onnx(*modules: str) -> None:
    """One line naming the extra when a module ONNX export needs is not installed."""
    from ..extras import MissingExtraError, install_line, missing_modules

    missing = [name for name in missing_modules("export") if name in modules]
    if missing:
        raise MissingExtraError(f"ONNX export needs {', '.join(missing)} (not installed): {install_line('export')}")


# --------------------------------------------------------------------------------------------------------------
# The model, its inputs and the module that is traced
# --------------------------------------------------------------------------------------------------------------


def load_for_export(model_or_folder, trust_remote_code: bool = False):
    """A model in eval mode: the model itself, or loaded from a checkpoint folder (or Hub name) with the Auto class
    of its head, safetensors only unless `trust_remote_code`."""
    if isinstance(model_or_folder, torch.nn.Module):
        return model_or_folder.eval()
    import ssa_hf  # noqa: F401  (registers the model classes with the Auto classes)
    from transformers import AutoConfig

    from ..hub.folders import safe_weights_kwargs, task_of
    from ..models.families import TASKS
    from ..regular_files import check_model_folder

    source = str(model_or_folder)
    if not Path(source).exists() and (source.startswith((".", "/")) or source.count("/") > 1):
        raise FileNotFoundError(f"model folder {source!r} does not exist")
    if Path(source).exists() and not Path(source).is_dir():
        raise ValueError(f"model {source!r} is a file; give the checkpoint folder (with config.json)")
    check_model_folder(source)  # (a FIFO, a JSON list, sizes < 1: one line, before transformers reads them)
    weights = safe_weights_kwargs(source, trust_remote_code)
    config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    auto_class = TASKS[task_of(config)].auto_class
    return auto_class.from_pretrained(source, trust_remote_code=trust_remote_code, **weights).eval()


def max_length(model) -> int:
    """The longest sequence the model's positions allow (its config's max_position_embeddings / n_positions)."""
    config = model.config
    return int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 4096)


def sample_inputs(model, batch_size: int = 2, length: int = 16, seed: int = 0) -> dict[str, torch.Tensor]:
    """`input_ids` (random tokens) and an `attention_mask` whose last row starts with two padding positions, on the
    model's device: a padded batch, so that the mask reaches the attention as a tensor."""
    length = max(2, min(length, max_length(model)))
    vocab = int(model.config.vocab_size)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(min(5, vocab - 1), vocab, (batch_size, length), generator=generator)
    mask = torch.ones_like(ids)
    if batch_size > 1:
        mask[-1, :2] = 0
    device = next(model.parameters()).device
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


class MainOutput(torch.nn.Module):
    """``model(input_ids, attention_mask)`` -> its first output tensor (logits, or the last hidden state of a base
    model): plain tensors in and out, the signature an exported graph's users feed and read."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.extra = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **self.extra)[0]


def output_name(model, inputs) -> str:
    with torch.no_grad():
        output = model(**inputs, **MainOutput(model).extra)
    return next(iter(output.keys())) if hasattr(output, "keys") else "output"


def _dynamic_shapes(model, dynamic: bool):
    if not dynamic:
        return None
    from torch.export import Dim

    batch, length = Dim("batch", min=1, max=4096), Dim("length", min=2, max=max_length(model))
    return {name: {0: batch, 1: length} for name in INPUT_NAMES}


def trace(model, inputs: dict | None = None, dynamic: bool = True, decompose: bool = False):
    """``torch.export`` of `MainOutput(model)` on `inputs` (default `sample_inputs`), batch and length dynamic;
    with `decompose`, the attention op written in ATen operators."""
    inputs = inputs or sample_inputs(model)
    args = tuple(inputs[name] for name in INPUT_NAMES)
    program = torch.export.export(MainOutput(model), args, dynamic_shapes=_dynamic_shapes(model, dynamic))
    return program.run_decompositions(decomposition_table()) if decompose else program


def decode_step_program(model, max_cache_len: int = 128, decompose: bool = False):
    """``torch.export`` of one decoding step of a causal LM over a static KV cache (transformers'
    ``TorchExportableModuleForDecoderOnlyLM``, batch 1): ``(input_ids [1, 1], cache_position [1]) -> logits``, the
    cache held as buffers that the step updates in place."""
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    if not model.can_generate():
        raise ValueError(f"a decoding step needs a causal LM; {type(model).__name__} does not generate")
    if not 2 <= max_cache_len <= max_length(model):
        raise ValueError(f"max_cache_len must be in [2, {max_length(model)}] (the model's positions), "
                         f"got {max_cache_len}")
    generation = model.generation_config
    before = generation.cache_implementation
    generation.cache_implementation = "static"  # what the wrapper checks for
    try:
        module = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=max_cache_len)
    finally:
        generation.cache_implementation = before
    device = next(model.parameters()).device
    token = torch.full((1, 1), min(5, model.config.vocab_size - 1), dtype=torch.long, device=device)
    program = module.export(input_ids=token, cache_position=torch.zeros(1, dtype=torch.long, device=device),
                            strict=False)
    return program.run_decompositions(decomposition_table()) if decompose else program


# --------------------------------------------------------------------------------------------------------------
# Checks against the eager model
# --------------------------------------------------------------------------------------------------------------


def _check_inputs(model, inputs: dict, dynamic: bool) -> dict:
    """Inputs of another batch size and length than those traced (the traced ones for a static export)."""
    if not dynamic:
        return inputs
    batch, length = inputs["input_ids"].shape[:2]
    longer = length + 5 if length + 5 <= max_length(model) else max(2, length - 3)
    return sample_inputs(model, batch_size=batch + 1, length=longer, seed=1)


def _eager(model, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return MainOutput(model)(*(inputs[name] for name in INPUT_NAMES))


def _record_check(result: ExportResult, got, want: torch.Tensor, dtype, runtime: str) -> None:
    """Store the largest difference from eager; refuse the export beyond the tolerance."""
    got = torch.as_tensor(got)
    if tuple(got.shape) != tuple(want.shape):
        raise ExportCheckError(f"the exported {result.format} model returned shape {tuple(got.shape)}, the eager "
                               f"model {tuple(want.shape)}; nothing was written")
    diff = (got.double() - want.double()).abs().max().item()
    tolerance = TOLERANCE.get(dtype, 1e-4) * max(1.0, want.double().abs().max().item())
    result.max_abs_diff, result.tolerance, result.checked_with = diff, tolerance, runtime
    if not diff <= tolerance:  # (NaN included)
        raise ExportCheckError(f"the exported {result.format} model ({runtime}) differs from the eager model by "
                               f"{diff:.3g} (tolerance {tolerance:.3g}); nothing was written")


def _check_decode_step(result: ExportResult, program, model, max_cache_len: int) -> None:
    """Feed a prompt token by token through the step: each step's logits against the eager forward's at that
    position (one causal forward of the whole prompt, no cache)."""
    device = next(model.parameters()).device
    length = min(max_cache_len, 12)
    ids = sample_inputs(model, batch_size=1, length=length, seed=1)["input_ids"]
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits[0]
        step = program.module()
        got = torch.stack([step(input_ids=ids[:, i:i + 1], cache_position=torch.tensor([i], device=device))[0, -1]
                           for i in range(length)])
    _record_check(result, got, want, model.dtype, "torch.export decoding step, static cache")


# --------------------------------------------------------------------------------------------------------------
# Writers: one file in the (temporary) output folder, checked
# --------------------------------------------------------------------------------------------------------------


def _write_pt2(model, path: Path, result: ExportResult, inputs: dict, options: dict) -> None:
    if options["decode_step"]:
        program = decode_step_program(model, options["max_cache_len"], options["decompose"])
    else:
        program = trace(model, inputs, result.dynamic, options["decompose"])
    torch.export.save(program, path)
    if not options["check"]:
        return
    loaded = torch.export.load(path)  # what a user gets back
    if options["decode_step"]:
        _check_decode_step(result, loaded, model, options["max_cache_len"])
        return
    check = _check_inputs(model, inputs, result.dynamic)
    with torch.no_grad():
        got = loaded.module()(*(check[name] for name in INPUT_NAMES))
    _record_check(result, got, _eager(model, check), model.dtype, "torch.export.load")


# loggers of the ONNX exporter and optimiser, and the level under which their records are dropped during an export:
# a hundred INFO lines per model (each rewrite rule, each folded constant) and a warning per torchvision op
_EXPORTER_LOGGERS = {"onnxscript": logging.WARNING, "onnx_ir": logging.WARNING,
                     "torch.onnx._internal.exporter._registration": logging.ERROR}


@contextlib.contextmanager
def _quiet_exporter():
    loggers = {logging.getLogger(name): level for name, level in _EXPORTER_LOGGERS.items()}
    before = {logger: logger.level for logger in loggers}
    for logger, level in loggers.items():
        logger.setLevel(max(level, logger.level))
    try:
        yield
    finally:
        for logger, level in before.items():
            logger.setLevel(level)


def _write_onnx(model, path: Path, result: ExportResult, inputs: dict, options: dict) -> None:
    program = trace(model, inputs, result.dynamic)
    args = tuple(inputs[name] for name in INPUT_NAMES)
    with _quiet_exporter():
        onnx_program = torch.onnx.export(program, args, dynamo=True, custom_translation_table=onnx_translation_table(),
                                         input_names=list(INPUT_NAMES), output_names=[result.output_name],
                                         optimize=True, verbose=False)
    onnx_program.save(str(path))
    if options["check"]:
        check = _check_inputs(model, inputs, result.dynamic)
        got = run_onnx(path, {name: check[name] for name in INPUT_NAMES})
        _record_check(result, torch.from_numpy(got), _eager(model, check).cpu(), model.dtype, "onnxruntime (CPU)")


def run_onnx(path, inputs: dict, session_options=None):
    """The first output of the ONNX model at `path` run by onnxruntime on the CPU, for `inputs` (name -> tensor or
    array)."""
    _require_onnx("onnxruntime")
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), sess_options=session_options,
                                           providers=["CPUExecutionProvider"])
    feeds = {name: value.cpu().numpy() if torch.is_tensor(value) else value for name, value in inputs.items()}
    return session.run(None, feeds)[0]


def _write_aoti(model, path: Path, result: ExportResult, inputs: dict, options: dict) -> None:
    program = trace(model, inputs, result.dynamic, decompose=True)  # no ssa-hf op: runs with torch alone
    torch._inductor.aoti_compile_and_package(program, package_path=str(path))
    if options["check"]:
        check = _check_inputs(model, inputs, result.dynamic)
        runner = torch._inductor.aoti_load_package(str(path))
        got = runner(*(check[name] for name in INPUT_NAMES))
        _record_check(result, got, _eager(model, check), model.dtype, "AOTInductor package")


_WRITERS = {"pt2": _write_pt2, "onnx": _write_onnx, "aoti": _write_aoti}


# --------------------------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------------------------


def _versions() -> dict:
    import importlib.metadata as metadata

    found = {"python": platform.python_version()}
    for name in ("torch", "transformers", "ssa-hf", "onnx", "onnxscript", "onnxruntime"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def _manifest(result: ExportResult, model, source) -> dict:
    values = asdict(result)
    values.pop("folder")  # (the manifest lies in it)
    values.update(artifact=result.artifact.name, source=source, model_class=type(model).__name__,
                  dtype=str(model.dtype).removeprefix("torch."), versions=_versions(),
                  inputs=["input_ids", "cache_position"] if result.decode_step else list(INPUT_NAMES))
    return values


def export_model(model_or_folder, output, format: str = "pt2", *, overwrite: bool = False,
                 trust_remote_code: bool = False, dynamic: bool = True, decompose: bool = False,
                 decode_step: bool = False, max_cache_len: int = 128, inputs: dict | None = None,
                 check: bool = True) -> ExportResult:
    """Export a model (or a checkpoint folder) to the folder `output` as `format` ("pt2", "onnx" or "aoti"), checked
    against the eager model (`check`); see the module's docstring. Returns what was written and the check's figures."""
    if format not in ARTIFACTS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if decode_step and format != "pt2":
        raise ValueError("a decoding step over a static cache is exported as a torch.export program: use format "
                         "'pt2' (ONNX and AOTInductor exports take the whole sequence)")
    if format == "onnx":
        _require_onnx("onnx", "onnxscript", *(("onnxruntime",) if check else ()))
    output = Path(output)
    refuse_link_path(output.parent, output)  # (atomic_folder checks again; here before a model is loaded)
    check_replaceable(output, overwrite, MANIFEST)
    model = load_for_export(model_or_folder, trust_remote_code)
    inputs = inputs or sample_inputs(model)
    source = model_or_folder if isinstance(model_or_folder, (str, os.PathLike)) else None
    options = dict(decompose=decompose or format == "aoti", decode_step=decode_step, max_cache_len=max_cache_len,
                   check=check)
    name = "logits" if decode_step else output_name(model, inputs)
    start = time.perf_counter()
    with atomic_folder(output, overwrite, owner_file=MANIFEST) as folder:
        result = ExportResult(format, output, folder / ARTIFACTS[format], name, dynamic and not decode_step,
                              decode_step, details={"decomposed": options["decompose"]})
        _WRITERS[format](model, result.artifact, result, inputs, options)
        result.seconds = time.perf_counter() - start
        result.artifact = output / ARTIFACTS[format]
        atomic_write_json(folder / MANIFEST, _manifest(result, model, None if source is None else str(source)))
        refuse_links_out(folder)
    return result


def export_program(model_or_folder, output, **options) -> ExportResult:
    """`export_model` as a ``torch.export`` program (``model.pt2``)."""
    return export_model(model_or_folder, output, "pt2", **options)


def export_onnx(model_or_folder, output, **options) -> ExportResult:
    """`export_model` as ONNX (``model.onnx``), checked with onnxruntime."""
    return export_model(model_or_folder, output, "onnx", **options)


def export_aoti(model_or_folder, output, **options) -> ExportResult:
    """`export_model` as an AOTInductor package (``model_aoti.pt2``) that runs without ssa-hf."""
    return export_model(model_or_folder, output, "aoti", **options)
