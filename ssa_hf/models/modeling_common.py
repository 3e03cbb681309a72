"""What every ssa-hf model class shares: the scoring parameters on each attention module, the default attention
implementation, and the checks that keep a model from silently running softmax.

Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

from torch import nn

from .attention import DEFAULT_IMPLEMENTATION, IMPLEMENTATIONS, BACKENDS, register_with_transformers
from .mixture import MixedScoringParameters
from .scoring import ScoringModule, ScoringParameters, get_scoring_function

register_with_transformers()


def attach_scoring(attention: nn.Module, config) -> None:
    """Give one attention module its scoring function and parameters (`attention.scoring`)."""
    names = config.scoring_per_head()
    if len(set(names)) != 1:
        attention.scoring = MixedScoringParameters(names, config.scoring_options())
    else:
        attention.scoring = ScoringParameters(names[0], config.num_attention_heads, config.scoring_options())


def check_implementation(config, implementation: str | None) -> str:
    """The attention implementation to use, or a ValueError that says what to change."""
    implementation = implementation or DEFAULT_IMPLEMENTATION
    names = sorted(set(config.scoring_per_head()))
    if implementation in IMPLEMENTATIONS:
        backend = IMPLEMENTATIONS[implementation]
        if backend is not None:
            for name in names:
                spec = get_scoring_function(name)
                # a static check (gradients and device are known only at call time)
                reason = BACKENDS[backend].refuses(spec, False, _cuda_or_cpu(backend), 0.0)
                if reason:
                    raise ValueError(
                        f"attn_implementation={implementation!r} cannot run attention_scoring={name!r}: {reason}. "
                        f"Use attn_implementation='ssa_auto' or 'ssa_eager'."
                    )
        return implementation
    if names != ["softmax"]:
        raise ValueError(
            f"attn_implementation={implementation!r} is transformers' own softmax attention and cannot run "
            f"attention_scoring={config.attention_scoring!r}. Use one of {list(IMPLEMENTATIONS)} (default "
            f"{DEFAULT_IMPLEMENTATION!r}), or set attention_scoring='softmax' for a softmax model."
        )
    return implementation


def _cuda_or_cpu(backend: str):
    import torch

    return torch.device("cuda" if backend == "flex" and torch.cuda.is_available() else "cpu")


class SSAModelMixin:
    """Mixed into each ssa-hf PreTrainedModel: defaults to `ssa_auto` and refuses implementations that would run
    softmax in place of the configured scoring function (also after from_pretrained and set_attn_implementation)."""

    def get_correct_attn_implementation(self, requested_attention: str | None, is_init_check: bool = False) -> str:
        implementation = check_implementation(self.config, requested_attention)
        return super().get_correct_attn_implementation(implementation, is_init_check)

    def assert_scoring_runs(self) -> None:
        """Called on every forward: a config edited by hand (`config._attn_implementation = "sdpa"`) is caught too."""
        check_implementation(self.config, self.config._attn_implementation)

    def _init_weights(self, module):
        if isinstance(module, ScoringModule):
            module.reset_parameters()
            return
        super()._init_weights(module)

    def scoring_parameters(self) -> dict[str, dict[str, list[float]]]:
        """Current values of every scoring parameter, keyed by module path, e.g. {"model.layers.0.self_attn.scoring":
        {"b": [...], "n": [...]}} (per head)."""
        return {
            name: {k: v.detach().float().cpu().tolist() for k, v in module().items()}
            for name, module in self.named_modules()
            if isinstance(module, ScoringParameters) and module.params
        }
