"""The reproduce configs: the shipped scales load, every claim declares its primary endpoint and test,
confirmatory and exploratory seeds never overlap, bad values fail naming the key."""

from __future__ import annotations

import pytest

from ssa_hf.options import ConfigError
from ssa_hf.reproduce import config_from_dict, load_config, plan, scale_config_path
from ssa_hf.reproduce.pipeline import icl_config


@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_shipped_scales_load_and_declare_every_primary(scale):
    config = load_config(scale_config_path(scale))
    assert config.scale == scale and config.multiplicity in ("none", "holm")
    assert {"every", "some", "linear"} <= set(config.icl)
    for name, experiment in config.icl.items():
        assert experiment.claims and all(c.primary.test in ("wilcoxon", "t", "sign") for c in experiment.claims.values())
        assert len(experiment.seeds.confirmatory) >= 10  # 5 paired seeds cannot reach p < 0.05
        assert icl_config(experiment, config).seeds == experiment.seeds.confirmatory + experiment.seeds.exploratory
    # magnitude and length shift are separate claims, each with its own primary endpoint
    every = config.icl["every"].claims
    assert every["magnitude"].primary.sweep == "sigma_sweep" and every["length"].primary.sweep == "length_sweep"
    assert set(config.masked.claims) == {"zorro"} and set(config.causal.claims) == {"perplexity", "lm_eval"}
    assert len(config.masked.seeds.confirmatory) >= 6 and len(config.causal.seeds.confirmatory) >= 6
    for claim in [c for e in config.icl.values() for c in e.claims.values()] + list(config.masked.claims.values()):
        for arms in {(e.treatment, e.control) for e in claim.secondary}:  # per comparison (ssa vs softmax, ssa2 ...)
            # a few declared secondary endpoints, not every cell
            assert len([e for e in claim.secondary if (e.treatment, e.control) == arms]) <= 4
    lines = plan(config)
    assert any(line.startswith("icl every") for line in lines) and any("causal claim lm_eval" in line for line in lines)


def test_the_plan_reads_as_written():
    """'preset babyberta , 160000 steps' (no overrides) in the plan; the help's time points to the docs'."""
    lines = plan(load_config(scale_config_path("paper")))
    assert not any(" , " in line for line in lines)
    from ssa_hf.commands.reproduce import SUMMARY

    assert "docs/reproduce.md" in SUMMARY


@pytest.mark.parametrize("scale", ["cpu", "paper"])
def test_confirmatory_and_exploratory_seeds_never_overlap(scale):
    config = load_config(scale_config_path(scale))
    for _, experiment in config.experiments():
        assert not set(experiment.seeds.confirmatory) & set(experiment.seeds.exploratory)


def test_the_cpu_scale_declares_what_the_audit_asked_for():
    config = load_config(scale_config_path("cpu"))
    every = config.icl["every"]
    # seeds 0-9 were published before the endpoint was chosen: exploratory; fresh seeds confirm
    assert every.seeds.exploratory == list(range(10)) and every.seeds.confirmatory == list(range(10, 30))
    assert "temperature" in icl_config(every, config).attention_scoring
    assert icl_config(config.icl["every_gpt2"], config).model.backbone == "gpt2"
    linear = config.icl["linear"]
    assert icl_config(linear, config).train.steps == 1500 and linear.claims["shift"].primary.metric == "log_mse_ratio"
    overrides = config.causal.overrides["model"]["overrides"]
    assert (overrides["scoring_granularity"], overrides["scoring_parametrization"], overrides["ssa_b_init"],
            overrides["ssa_learn_b"], overrides["ssa_n_init"], overrides["mlp_type"], overrides["norm_type"]) == (
        "layer", "raw", 0.8, False, 1.5, "relu2", "layernorm1p")
    assert every.claims["magnitude"].power.sd > 0


SEEDS = {"confirmatory": [0, 1]}
PRIMARY = {"claims": {"magnitude": {"primary": {"metric": "sequence_error"}}}}


