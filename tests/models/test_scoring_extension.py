"""Adding a parametrised scoring function touches only its entry: a throwaway variant registered here is picked up
by the config (fields, validation, saving), `ScoringParameters`, the model, the model card's fields, the docs and
FlexAttention's score_mod, with no other edit. Also: the renamed settings (`scoring_granularity`,
`scoring_parametrization`) still load from configs saved under their old names."""

import json

import pytest
import torch

from ssa_hf import SSALlamaConfig, SSALlamaForCausalLM
from ssa_hf.models.attention import scored_attention, supported_backends
from ssa_hf.models.flex import flex_available, make_score_mod
from ssa_hf.models.parameters import PARAMETER_LIMITS, ParameterSpec
from ssa_hf.models.scoring import (
    ScoringFunction,
    _ref_rows,
    get_scoring_function,
    register_scoring_function,
    unregister_scoring_function,
)
from ssa_hf.models.settings import ScoringParameters, card_fields, setting_fields, settings_doc

TINY = dict(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            max_position_embeddings=64)


def _scaled_row(x, p):
    e = torch.exp(p["c"] * x - (p["c"] * x).max())
    return e / e.sum()


# the whole extension: one entry with its declared parameter
SCALE_C = ParameterSpec("c", "scaled_c_init", "Scale c of `scaled` (softmax(c x)), in [1e-4, 1e4].", default=0.7,
                        low=PARAMETER_LIMITS[0], high=PARAMETER_LIMITS[1], learn_field="scaled_c_learnable",
                        learn_default=True, learn_doc="Whether c is trained.")
SCALED = ScoringFunction("scaled", "softmax(c x), c learned", _ref_rows(_scaled_row), parameters=(SCALE_C,),
                         logits=lambda scores, p, log_n: scores * p["c"])


@pytest.fixture
def scaled():
    register_scoring_function(SCALED)
    yield SCALED
    unregister_scoring_function("scaled")
    assert "scaled" not in {name for name, *_ in setting_fields()}


def test_registry_refuses_a_second_entry_with_the_same_name(scaled):
    with pytest.raises(ValueError, match="already registered"):
        register_scoring_function(SCALED)


def test_config_fields_validation_and_docs_follow_the_declaration(scaled):
    fields = {name: default for name, _, default, _ in setting_fields()}
    assert fields["scaled_c_init"] == 0.7 and fields["scaled_c_learnable"] is True
    assert "scaled_c_init (`float`, *optional*, defaults to 0.7)" in settings_doc()
    config = SSALlamaConfig(**TINY, attention_scoring="scaled", scaled_c_init=0.3)
    assert config.scoring_settings()["scaled_c_init"] == 0.3
    assert SSALlamaConfig.from_dict(config.to_dict()).scaled_c_init == 0.3  # saved and loaded with the config
    with pytest.raises(ValueError, match=r"scaled_c_init must be a finite number in \[0.0001, 10000\]"):
        SSALlamaConfig(**TINY, attention_scoring="scaled", scaled_c_init=-1.0)
    with pytest.raises(ValueError, match="scaled_c_learnable must be true or false"):
        SSALlamaConfig(**TINY, attention_scoring="scaled", scaled_c_learnable="yes")
    assert card_fields(config) == ["scoring_granularity", "scaled_c_init", "scaled_c_learnable"]


def test_parameters_and_model_follow_the_declaration(scaled):
    module = ScoringParameters("scaled", 2)
    torch.testing.assert_close(module()["c"], torch.full((2,), 0.7))
    assert sum(p.numel() for p in module.parameters()) == 2  # learnable by default, one per head
    fixed = ScoringParameters("scaled", 2, scoring_granularity="layer", scaled_c_learnable=False, scaled_c_init=2.0)
    assert list(fixed.parameters()) == [] and fixed()["c"].tolist() == [2.0, 2.0]
    config = SSALlamaConfig(**TINY, attention_scoring="scaled", scaled_c_init=0.3)
    model = SSALlamaForCausalLM(config).eval()
    values = model.scoring_parameters()
    assert [v["c"] for v in values.values()] == [pytest.approx([0.3, 0.3])]
    logits = model(input_ids=torch.randint(0, 32, (1, 6))).logits
    assert torch.isfinite(logits).all()


def test_eager_and_flex_run_the_declared_logits(scaled):
    assert supported_backends("scaled", needs_grad=False)[:2] == ["eager", "flex"] or not flex_available()
    q, k, v = (torch.randn(1, 2, 5, 16) for _ in range(3))
    c = torch.tensor([0.5, 2.0])
    eager = scored_attention(q, k, v, "scaled", {"c": c}, is_causal=True, backend="eager")
    reference = torch.softmax((q @ k.transpose(-1, -2) / 4.0 * c.view(1, 2, 1, 1)).masked_fill(
        ~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")), dim=-1) @ v
    torch.testing.assert_close(eager, reference)
    score_mod = make_score_mod(get_scoring_function("scaled"), {"c": c}, None, None)
    assert float(score_mod(torch.tensor(3.0), 0, torch.tensor(1), 0, 0)) == pytest.approx(6.0)
    if flex_available():
        with torch.no_grad():
            flex = scored_attention(q, k, v, "scaled", {"c": c}, is_causal=True, backend="flex")
        torch.testing.assert_close(flex, reference, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("old,new,value", [("ssa_granularity", "scoring_granularity", "layer"),
                                           ("ssa_parametrization", "scoring_parametrization", "exp")])
def test_old_setting_names_still_load(tmp_path, old, new, value):
    model = SSALlamaForCausalLM(SSALlamaConfig(**TINY, **{new: value}))
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert new in saved and old not in saved  # saved under the canonical name
    saved[old] = saved.pop(new)  # a checkpoint written before the rename
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = SSALlamaForCausalLM.from_pretrained(tmp_path)
    assert getattr(loaded.config, new) == value and getattr(loaded.config, old) == value
    assert old not in loaded.config.to_dict()
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
