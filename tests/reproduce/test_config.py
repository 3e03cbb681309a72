"""The reproduce configs: the shipped scales load, every claim declares its primary endpoint, bad values fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssa_hf.reproduce import config_from_dict, load_config, plan, scale_config_path
from ssa_hf.reproduce.pipeline import icl_config
from ssa_hf.options import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_shipped_scales_load_and_declare_every_primary(scale):
    config = load_config(scale_config_path(scale))
    assert config.scale == scale
    assert set(config.icl) == {"every", "some", "linear"}
    for experiment in config.icl.values():
        assert experiment.config["stats"]["primary"] and experiment.direction == "lower"
        assert len(icl_config(experiment, config).seeds) >= 10  # 5 paired seeds cannot reach p < 0.05
    assert set(config.masked.primary) == {"zorro"} and set(config.causal.primary) == {"perplexity", "lm_eval"}
    assert len(config.masked.seeds) >= 3 and len(config.causal.seeds) >= 3
    lines = plan(config)
    assert any(line.startswith("icl every") for line in lines) and any("causal claim lm_eval" in line for line in lines)


def test_the_plan_reads_as_written():
    """'1 seeds' and 'preset babyberta , 160000 steps' (no overrides) in the plan; the help's time is the docs'."""
    config = load_config(scale_config_path("paper"))
    config.icl["every"].config["seeds"] = [0]
    lines = plan(config)
    assert any("x 1 seed (" in line for line in lines) and not any(" , " in line for line in lines)
    from ssa_hf.commands.reproduce import SUMMARY

    assert "37 min" in SUMMARY and "37 min" in (REPO / "docs" / "reproduce.md").read_text()


def test_the_every_experiment_has_the_temperature_matched_control():
    config = load_config(scale_config_path("cpu"))
    assert "temperature" in icl_config(config.icl["every"], config).attention_scoring


@pytest.mark.parametrize("change,message", [
    ({"scale": "huge"}, "scale: must be one of"),
    ({"icl": {"every": {"config": {"preset": "quick"}}}}, "declare the claim's primary endpoint"),
    ({"icl": {"every": {"config": {"stats": {"primary": {"task": "every"}}}, "direction": "down"}}}, "direction"),
    ({"masked": {"pretrain": "x.yaml", "arms": {"softmax": {}}, "primary": {"zorro": {"metric": "zorro_mean"}}}},
     "arm 'ssa'"),
    ({"masked": {"pretrain": "x.yaml", "arms": {"softmax": {}, "ssa": {}}, "primary": {}}}, "masked.primary.zorro"),
    ({"causal": {"pretrain": "x.yaml", "arms": {"softmax": {}, "ssa": {}},
                 "primary": {"perplexity": {"metric": "nll_in"}, "lm_eval": {"metric": "lm_eval_mean", "interval": "z"}}}},
     "interval"),
    ({"workers": 0}, "workers"),
    ({"colour": "red"}, "unknown config key 'colour'"),
])
def test_bad_configs_name_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(change)


def test_cli_plan_of_the_paper_scale_runs_nothing(capsys):
    from ssa_hf.cli import main

    assert main(["reproduce", "--scale", "paper"]) == 0
    out = capsys.readouterr().out
    assert "plan of" in out and "--execute" in out and "500000 steps" in out
