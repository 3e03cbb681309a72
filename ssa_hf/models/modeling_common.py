"""What every ssa-hf model class shares: the scoring parameters on each attention module, the attention
implementation (transformers' standard names mapped onto ssa-hf's own), the initialisation of the scoring
parameters, and the load-time check of their values.

Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from .attention import DEFAULT_IMPLEMENTATION, IMPLEMENTATIONS, config_value, ensure_registered
from .backends import static_refusal
from .mixture import MixedScoringParameters
from .parameters import ConstrainedParameter
from .settings import ScoringParameters

logger = logging.getLogger("ssa_hf")


def attach_scoring(attention: nn.Module, config) -> None:
    """Give one attention module its scoring function and parameters (`attention.scoring`)."""
    names = config.scoring_per_head()
    if len(set(names)) != 1:
        attention.scoring = MixedScoringParameters(names, config)
    else:
        attention.scoring = ScoringParameters(names[0], config.num_attention_heads, config)
    # each parameter knows its configured value, so that `_init_weights` can set it on its own (transformers
    # initialises missing weights module by module, and ScoringParameters holds no tensor itself)
    for group in attention.scoring.modules():
        if isinstance(group, ScoringParameters):
            initial = group.initial_values()
            for name, parameter in group.params.items():
                parameter.initial_value = initial[name]


def resolve_implementation(config, requested: str | None) -> str:
    """The ssa-hf implementation that a requested `attn_implementation` name runs (standard names mapped)."""
    implementation = requested or DEFAULT_IMPLEMENTATION
    aliases = getattr(config, "attn_implementation_aliases", None) or {}
    return aliases.get(implementation, implementation)


def check_implementation(config, requested: str | None, aliases: bool = True) -> str:
    """The attention implementation to use, or a ValueError that says what to change.

    transformers' standard names run ssa-hf's own implementation of the configured scoring function
    (`config.attn_implementation_aliases`: eager -> ssa_eager, sdpa -> ssa_auto, flex_attention -> ssa_flex); other
    transformers implementations (flash, paged, kernels) run softmax and are accepted only for softmax models.
    `aliases=False` checks the name as transformers will call it (a config edited by hand is not mapped).
    """
    implementation = resolve_implementation(config, requested) if aliases else (requested or DEFAULT_IMPLEMENTATION)
    names = sorted(set(config.scoring_per_head()))
    if implementation in IMPLEMENTATIONS:
        backend = IMPLEMENTATIONS[implementation]
        if backend is not None:
            for name in names:
                # a static check (gradients and device are known only at call time)
                reason = static_refusal(backend, name)
                if reason:
                    shown = implementation if implementation == requested else f"{requested!r} (-> {implementation!r})"
                    raise ValueError(
                        f"attn_implementation={shown} cannot run attention_scoring={name!r}: {reason}. "
                        f"Use attn_implementation='ssa_auto' or 'ssa_eager'."
                    )
        if requested not in (None, implementation) and requested not in IMPLEMENTATIONS:
            logger.info("attn_implementation=%r runs ssa-hf's %r (attention_scoring=%r)", requested, implementation,
                        config.attention_scoring)
        return implementation
    if names != ["softmax"]:
        raise ValueError(
            f"attn_implementation={implementation!r} is transformers' own softmax attention and cannot run "
            f"attention_scoring={config.attention_scoring!r}. Use one of {list(IMPLEMENTATIONS)} (default "
            f"{DEFAULT_IMPLEMENTATION!r}) or a standard name they stand for ({sorted(config.attn_implementation_aliases)}), "
            f"or set attention_scoring='softmax' for a softmax model."
        )
    return implementation


def _check_scoring_runs(model, args) -> None:
    # a forward pre-hook: a config edited by hand (`config._attn_implementation = "sdpa"`, which transformers then
    # calls as it is) is mapped or refused too; checked again only when one of the settings it depends on
    # has changed (a decoding step is a forward per token; transformers' config attribute lookup costs
    # microseconds, so the ssa-hf field is read from the config's own storage)
    config, compiling = model.config, torch.compiler.is_compiling()
    scoring = config_value(config, "attention_scoring", None, compiling)
    # transformers keeps the name behind its `_attn_implementation` property in `_attn_implementation_internal`
    implementation = config_value(config, "_attn_implementation_internal", _UNREAD, compiling)
    if implementation is _UNREAD:
        implementation = config._attn_implementation
    state = (implementation, scoring if isinstance(scoring, str) else repr(scoring))
    if model.__dict__.get("_ssa_checked_state") != state:
        model.assert_scoring_runs()  # may map a hand-set standard name: the state is the name that runs
        model._ssa_checked_state = (config._attn_implementation, state[1])
    if not compiling:  # an older remote-code copy may have replaced the ssa_* functions since the last forward
        ensure_registered(model._ssa_checked_state[0])


_UNREAD = object()


def scoring_parameter_problems(model: nn.Module) -> list[str]:
    """Every scoring parameter whose value is not finite or out of its range, as 'module.name: reason' lines."""
    return [line for path, module in model.named_modules() if isinstance(module, ScoringParameters)
            for line in module.parameter_problems(f"{path}.")]


class SSAModelMixin:
    """Mixed into each ssa-hf PreTrainedModel: runs the configured scoring function whatever attention
    implementation name is asked for (or refuses), initialises the scoring parameters to their configured values,
    and checks them when a checkpoint is loaded."""

    def post_init(self):
        super().post_init()
        if not getattr(self, "_ssa_forward_check", False):
            self.register_forward_pre_hook(_check_scoring_runs)
            self._ssa_forward_check = True

    def get_correct_attn_implementation(self, requested_attention: str | None, is_init_check: bool = False) -> str:
        implementation = check_implementation(self.config, requested_attention)
        return super().get_correct_attn_implementation(implementation, is_init_check)

    def assert_scoring_runs(self) -> None:
        """Refuse a config whose attention implementation, as transformers will call it, cannot run its scoring.
        A standard name set on the config by hand (`model.config._attn_implementation = "eager"`, which transformers
        would call as it is, i.e. softmax) is first mapped as a request of it is (eager -> ssa_eager, sdpa ->
        ssa_auto), so that it never runs softmax in place of the configured scoring function."""
        current = self.config._attn_implementation
        mapped = resolve_implementation(self.config, current)
        if mapped != current and mapped in IMPLEMENTATIONS:
            logger.info("config._attn_implementation=%r set by hand runs ssa-hf's %r", current, mapped)
            self.config._attn_implementation = mapped
        check_implementation(self.config, self.config._attn_implementation, aliases=False)

    def _init_weights(self, module):
        if isinstance(module, ConstrainedParameter):
            tensor = module.raw if module.learnable else module.value
            # loaded tensors carry transformers' flag: only missing ones are set
            if not getattr(tensor, "_is_hf_initialized", False):
                module.reset(module.initial_value)
            return
        super()._init_weights(module)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        model.validate_scoring_parameters(source=args[0] if args else kwargs.get("pretrained_model_name_or_path"))
        return loaded

    def validate_scoring_parameters(self, source=None) -> None:
        """Raise ValueError naming every layer whose scoring parameters are not finite or out of range."""
        problems = scoring_parameter_problems(self)
        if problems:
            where = f" loaded from {source}" if source is not None else ""
            raise ValueError(
                f"Invalid scoring parameters in {type(self).__name__}{where} (b > 0, n >= 1, t, s, m > 0, alpha > 1, "
                f"all finite):\n  " + "\n  ".join(problems)
                + "\nThe checkpoint is damaged or was edited; retrain or restore these values."
            )

    def scoring_parameters(self) -> dict[str, dict[str, list[float]]]:
        """Current values of every scoring parameter, keyed by module path, e.g. {"model.layers.0.self_attn.scoring":
        {"b": [...], "n": [...]}} (per head)."""
        return {
            name: {k: v.detach().float().cpu().tolist() for k, v in module().items()}
            for name, module in self.named_modules()
            if isinstance(module, ScoringParameters) and module.params
        }
