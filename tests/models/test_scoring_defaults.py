"""No scoring function defaults to a copy of another: temperature, entmax_alpha and sigmoid's bias."""

import math

import pytest
import torch

from ssa_hf import SSALlamaConfig
from ssa_hf.models.scoring import SCORING_FUNCTIONS
from ssa_hf.models.settings import ScoringParameters, default_settings, resolve_settings, validate_settings


def _weights(name, scores, params, mask=None):
    return SCORING_FUNCTIONS[name].weights(scores, mask, params)


def test_temperature_defaults_to_ssa_matched_value_not_one():
    t = ScoringParameters("temperature", 2)()["t"]
    torch.testing.assert_close(t, torch.full((2,), 2 / 3))
    # follows SSA's initial values: t = 1 / (n0 b0)
    torch.testing.assert_close(ScoringParameters("temperature", 2, ssa_b_init=2.0, ssa_n_init=1.5)()["t"], torch.full((2,), 1 / 3))
    # an explicit value wins
    torch.testing.assert_close(ScoringParameters("temperature", 2, temperature_init=0.25)()["t"], torch.full((2,), 0.25))
    # and the default is not softmax
    scores = torch.randn(1, 2, 3, 5) * 3
    assert (_weights("temperature", scores, ScoringParameters("temperature", 2)()) - _weights("softmax", scores, {})).abs().max() > 1e-2


def test_temperature_refuses_an_implicit_unit_temperature():
    with pytest.raises(ValueError, match="plain softmax: set temperature_init"):
        ScoringParameters("temperature", 2, ssa_b_init=1.0, ssa_n_init=1.0)
    ScoringParameters("temperature", 2, ssa_n_init=1.0, temperature_init=1.0)  # explicit: allowed


def test_model_config_default_temperature_is_matched():
    config = SSALlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                            attention_scoring="temperature", ssa_b_init=0.5, ssa_n_init=2.0)
    assert config.temperature_init is None
    settings = config.scoring_settings()
    assert 1 / (settings["ssa_n_init"] * settings["ssa_b_init"]) == pytest.approx(1.0)  # 1 / (2 * 0.5): refused below
    with pytest.raises(ValueError, match="temperature_init"):
        ScoringParameters("temperature", 2, config)


def test_entmax_alpha_has_no_default():
    assert default_settings()["entmax_alpha_init"] is None
    with pytest.raises(ValueError, match="needs entmax_alpha_init.*entmax15"):
        ScoringParameters("entmax_alpha", 2)
    params = ScoringParameters("entmax_alpha", 2, entmax_alpha_init=1.25)()
    torch.testing.assert_close(params["alpha"], torch.full((2,), 1.25))
    scores = torch.randn(1, 2, 3, 6) * 2
    assert (_weights("entmax_alpha", scores, params) - _weights("entmax15", scores, {})).abs().max() > 1e-3


def test_sigmoid_bias_uses_the_sequence_length_for_causal_rows():
    # zero scores, causal mask over 4 keys: every visible weight is sigmoid(-log 4) = 1/5, whatever the row's key count
    scores = torch.zeros(1, 1, 4, 4)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()[None, None]
    weights = _weights("sigmoid", scores, {}, causal)
    expected = torch.where(causal, torch.tensor(0.2), torch.tensor(0.0)).expand_as(weights)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(SCORING_FUNCTIONS["sigmoid"].reference(scores.double(), causal, {}), expected.double())
    # a fixed length (the models' sigmoid_length): sigmoid(-log 16) = 1/17 everywhere
    fixed = _weights("sigmoid", scores, {"length": torch.tensor([16.0])}, causal)
    torch.testing.assert_close(fixed[causal.expand_as(fixed)], torch.full((10,), 1 / 17))


def test_sigmoid_length_defaults_to_max_position_embeddings():
    config = SSALlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                            max_position_embeddings=64, attention_scoring="sigmoid")
    params = ScoringParameters("sigmoid", 2, config)
    torch.testing.assert_close(params()["length"], torch.full((2,), 64.0))
    assert list(params.parameters()) == [], "the length is fixed (a buffer)"
    assert ScoringParameters("sigmoid", 2, config, sigmoid_length=100.0).initial_values() == {"length": 100.0}
    assert ScoringParameters("sigmoid", 2).initial_values() == {}  # outside a model: the call's key count
    with pytest.raises(ValueError, match="sigmoid_length"):
        validate_settings(resolve_settings(sigmoid_length=0.5))
    assert math.isclose(1 / (1 + 64), float(_weights("sigmoid", torch.zeros(1, 2, 1, 3), params())[0, 0, 0, 0]), rel_tol=1e-6)