@pytest.mark.parametrize("change,message", [
    ({"scale": "huge"}, "scale: must be one of"),
    ({"icl": {"every": {"config": {"preset": "quick"}, "seeds": SEEDS}}}, "declare at least one claim"),
    ({"icl": {"every": {"config": {"preset": "quick"}, **PRIMARY}}}, "seeds: give"),
    ({"icl": {"every": {"config": {"seeds": [0]}, "seeds": SEEDS, **PRIMARY}}}, "give the seeds as icl.every.seeds"),
    ({"icl": {"every": {"config": {}, "seeds": {"confirmatory": [3, 4], "exploratory": [4, 5]}, **PRIMARY}}},
     r"seeds \[4\] are both confirmatory and exploratory"),
    ({"icl": {"every": {"config": {}, "seeds": {"confirmatory": [3]}, **PRIMARY}}}, "at least 2 confirmatory seeds"),
    ({"icl": {"every": {"config": {}, "seeds": SEEDS, "claims": {"m": {"primary": {"metric": "x", "test": "z"}}}}}},
     "test: must be one of"),
    ({"icl": {"every": {"config": {}, "seeds": SEEDS, "claims": {"m": {"primary": {"metric": "x", "direction": "down"}}}}}},
     "direction"),
    ({"masked": {"pretrain": "x.yaml", "arms": {"softmax": {}}, "seeds": SEEDS,
                 "claims": {"zorro": {"primary": {"metric": "zorro_mean"}}}}}, "arm 'ssa'"),
    ({"masked": {"pretrain": "x.yaml", "arms": {"softmax": {}, "ssa": {}}, "seeds": SEEDS, "claims": {}}},
     "masked.claims.zorro"),
    ({"causal": {"pretrain": "x.yaml", "arms": {"softmax": {}, "ssa": {}}, "seeds": SEEDS,
                 "claims": {"perplexity": {"primary": {"metric": "nll_in"}},
                            "lm_eval": {"primary": {"metric": "lm_eval_mean", "interval": "z"}}}}}, "interval"),
    ({"multiplicity": "bonferroni"}, "multiplicity"),
    ({"workers": 0}, "workers"),
    ({"colour": "red"}, "unknown config key 'colour'"),
])
def test_bad_configs_name_the_key(change, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(change)


def test_cli_plan_of_the_paper_scale_runs_nothing(capsys):
    from ssa_hf.cli import main

    # offline (the tests), the paper scale's Hub data cannot be read: the plan says so, and the exit code too
    assert main(["reproduce", "--scale", "paper"]) in (0, 1)
    out = capsys.readouterr().out
    assert "plan of" in out and "--execute" in out and "500000 steps" in out
    assert "checked before any run:" in out and "record" in out


def _paper_data(root):
    """Every file the paper scale reads locally (made up): the rehearsal's data plus the full AO-CHILDES file."""
    from ssa_hf.reproduce.rehearsal import write_rehearsal_data

    data = write_rehearsal_data(root)
    (data / "aochildes" / "aochildes.txt").write_text((data / "aochildes" / "aochildes.train").read_text())
    return data


@pytest.fixture()
def online(monkeypatch):
    """As if the Hub were reachable (nothing is downloaded: only what the checks would refuse offline)."""
    from ssa_hf.evaluation import lm_tasks
    from ssa_hf.reproduce import checks

    monkeypatch.setattr(checks, "_hub_offline", lambda: False)
    monkeypatch.setattr(lm_tasks, "hub_is_offline", lambda: False)


def test_the_paper_config_validates_under_the_installed_versions(tmp_path, online):
    """Every training config, evaluation setting and lm-eval task of the paper scale loads here (ReCoRD too,
    through this package's own scorer), before anything runs."""
    from ssa_hf.reproduce.checks import preflight
    from ssa_hf.reproduce.runs import data_dir_env

    config = load_config(scale_config_path("paper"))
    config.launch["num_processes"] = 2  # (null: every GPU; none here)
    assert set(config.masked.arms) == {"softmax", "ssa", "ssa2"}  # BabyBERTa's SSA-2 runs beside SSA-1.5
    with data_dir_env(str(_paper_data(tmp_path / "data"))):
        lines, problems = preflight(config)
    assert problems == []
    text = "\n".join(lines)
    for expected in ("8 tasks load their code", "record (local", "ssa_hf.evaluation.record_task", "aochildes.txt",
                     "HuggingFaceFW/fineweb-edu", "wikimedia/wikipedia", "all 23 paradigms", "3 arms load"):
        assert expected in text, expected


def test_a_task_that_cannot_run_stops_the_call_before_any_run(tmp_path, online, monkeypatch):
    """The stock ReCoRD (whose scorer imports what transformers 5 removed) fails validation, and run_reproduce
    stops before its first step: no run folder is made."""
    import dataclasses

    from ssa_hf.evaluation import lm_tasks
    from ssa_hf.reproduce import run_reproduce

    if _has_squad_metrics():
        pytest.skip("this transformers still has squad_metrics: the stock ReCoRD loads")
    stock = dataclasses.replace(lm_tasks.LOCAL_TASKS["record"], definition=None)
    monkeypatch.setitem(lm_tasks.LOCAL_TASKS, "record", stock)
    config = load_config(scale_config_path("paper"))
    config.launch["num_processes"] = 2
    config.data_dir = str(_paper_data(tmp_path / "data"))
    with pytest.raises(ConfigError, match=r"(?s)nothing was started.*'record' cannot load its code.*transformers.data.metrics"):
        run_reproduce(config, tmp_path / "out")
    assert not any((tmp_path / "out" / kind).exists() for kind in ("icl", "masked", "causal"))


def _has_squad_metrics() -> bool:
    try:
        import transformers.data.metrics.squad_metrics  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("change,message", [
    ({"causal": {"evaluation": {"lm_eval": {"tasks": ["arc_easy", "lambada"]}}}}, r"lm-eval tasks \['lambada'\]"),
    ({"causal": {"evaluation": {"lm_eval": {"tasks": ["arc_easy"], "limit": -1}}}}, "limit must be > 0"),
    ({"causal": {"evaluation": {"perplexity": {"out_of_distribution": "/nowhere/wiki.txt"}}}}, "does not exist"),
    ({"masked": {"evaluation": {"zorro": {"zorro_dir": "/nowhere/zorro"}}}}, "Zorro"),
    ({"masked": {"overrides": {"max_steps": 0}}}, "masked arm softmax: its pretraining config does not load"),
    ({"launch": {"config_file": "configs/accelerate/none.yaml"}}, "launch.config_file"),
    ({"launch": {"config_file": "configs/accelerate/cpu_2proc.yaml", "num_processes": 3},
      "causal": {"overrides": {"global_batch_size": 8}}}, "global_batch_size 8 is not a multiple"),
])
def test_settings_that_cannot_run_are_named_before_any_run(tmp_path, online, change, message):
    from ssa_hf.options import deep_merge
    from ssa_hf.reproduce.checks import preflight
    from ssa_hf.reproduce.config import config_to_dict
    from ssa_hf.reproduce.rehearsal import rehearsal_config, write_rehearsal_data
    from ssa_hf.reproduce.runs import data_dir_env

    data = write_rehearsal_data(tmp_path / "data")
    values = deep_merge(config_to_dict(rehearsal_config(load_config(scale_config_path("paper")), data, "tiny")), change)
    with data_dir_env(str(data)), pytest.raises(ConfigError, match=message):
        preflight(config_from_dict(values))
