"""ssa-hf: Scaled Signed Averaging (SSA) attention for the Hugging Face ecosystem.

Importing the package registers its attention implementations (`ssa_auto`, `ssa_eager`, `ssa_flex`,
`ssa_blockwise`, with their mask functions) and its model classes with transformers' Auto classes.

The import itself is light (no torch, no transformers), so that `ssa-hf --help` answers at once: the public
names below load on first use, and the registration happens as soon as transformers is imported (at once if it
already is), before any Auto class can be asked for an ssa-hf model, or as soon as torch's program serializer is
(`torch.export.save` / `torch.export.load`), which defines the custom op a saved `.pt2` calls.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings

__version__ = "0.1.0"

# public name -> the module that defines it
_PUBLIC = {
    **dict.fromkeys(
        ["ALL_SCORING_FUNCTIONS", "LINEAR_ATTENTIONS", "BACKENDS", "SCORING_FUNCTIONS", "ScoringParameters",
         "card_fields", "register_scoring_function", "get_scoring_function", "scored_attention", "ssa_attention", "supported_backends"],
        ".models",
    ),
    "SSABertConfig": ".models.configuration_ssa_bert",
    "SSALlamaConfig": ".models.configuration_ssa_llama",
    **dict.fromkeys(["SSABertForCausalLM", "SSABertForMaskedLM", "SSABertForMultipleChoice",
                     "SSABertForQuestionAnswering", "SSABertForSequenceClassification", "SSABertForTokenClassification",
                     "SSABertModel"], ".models.modeling_ssa_bert"),
    **dict.fromkeys(["SSALlamaForCausalLM", "SSALlamaForQuestionAnswering", "SSALlamaForSequenceClassification",
                     "SSALlamaForTokenClassification", "SSALlamaModel"], ".models.modeling_ssa_llama"),
}
_SUBPACKAGES = {"cli", "commands", "data", "demo", "evaluation", "hub", "icl", "models", "presets", "reporting",
                "serving", "train"}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f".{name}", __name__)
    if name not in _PUBLIC:
        if name.startswith("SSA"):  # any config or model class of the family table (ssa_hf/models/families.py)
            classes = importlib.import_module(".models.families", __name__).public_classes()
            if name in classes:
                globals()[name] = classes[name]
                return classes[name]
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)  # ssa_hf.models registers on import
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBPACKAGES)


# modules after whose import ssa-hf registers itself: transformers (the Auto classes and attention functions) and
# torch's ExportedProgram serializer (a saved .pt2 names the custom op ssa_hf::attention_forward_v2, which must
# exist before torch.export.load reads the program; importing ssa_hf.models defines it)
_TRIGGERS = ("transformers", "torch._export.serde.serialize")


def _initializing(name: str) -> bool:
    """Whether module `name` is being imported right now (importlib marks its spec until the import ends)."""
    return bool(getattr(getattr(sys.modules.get(name), "__spec__", None), "_initializing", False))


def _register_models() -> None:
    """Import ssa_hf.models, which registers everything with transformers and defines the custom op (a no-op when
    already imported: if it is importing right now, it registers at the end of its own import)."""
    if f"{__name__}.models" not in sys.modules:
        try:
            importlib.import_module(".models", __name__)
        except Exception as error:  # a broken ssa-hf must not break `import transformers` for its user
            warnings.warn(f"ssa-hf could not register its models with transformers: {error!r}", stacklevel=2)
            return
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _RegisterAfterImport)]


class _RegisterAfterImport:
    """An import hook: lets a module of _TRIGGERS import as usual, then registers ssa-hf's models (removed once
    they are registered)."""

    def __init__(self):
        self._finding = False

    def find_spec(self, name, path=None, target=None):
        if name not in _TRIGGERS or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_original = loader.exec_module

        def exec_module(module):
            exec_original(module)
            del loader.exec_module  # the loader's own method again
            # (the serializer imported from inside transformers' own import: registered at the end of that one)
            if name == "transformers" or not _initializing("transformers"):
                _register_models()

        loader.exec_module = exec_module
        return spec


if any(name in sys.modules for name in _TRIGGERS):
    _register_models()
elif not any(isinstance(finder, _RegisterAfterImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterImport())
