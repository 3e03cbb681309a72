"""Bad scoring settings in a model config: each is a ValueError that names the field and its allowed range (or the
closest valid name), raised when the config is built - never a model with NaN, inf or out-of-range parameters."""

import math

import pytest

from ssa_hf import SSALlamaConfig
from ssa_hf.models.families import FAMILY_SPECS
from ssa_hf.models.settings import resolve_settings, validate_settings
from ssa_hf.presets import load_model_config, load_preset

TINY = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
FAMILIES = [spec.config_class for spec in FAMILY_SPECS]  # every family of the table

NAN, INF = float("nan"), float("inf")
# (field, bad value, what the message must say)
BAD_FIELDS = [
    *[("ssa_b_init", v, r"ssa_b_init must be a finite number in \[0.0001, 10000\]") for v in (NAN, INF, -INF, -1.0, 0.0, 1e-6, 1e5, 1e300)],
    *[("ssa_n_init", v, r"ssa_n_init must be a finite number in \[1, 10000\]") for v in (NAN, INF, 0.5, 0.0, -2.0, 1e5)],
    *[("temperature_init", v, r"temperature_init must be a finite number in \[0.0001, 10000\]") for v in (NAN, INF, 0.0, -1.0)],
    *[("ssmax_s_init", v, r"ssmax_s_init must be a finite number in \[0.0001, 10000\]") for v in (NAN, INF, 0.0, -0.4)],
    *[("entmax_alpha_init", v, r"entmax_alpha_init must be a finite number in \(1, 2\]") for v in (NAN, 1.0, 2.5, -INF)],
    *[("cosformer_length", v, r"cosformer_length must be a finite number in \(0, inf\)") for v in (NAN, INF, 0.0, -5.0)],
    ("ssa_b_init", "1.0", r"ssa_b_init must be a number .* got '1.0' \(str\)"),
    ("ssa_n_init", True, r"ssa_n_init must be a number .* got True \(bool\)"),
    ("ssa_n_init", None, r"ssa_n_init must be a number .* got None"),
    ("ssa_learn_b", "yes", "ssa_learn_b must be true or false, got 'yes'"),
    ("temperature_learnable", 1, "temperature_learnable must be true or false"),
    ("scoring_granularity", "heads", r"scoring_granularity must be one of \('head', 'layer'\), got 'heads'; did you mean 'head'\?"),
    ("scoring_parametrization", "softpluss", "did you mean 'softplus'"),
    # the names of configs saved before the rename are still read, and checked under the new name
    ("ssa_granularity", "heads", r"scoring_granularity must be one of \('head', 'layer'\), got 'heads'"),
    ("ssa_parametrization", "softpluss", "scoring_parametrization .*did you mean 'softplus'"),
    ("attention_scoring", "sssa", "unknown scoring function 'sssa'; did you mean 'ssa'"),
    ("attention_scoring", "entmax-15", "did you mean 'entmax15'"),
    ("attention_scoring", [], "empty list"),
    ("attention_scoring", ["ssa", "sofmax"], "unknown scoring function 'sofmax'; did you mean 'softmax'"),
    ("attention_scoring", ["ssa"], "one name per head"),
]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("field,value,message", BAD_FIELDS, ids=lambda x: repr(x)[:30])
def test_bad_scoring_field_is_refused_at_config_time(family, field, value, message):
    with pytest.raises(ValueError, match=message):
        family(**TINY, **{field: value})


@pytest.mark.parametrize("field,value,message", [c for c in BAD_FIELDS if c[0] != "attention_scoring"], ids=lambda x: repr(x)[:30])
def test_scoring_options_refuse_the_same_values(field, value, message):
    # the remote-code unit and the functional layer check through the same declarations
    with pytest.raises(ValueError, match=message):
        validate_settings(resolve_settings(**{field: value}))


FIELD_SCORING = {"ssa_b_init": "ssa", "ssa_n_init": "ssa", "entmax_alpha_init": "entmax_alpha",
                 "temperature_init": "temperature", "cosformer_length": "cosformer"}


@pytest.mark.parametrize(
    "field,value",
    [("ssa_b_init", 1e-4), ("ssa_b_init", 1e4), ("ssa_n_init", 1.0), ("ssa_n_init", 1e4), ("entmax_alpha_init", 2.0),
     ("temperature_init", 1e-4), ("cosformer_length", 1e6), ("ssa_b_init", 3)],
)
def test_boundary_values_build_a_finite_model(field, value):
    from ssa_hf import SSALlamaForCausalLM

    scoring = FIELD_SCORING[field]
    model = SSALlamaForCausalLM(SSALlamaConfig(**TINY, attention_scoring=scoring, **{field: value}))
    values = [v for layer in model.model.layers for v in layer.self_attn.scoring().values()]
    assert values, f"{scoring} has parameters"
    assert all(bool(v.isfinite().all()) for v in values)


def test_a_field_set_after_construction_is_checked_when_the_model_is_built():
    from ssa_hf import SSALlamaForCausalLM

    config = SSALlamaConfig(**TINY)
    config.ssa_n_init = math.nan
    with pytest.raises(ValueError, match="ssa_n_init must be a finite number"):
        SSALlamaForCausalLM(config)


def test_preset_override_with_a_bad_value_names_the_field():
    with pytest.raises(ValueError, match="ssa_b_init must be a finite number"):
        load_model_config("tiny_llama", ssa_b_init=float("nan"))


@pytest.mark.parametrize("name,suggestion", [("tiny_lama", "tiny_llama"), ("decoder_114", "decoder_114m"), ("babybert", "babyberta")])
def test_unknown_preset_suggests_the_closest(name, suggestion):
    with pytest.raises(ValueError, match=f"unknown model preset '{name}'; did you mean '{suggestion}'"):
        load_preset(name)
