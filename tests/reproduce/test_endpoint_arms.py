"""An endpoint that declares its own arms is computed from those arms' runs (the BabyBERTa SSA-2 arm compared with
softmax), an endpoint that declares none compares the experiment's treatment and control, and an arm that is not
among the experiment's arms is refused when the config is read. Made-up per-seed Zorro figures (fast)."""

from __future__ import annotations

import pytest

from ssa_hf.options import ConfigError
from ssa_hf.reproduce import config_from_dict, load_config, scale_config_path
from ssa_hf.reproduce.claims import lm_claims

PARADIGMS = ("binding-principle_a", "quantifiers-superlative")
# per arm, per seed: the accuracy (0-1) of every paradigm; SSA-2 well above SSA-1.5, SSA-1.5 just above softmax
ACCURACY = {"softmax": [0.60, 0.61, 0.62, 0.63], "ssa": [0.61, 0.62, 0.62, 0.64], "ssa2": [0.70, 0.72, 0.71, 0.74]}


def _config(secondary: list[dict]):
    return config_from_dict({
        "scale": "tiny", "masked": {
            "pretrain": "unused.yaml",
            "arms": {"softmax": {}, "ssa": {}, "ssa2": {"model": {"overrides": {"ssa_n_init": 2.0}}}},
            "seeds": {"confirmatory": [0, 1, 2, 3]},
            "claims": {"zorro": {"primary": {"metric": "zorro_mean", "direction": "higher", "test": "t"},
                                 "secondary": secondary}}}})


def _results() -> list[dict]:
    return [{"kind": "masked", "arm": arm, "seed": seed,
             "evaluations": {"zorro": {"mean": acc, "paradigms": {p: acc for p in PARADIGMS}}}}
            for arm, values in ACCURACY.items() for seed, acc in enumerate(values)]


def _mean_difference(treatment: str, control: str) -> float:
    return 100 * sum(a - b for a, b in zip(ACCURACY[treatment], ACCURACY[control])) / len(ACCURACY[control])


def test_an_ssa2_endpoint_is_computed_from_the_ssa2_runs():
    config = _config([{"metric": "zorro_mean", "direction": "higher", "treatment": "ssa2", "control": "softmax"}])
    [claim] = lm_claims("masked", config.masked, _results(), config)
    primary, ssa2 = claim["rows"][0], claim["rows"][-1]
    # the primary: the experiment's treatment (SSA-1.5) minus softmax
    assert primary["comparison"]["mean_difference"] == pytest.approx(_mean_difference("ssa", "softmax"))
    # the declared secondary: SSA-2 minus softmax (the old code read SSA-1.5 minus softmax here: +0.75 points)
    assert ssa2["comparison"]["mean_difference"] == pytest.approx(_mean_difference("ssa2", "softmax"))
    assert ssa2["comparison"]["a"] == pytest.approx([100 * v for v in ACCURACY["ssa2"]])
    assert "ssa2 minus softmax" in ssa2["label"] and not ssa2["primary"] and ssa2["verdict"] is None


def test_an_endpoint_without_arms_compares_the_experiments_treatment_and_control():
    config = _config([{"metric": "zorro:binding-principle_a", "direction": "higher"}])
    assert (config.masked.claims["zorro"].secondary[0].treatment, config.masked.claims["zorro"].secondary[0].control) \
        == ("ssa", "softmax")
    [claim] = lm_claims("masked", config.masked, _results(), config)
    assert claim["rows"][-1]["comparison"]["mean_difference"] == pytest.approx(_mean_difference("ssa", "softmax"))


def test_an_endpoint_arm_missing_from_the_experiment_is_refused():
    with pytest.raises(ConfigError, match="'ssa3'.*not among arms"):
        _config([{"metric": "zorro_mean", "direction": "higher", "treatment": "ssa3"}])


def test_the_paper_config_declares_ssa2_against_softmax():
    config = load_config(scale_config_path("paper"))
    arms = {(e.treatment, e.control) for e in config.masked.claims["zorro"].secondary}
    assert ("ssa2", "softmax") in arms and "ssa2" in config.masked.arms
    assert [e.best_of for e in config.masked.claims["zorro"].secondary if e.best_of] == [["ssa", "ssa2"]]


def test_the_best_ssa_per_paradigm_takes_each_paradigms_better_arm():
    config = _config([{"metric": "zorro_mean", "direction": "higher", "best_of": ["ssa", "ssa2"]}])
    results = _results()
    for r in results:  # SSA-1.5 is the better arm on quantifiers-superlative, SSA-2 on binding-principle_a
        if r["arm"] == "ssa":
            r["evaluations"]["zorro"]["paradigms"]["quantifiers-superlative"] = 0.90
    [claim] = lm_claims("masked", config.masked, results, config)
    row = claim["rows"][-1]
    best = [100 * (v + 0.90) / 2 for v in ACCURACY["ssa2"]]
    assert row["comparison"]["a"] == pytest.approx(best)
    assert row["comparison"]["b"] == pytest.approx([100 * v for v in ACCURACY["softmax"]])
    assert "ssa in 1, ssa2 in 1 of 2" in row["label"] and row["verdict"] is None and not row["primary"]


@pytest.mark.parametrize("endpoint, message", [
    ({"primary": True}, "cannot decide a verdict"),
    ({"treatment": "ssa"}, "either treatment or best_of"),
    ({"best_of": ["ssa", "softmax"]}, "control 'softmax' cannot be among them"),
    ({"best_of": ["ssa"]}, "two or more distinct arms"),
    ({"metric": "zorro:binding-principle_a"}, "only for the masked experiment's zorro_mean"),
])
def test_a_best_of_endpoint_is_exploratory_and_well_formed(endpoint, message):
    spec = {"metric": "zorro_mean", "direction": "higher", "best_of": ["ssa", "ssa2"]}
    primary = endpoint.pop("primary", False)
    spec.update(endpoint)
    data = {"scale": "tiny", "masked": {
        "pretrain": "unused.yaml", "arms": {"softmax": {}, "ssa": {}, "ssa2": {}}, "seeds": {"confirmatory": [0, 1]},
        "claims": {"zorro": {"primary": spec if primary else {"metric": "zorro_mean", "direction": "higher"},
                             "secondary": [] if primary else [spec]}}}}
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)
