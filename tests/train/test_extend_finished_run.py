"""Training a finished run further: `--resume` with a longer decaying schedule is refused with the route that works
(`model.pretrained: RUN/final` in a new output_dir), and that route runs with the same config and no other override."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ssa_hf.options import ConfigError
from ssa_hf.train import load_config, pretrain

from .conftest import tiny_config


def test_extending_a_finished_run_names_model_pretrained_and_that_route_works(corpora, tmp_path):
    run_dir = tmp_path / "run"
    # the run's config as a user has it: a scoring function and shape overrides, as configs/pretrain/tiny_*.yaml
    shape = {"attention_scoring": "ssa", "overrides": {"hidden_size": 32, "num_attention_heads": 2,
                                                         "num_key_value_heads": 1, "intermediate_size": 64}}
    first = pretrain(tiny_config("causal", corpora, run_dir, model=shape, max_steps=3, eval_steps=0, save_steps=3))
    final = Path(first.final_dir)
    assert final == run_dir / "final"

    with pytest.raises(ConfigError) as refused:
        pretrain(tiny_config("causal", corpora, run_dir, model=shape, max_steps=6, eval_steps=0, save_steps=3,
                             resume="latest"))
    assert f"--model.pretrained {final} --output_dir NEW_DIR" in str(refused.value)

    # the route it names, with nothing else changed in the run's config
    values = tiny_config("causal", corpora, tmp_path / "more", model=shape, max_steps=3, eval_steps=0,
                         save_steps=3).to_dict()
    values["model"]["pretrained"] = str(final)
    more = pretrain(load_config(None, values))
    metrics = json.loads((Path(more.final_dir) / "metrics.json").read_text())
    assert metrics["steps"] == 3 and metrics.get("uptrained_from")
    config = json.loads((Path(more.final_dir) / "config.json").read_text())
    assert config["attention_scoring"] == "ssa" and config["hidden_size"] == 32
    # the card's training paragraph is generated from this run's record
    card = (Path(more.final_dir) / "README.md").read_text()
    summary = next(line for line in card.splitlines() if line.startswith("How it was trained:"))
    assert summary.startswith("How it was trained: with ssa-hf pretrain (accelerate), continued from the weights of "
                              "model.pretrained (the weights it started from: final"), summary
    assert ", for 3 steps (" in summary, summary
