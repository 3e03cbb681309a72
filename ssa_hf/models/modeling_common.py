"""What every ssa-hf model class shares: the scoring parameters on each attention module, the attention
implementation (transformers' standard names mapped onto ssa-hf's own), the initialisation of the scoring
parameters, and the load-time check of their values.

Part of the remote-code unit: imports only torch, transformers and siblings.
"""

from __future__ import annotations

import json
import logging
import os

import torch
from torch import nn

from .attention import DEFAULT_IMPLEMENTATION, IMPLEMENTATIONS, config_value, ensure_registered
from .backends import static_refusal
from .mixture import MixedScoringParameters
from .paged import PAGED_IMPLEMENTATIONS
from .paged import init_continuous_batching as _init_continuous_batching
from .parameters import ConstrainedParameter
from .settings import OLD_NAMES, ScoringParameters, default_settings, resolve_settings

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
    if implementation in IMPLEMENTATIONS or implementation in PAGED_IMPLEMENTATIONS:  # paged: continuous batching
        backend = IMPLEMENTATIONS.get(implementation, PAGED_IMPLEMENTATIONS.get(implementation))
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
        batching = ""
        if str(implementation).startswith("paged|") or "flash" in str(implementation):
            # transformers' paged and flash kernels: what continuous batching switches to for softmax models
            batching = (" For continuous batching (generate_batch, init_continuous_batching, serve "
                        "--continuous-batching) load the model with its default implementation: it then runs "
                        "ssa-hf's paged attention ('ssa_paged').")
        raise ValueError(
            f"attn_implementation={implementation!r} is transformers' own softmax attention and cannot run "
            f"attention_scoring={config.attention_scoring!r}. Use one of {list(IMPLEMENTATIONS)} (default "
            f"{DEFAULT_IMPLEMENTATION!r}) or a standard name they stand for ({sorted(config.attn_implementation_aliases)}), "
            f"or set attention_scoring='softmax' for a softmax model.{batching}"
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


def built_scoring_per_head(model: nn.Module) -> list[str] | None:
    """The scoring function each head of the model's attention layers was built with (every layer is built from the
    same config), or None for a model without scoring modules."""
    for module in model.modules():
        if isinstance(module, MixedScoringParameters):
            return list(module.names)
        if isinstance(module, ScoringParameters):
            return [module.scoring] * model.config.num_attention_heads
    return None


def _scoring_text(names: list[str]) -> str:
    return repr(names[0]) if len(set(names)) == 1 else f"the per-head list {names!r}"


def scoring_parameter_problems(model: nn.Module) -> list[str]:
    """Every scoring parameter whose value is not finite or out of its range, as 'module.name: reason' lines."""
    return [line for path, module in model.named_modules() if isinstance(module, ScoringParameters)
            for line in module.parameter_problems(f"{path}.")]


def _saved_scoring(source, kwargs: dict) -> tuple[dict, dict] | None:
    """(the checkpoint's own config.json, its scoring tensors by key), read from the files from_pretrained just
    resolved (a local folder or the Hub cache; safetensors only), or None where there are none to read."""
    if source is None or kwargs.get("state_dict") is not None or kwargs.get("gguf_file"):
        return None
    from safetensors import safe_open
    from transformers.utils import cached_file

    options = {k: kwargs[k] for k in ("subfolder", "revision", "cache_dir", "token") if kwargs.get(k) is not None}

    def find(name: str):
        return cached_file(str(source), name, _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False, **options)

    config_file, index = find("config.json"), find("model.safetensors.index.json")
    if config_file is None:
        return None
    with open(config_file, encoding="utf-8") as handle:
        config = json.load(handle)
    if index is not None:
        with open(index, encoding="utf-8") as handle:
            files = sorted(set(json.load(handle).get("weight_map", {}).values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        path = find(name)
        if path is None:
            return None
        with safe_open(path, framework="pt") as weights:
            for key in weights.keys():
                if ".scoring." in f".{key}":
                    tensors[key] = weights.get_tensor(key)
    return config, tensors


class MismatchedWeightsError(RuntimeError, ValueError):
    """A checkpoint's weights do not fit the model its config.json describes. A RuntimeError, as transformers raises
    (and its tests expect), and a ValueError, as every other bad checkpoint in ssa-hf (one line on the command line)."""


# the config fields that set weight shapes (those of all three families)
_SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings", "type_vocab_size", "n_embd", "n_layer",
                "n_head", "n_inner", "n_positions")


def _fields_lacking(source, config_class) -> list[str]:
    """The weight-shape fields of `config_class` that a local folder's config.json leaves out (its class default
    is then used; a Hub id is not looked up again)."""
    try:
        with open(os.path.join(str(source), "config.json"), encoding="utf-8") as handle:
            raw = json.load(handle)
    except (OSError, ValueError, TypeError):
        return []
    known = config_class().to_dict() if isinstance(raw, dict) else {}
    return [field for field in _SIZE_FIELDS if field in known and field not in raw]


def restore_saved_scoring(model: nn.Module, info: dict, saved: tuple[dict, dict] | None, source=None) -> set[str]:
    """Give each scoring parameter the value the checkpoint saved, whatever form this model stores it in.

    A checkpoint's `.raw` tensor means something only with its own config: softplus, exp or raw (its
    `scoring_parametrization`), and a fixed parameter is a `.value` buffer. A load that asks for another form
    (`from_pretrained(..., scoring_parametrization="exp")`, `ssa_learn_b=False`) or a config.json edited to say so
    would otherwise reinterpret the numbers (b = 2 read back as 6.4) or reset them; here each saved value is
    converted into the model's form. Scoring tensors the model has no place for (a checkpoint of another scoring
    function, or its config edited) are refused. Returns the keys (without the base model's prefix) of the
    tensors converted: transformers reported them missing (this model's form) and unexpected (the saved form)."""
    converted: set[str] = set()
    unexpected = {k for k in info.get("unexpected_keys", ()) if ".scoring." in f".{k}"}
    prefix = getattr(model, "base_model_prefix", "") + "."
    bare = lambda key: key[len(prefix):] if key.startswith(prefix) else key  # noqa: E731
    if saved is not None:
        config, tensors = saved
        by_name = {bare(k): v for k, v in tensors.items()}
        settings = resolve_settings(None, **{k: v for k, v in config.items() if k in default_settings() or k in OLD_NAMES})
        for path, module in model.named_modules():
            if not isinstance(module, ScoringParameters):
                continue
            for name, param in module.params.items():
                base = bare(f"{path}.params.{name}")
                stored = {form: by_name.get(f"{base}.{form}") for form in ("raw", "value")}
                unexpected -= {k for k in unexpected if bare(k) in (f"{base}.raw", f"{base}.value")}
                form = "raw" if stored["raw"] is not None else "value" if stored["value"] is not None else None
                spec = module.specs[name]
                saved_form = (form == "raw", spec.parametrization(settings) if form == "raw" else None)
                if form is None or saved_form == (param.learnable, param.parametrization if param.learnable else None):
                    continue  # not saved (its configured value), or saved in this model's form
                if stored[form].numel() != param.source().numel():
                    continue  # another granularity: transformers' size check has refused it already
                value = ConstrainedParameter.value_of(stored[form], *saved_form, floor=spec.floor)
                try:
                    param.set_value(value)
                except ValueError as error:
                    raise ValueError(f"{type(model).__name__} from {source}: {base} was saved as "
                                     f"{saved_form[1] or 'a fixed value'}; {error}") from None
                converted |= {f"{base}.raw", f"{base}.value"}
                logger.info("%s: saved as %s, converted to this model's %s", base, saved_form[1] or "a fixed value",
                            param.parametrization if param.learnable else "fixed value")
    if unexpected:
        raise ValueError(
            f"{type(model).__name__} from {source}: the checkpoint holds scoring parameters this model has no place "
            f"for ({sorted(unexpected)[:4]}), attention_scoring={model.config.attention_scoring!r}: its config.json "
            f"was edited or belongs to other weights, or the load changed attention_scoring. Load it as saved; to "
            f"change the scoring function of a checkpoint use `ssa-hf convert`.")
    return {bare(key) for key in converted}


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

    @torch.no_grad()
    def init_continuous_batching(self, generation_config=None, continuous_batching_config=None, workload_hints=None):
        """transformers' continuous batching (also behind `generate_batch`, `continuous_batching_context_manager`,
        `generate(cache_implementation="paged")` and `transformers serve --continuous-batching`), with the model's
        scoring function on ssa-hf's paged attention (`ssa_paged`, paged.py) in place of transformers' softmax ones."""
        stock = getattr(super(), "init_continuous_batching", None)
        if stock is None:
            raise AttributeError(f"{type(self).__name__} does not generate text: continuous batching needs a causal LM "
                                 f"class (e.g. SSALlamaForCausalLM)")
        return _init_continuous_batching(self, stock, generation_config, continuous_batching_config, workload_hints)

    def assert_scoring_runs(self) -> None:
        """Refuse a config whose attention implementation, as transformers will call it, cannot run its scoring.
        A standard name set on the config by hand (`model.config._attn_implementation = "eager"`, which transformers
        would call as it is, i.e. softmax) is first mapped as a request of it is (eager -> ssa_eager, sdpa ->
        ssa_auto), so that it never runs softmax in place of the configured scoring function."""
        self.check_built_scoring()
        current = self.config._attn_implementation
        mapped = resolve_implementation(self.config, current)
        if mapped != current and mapped in IMPLEMENTATIONS:
            logger.info("config._attn_implementation=%r set by hand runs ssa-hf's %r", current, mapped)
            self.config._attn_implementation = mapped
        check_implementation(self.config, self.config._attn_implementation, aliases=False)

    def check_built_scoring(self) -> None:
        """Refuse a config whose attention_scoring differs from the scoring function the layers were built with."""
        built, configured = built_scoring_per_head(self), self.config.scoring_per_head()
        if built is not None and built != configured:
            raise ValueError(
                f"config.attention_scoring is {self.config.attention_scoring!r} but this {type(self).__name__} was "
                f"built with {_scoring_text(built)} (its layers hold that function's parameters, and it would keep "
                f"running it): the field was edited on a built model. Build a new model from the edited config "
                f"(`{type(self).__name__}(config)` or `from_config`), or turn a trained checkpoint into another scoring "
                f"function with `ssa-hf convert`; set the field back to run this one."
            )

    def decay_parameter_names(self, model: nn.Module | None = None) -> list[str]:
        """The parameters weight decay applies to, by the rule of ssa-hf's own training loop: matrices (>= 2-D:
        linear layers, embeddings); never biases, norm weights or the scoring parameters (b, n, ...: 1-D), which
        decay would pull towards 0, an arbitrary value for them. HF `Trainer` has its own rule (names with "bias" or
        "norm"), which decays b and n; give it this one with
        `trainer.get_decay_parameter_names = model.decay_parameter_names` (the Trainer passes the model it
        optimises, e.g. a PEFT wrapper, whose names are then used)."""
        model = self if model is None else model
        return [name for name, parameter in model.named_parameters() if parameter.dim() >= 2]

    def save_pretrained(self, *args, **kwargs):
        self.check_built_scoring()  # a config.json that names another function than the saved weights hold
        return super().save_pretrained(*args, **kwargs)

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
        wants_info = kwargs.get("output_loading_info", False)
        source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        try:
            model, info = super().from_pretrained(*args, **{**kwargs, "output_loading_info": True})
        except RuntimeError as error:
            if "ignore_mismatched_sizes" not in str(error):
                raise
            missing = _fields_lacking(source, cls.config_class)
            lacking = f"; its config.json lacks {', '.join(missing)} (the class defaults were used)" if missing else ""
            raise MismatchedWeightsError(
                f"{cls.__name__} from {source}: the weights' shapes do not match the model its config.json "
                f"describes{lacking}. Restore the config.json saved with these weights (transformers logged the "
                f"mismatched tensors above)") from None
        converted = restore_saved_scoring(model, info, _saved_scoring(source, kwargs), source)
        if converted:  # filled from the saved form: not missing, not left out (the report callers check)
            prefix = getattr(model, "base_model_prefix", "") + "."
            for field in ("missing_keys", "unexpected_keys"):
                keys = info.get(field)
                if keys is not None:
                    kept = [k for k in keys if (k[len(prefix):] if k.startswith(prefix) else k) not in converted]
                    info[field] = type(keys)(kept) if isinstance(keys, (set, list)) else kept
        model.validate_scoring_parameters(source=source)
        return (model, info) if wants_info else model

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
