"""The `ssa-hf` model of lm-evaluation-harness: lm-eval's HFLM with ssa-hf's model classes loaded natively.

`import ssa_hf.evaluation` registers the name lazily (`register_lm_eval_model`); lm-eval 0.4 has no plugin
discovery, so the stock `lm_eval` executable does not import ssa-hf by itself: use `python -m
ssa_hf.evaluation.lm_eval_cli --model ssa-hf ...` (the stock CLI with the name registered), or, with the stock
executable, `--model hf --model_args pretrained=DIR,trust_remote_code=True` (the checkpoint's own remote code).

What it adds to `hf`: the installed ssa-hf code runs (no remote-code copy, no `trust_remote_code`), the device
defaults to CUDA when there is one and to the CPU otherwise (lm-eval's `hf` defaults to "cuda"), masked LMs are
refused with a pointer to `ssa-hf probe` (lm-eval has no masked-LM backend), and `get_model_info` adds the scoring
function and the current SSA parameters to lm-eval's results.
"""

from __future__ import annotations

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

import ssa_hf  # noqa: F401  (registers the ssa-hf configs and models with transformers' Auto classes)

from ..hub.folders import check_loaded_weights, refuse_stock_class_for_scoring_weights, safe_weights_kwargs

LM_EVAL_MODEL_NAME = "ssa-hf"


class MaskedLMError(ValueError):
    """A masked LM was given to lm-eval, which scores causal LMs only."""


def _masked_lm_error(name: str, config) -> ValueError:
    return MaskedLMError(
        f"{name} is a masked language model ({type(config).__name__}); lm-eval scores causal LMs only. "
        "Probe masked LMs with `ssa-hf probe MODEL --zorro-dir DIR`."
    )


def is_masked_lm_config(config) -> bool:
    architectures = getattr(config, "architectures", None) or []
    if any(arch.endswith("ForMaskedLM") for arch in architectures):
        return True
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

    from ..models.families import FAMILIES

    model_type = getattr(config, "model_type", None)
    if model_type in FAMILIES:  # an ssa-hf family: masked when its default head is (SSABert)
        return FAMILIES[model_type].default_task == "masked_lm"
    return model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


class _LoadingRecorder:
    """Stands in for HFLM's Auto class while it loads: `from_pretrained` also keeps transformers' loading info."""

    def __init__(self, auto_class):
        self.auto_class, self.loading_info = auto_class, None

    def from_pretrained(self, *args, **kwargs):
        model, self.loading_info = self.auto_class.from_pretrained(*args, output_loading_info=True, **kwargs)
        return model

    def __getattr__(self, name):
        return getattr(self.auto_class, name)


@register_model(LM_EVAL_MODEL_NAME)
class SSAHFLM(HFLM):
    """lm-eval's HFLM for ssa-hf causal LMs (and any other causal LM transformers can load)."""

    def __init__(self, pretrained, device: str | None = None, backend: str = "causal", allow_weight_mismatch: bool = False,
                 allow_nonfinite_weights: bool = False, **kwargs):
        from ..devices import resolve_device

        self._allow = {"allow_mismatch": allow_weight_mismatch, "allow_nonfinite": allow_nonfinite_weights}
        self.weight_problems: dict[str, list[str]] = {}
        device = resolve_device(device)
        if backend != "causal":
            raise ValueError(f"model {LM_EVAL_MODEL_NAME!r}: backend must be 'causal' (got {backend!r})")
        if not isinstance(pretrained, str):
            if is_masked_lm_config(pretrained.config):
                raise _masked_lm_error(type(pretrained).__name__, pretrained.config)
        else:  # (no pickled weights opened unless asked)
            kwargs.update(safe_weights_kwargs(pretrained, kwargs.get("trust_remote_code", False)))
            refuse_stock_class_for_scoring_weights(pretrained, kwargs.get("trust_remote_code", False))
        super().__init__(pretrained=pretrained, device=device, backend=backend, **kwargs)

    def _create_model(self, pretrained, *args, **kwargs):
        """HFLM's loading, with transformers' loading report kept: the weights are checked (`check_loaded_weights`)
        before anything is scored."""
        auto_class, recorder = self.AUTO_MODEL_CLASS, _LoadingRecorder(self.AUTO_MODEL_CLASS)
        self.AUTO_MODEL_CLASS = recorder
        try:
            super()._create_model(pretrained, *args, **kwargs)
        finally:
            self.AUTO_MODEL_CLASS = auto_class
        self.weight_problems = check_loaded_weights(self._model, pretrained, recorder.loading_info, **self._allow)

    def _get_config(self, pretrained, *args, **kwargs):
        super()._get_config(pretrained, *args, **kwargs)
        if is_masked_lm_config(self._config):
            raise _masked_lm_error(str(pretrained), self._config)

    def get_model_info(self) -> dict:
        info = super().get_model_info()
        config = self.model.config
        info["attention_scoring"] = getattr(config, "attention_scoring", "softmax (not an ssa-hf model)")
        info["attn_implementation"] = getattr(config, "_attn_implementation", None)
        if hasattr(self.model, "scoring_parameters"):
            info["scoring_parameters"] = self.model.scoring_parameters()
        return info
