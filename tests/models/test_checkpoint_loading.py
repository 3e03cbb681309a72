"""Loading checkpoints whose scoring parameters are missing or damaged (issue 14): missing ones start at their
configured values (never uninitialised memory), and non-finite or out-of-range ones are refused, naming the layer."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from .tiny import FAMILIES_UNDER_TEST, auto_class, build
MIXTURE = ["ssa", "temperature", "ssa", "softmax"]


def _rewrite_weights(folder, edit):
    weights = load_file(folder / "model.safetensors")
    save_file(edit(weights), folder / "model.safetensors", metadata={"format": "pt"})


def _expected_initial(model):
    """What every scoring parameter must be after a missing-key load: its configured value, per head."""
    config = model.config
    init = {"b": config.ssa_b_init, "n": config.ssa_n_init, "t": config.temperature_init}
    return {layer: {name: [init[name]] * len(values) for name, values in params.items()}
            for layer, params in model.scoring_parameters().items()}


@pytest.mark.parametrize("trust_remote_code", [False, True], ids=["installed", "remote-code"])
@pytest.mark.parametrize("scoring", ["ssa", MIXTURE], ids=["ssa", "mixture"])
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_missing_scoring_parameters_start_at_their_configured_values(family, scoring, trust_remote_code, tmp_path):
    model = build(family, scoring, ssa_b_init=0.7, ssa_n_init=2.5, temperature_init=1.3)
    with torch.no_grad():  # trained values, so that a stale copy could not pass for the initial ones
        for name, p in model.named_parameters():
            if ".scoring." in name:
                p.add_(0.9)
    model.save_pretrained(tmp_path)
    _rewrite_weights(tmp_path, lambda w: {k: v for k, v in w.items() if ".scoring." not in k})
    loaded = auto_class(family).from_pretrained(tmp_path, trust_remote_code=trust_remote_code)
    values = loaded.scoring_parameters()
    assert values and values.keys() == model.scoring_parameters().keys()
    expected = _expected_initial(loaded)
    for layer, params in values.items():
        for name, got in params.items():
            assert got == pytest.approx(expected[layer][name], rel=1e-5), f"{layer}.{name}"
    # and the other weights were loaded, not re-initialised
    assert torch.equal(loaded.get_input_embeddings().weight, model.get_input_embeddings().weight)


BAD_RAW = [(float("nan"), "not finite"), (float("inf"), "not finite"), (-1e4, "must be > 0")]


@pytest.mark.parametrize("value,message", BAD_RAW, ids=["nan", "inf", "underflow-to-zero"])
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_non_finite_or_out_of_range_learnable_b_is_refused_naming_the_layer(family, value, message, tmp_path):
    build(family, "ssa").save_pretrained(tmp_path)

    def damage(weights):
        key = next(k for k in sorted(weights) if k.endswith("scoring.params.b.raw") and ".1." in k)
        weights[key][2] = value  # softplus(-1e4) = 0: b must stay > 0
        return weights

    _rewrite_weights(tmp_path, damage)
    with pytest.raises(ValueError, match=rf"(layers?|h)\.1\..*scoring\.b: {message}"):
        auto_class(family).from_pretrained(tmp_path)


@pytest.mark.parametrize("name,value,message", [("b", -0.5, "must be > 0"), ("n", 0.5, "must be >= 1"),
                                                ("n", math.inf, "not finite")])
def test_fixed_parameters_out_of_range_are_refused(name, value, message, tmp_path):
    build("llama", "ssa", ssa_learn_b=False, ssa_learn_n=False).save_pretrained(tmp_path)

    def damage(weights):
        key = next(k for k in sorted(weights) if k.endswith(f"scoring.params.{name}.value"))
        weights[key][0] = value
        return weights

    _rewrite_weights(tmp_path, damage)
    with pytest.raises(ValueError, match=rf"model\.layers\.0\.self_attn\.scoring\.{name}: {message}"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_exp_parametrisation_allows_n_below_one(tmp_path):
    """The authors' exp parametrisation does not enforce n >= 1 (docs): such a checkpoint loads."""
    model = build("llama", "ssa", scoring_parametrization="exp")
    with torch.no_grad():
        model.model.layers[0].self_attn.scoring.params["n"].raw.fill_(-0.2)  # n = 0.82
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.scoring_parameters()["model.layers.0.self_attn.scoring"]["n"][0] == pytest.approx(math.exp(-0.2))


def test_validation_is_callable_on_a_model_in_memory():
    model = build("bert", "ssa")
    model.validate_scoring_parameters()
    with torch.no_grad():
        model.roberta.encoder.layer[0].attention.self.scoring.params["n"].raw.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"roberta\.encoder\.layer\.0\.attention\.self\.scoring\.n: not finite"):
        model.validate_scoring_parameters()


def _trained(family, scoring="ssa", **settings):
    """A model whose scoring parameters moved away from their initial values (distinct per head)."""
    model = build(family, scoring, **settings)
    with torch.no_grad():
        for path, values in model.scoring_parameters().items():
            module = model.get_submodule(path)
            for name, param in (module.params.items() if hasattr(module, "params") else ()):
                param.set_value(torch.tensor(values[name]).double() * 1.3 + 0.1 * torch.arange(len(values[name])))
    return model


# loads asking for another storage of the scoring parameters than the checkpoint's
STORAGE_CHANGES = {
    "softplus -> exp": ({}, {"scoring_parametrization": "exp"}),
    "softplus -> raw": ({}, {"scoring_parametrization": "raw"}),
    "exp -> softplus": ({"scoring_parametrization": "exp"}, {"scoring_parametrization": "softplus"}),
    "learned b -> fixed": ({}, {"ssa_learn_b": False}),
    "fixed b -> learned": ({"ssa_learn_b": False}, {"ssa_learn_b": True}),
}


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
@pytest.mark.parametrize("change", list(STORAGE_CHANGES))
def test_saved_scoring_values_survive_a_load_in_another_storage(family, change, tmp_path):
    saved_settings, load_settings = STORAGE_CHANGES[change]
    model = _trained(family, **saved_settings)
    model.save_pretrained(tmp_path)
    loaded = auto_class(family).from_pretrained(tmp_path, **load_settings)
    got, want = loaded.scoring_parameters(), model.scoring_parameters()
    assert got.keys() == want.keys()
    for layer in want:
        for name in want[layer]:
            assert got[layer][name] == pytest.approx(want[layer][name], rel=1e-6), (layer, name)


def test_a_config_json_edited_to_fix_b_keeps_the_trained_b(tmp_path):
    import json

    model = _trained("llama")
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "ssa_learn_b": False}))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert not loaded.model.layers[0].self_attn.scoring.params["b"].learnable
    got = loaded.scoring_parameters()
    for layer, values in model.scoring_parameters().items():
        assert got[layer]["b"] == pytest.approx(values["b"], rel=1e-6) and got[layer]["n"] == values["n"]


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_scoring_tensors_without_a_place_are_refused(family, tmp_path):
    """An SSA checkpoint whose config.json was edited to softmax (or loaded as softmax) would run softmax over
    SSA weights with their b and n dropped."""
    import json

    _trained(family).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "attention_scoring": "softmax"}))
    with pytest.raises(ValueError, match="scoring parameters this model has no place for"):
        auto_class(family).from_pretrained(tmp_path)


def test_a_saved_value_the_new_storage_cannot_hold_is_refused(tmp_path):
    """exp does not enforce n >= 1; softplus cannot hold n = 0.82: refused rather than moved."""
    model = build("llama", "ssa", scoring_parametrization="exp")
    with torch.no_grad():
        model.model.layers[0].self_attn.scoring.params["n"].raw.fill_(-0.2)
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="saved as exp.*cannot be stored as softplus"):
        AutoModelForCausalLM.from_pretrained(tmp_path, scoring_parametrization="softplus")
