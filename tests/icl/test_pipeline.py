"""The whole experiment on a tiny configuration: results.json, report.md and plots; presets and the CLI."""

import json
import zlib
from pathlib import Path

import pytest
import torch

from ssa_hf.icl import PRESETS, config_from_dict, load_config, preset, run_icl

REPO = Path(__file__).resolve().parents[2]


def test_pipeline_writes_results_report_and_plots(tmp_path, tiny_config):
    results = run_icl(tiny_config, tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["name"] for r in data["runs"]] == [
        "every-softmax-seed0", "every-softmax-seed1", "every-ssa-seed0", "every-ssa-seed1"
    ]
    run = data["runs"][0]
    assert run["config"]["model"]["attention_scoring"] == "softmax" and run["train"]["steps"] == 2
    assert set(run["eval"]) == {"sigma_sweep", "length_sweep", "in_distribution"}
    assert len(run["probe"]["attention"]) == 1 and len(run["probe"]["attention"][0]) == 2  # layers, heads
    summary = data["summary"]["every"]["ssa"]
    cell = summary["sigma_sweep"]["balanced"]["sequence_error"][1]
    assert cell["n"] == 2 and len(cell["values"]) == 2 and cell["low"] <= cell["mean"] <= cell["high"]
    assert data["baselines"]["every"]["majority"]["length_sweep"]["standard"]["sequence_error"][0]["n"] == 1
    report = (tmp_path / "report.md").read_text()
    for text in ("Error by sigma", "Error by prompt length", "balanced test set", "majority baseline",
                 "Single-large-value probe", "| softmax | ssa |"):
        assert text in report
    for name in ("every_error_vs_sigma", "every_error_vs_length", "every_error_per_position", "every_attention_probe"):
        png = tmp_path / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({name}.png)" in report
    # every axis says what it shows; the attention maps have a colour scale
    from ssa_hf.icl.report import _position_plot, _probe_plot
    from ssa_hf.reporting import pyplot

    probe_figure, position_figure = _probe_plot(results, "every", pyplot()), _position_plot(results, "every", pyplot())
    assert sum(ax.get_label() == "<colorbar>" for ax in probe_figure.axes) == 1
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in position_figure.axes + probe_figure.axes[:-1])
    # 2 training steps do not learn the rule, and the report says so
    assert results.failed_runs() and "failed:" in report
    # a second call reuses every finished run
    again = run_icl(tiny_config, tmp_path, progress=False, plots=False)
    assert again.runs == results.runs


def test_linear_task_pipeline(tmp_path, tiny_config):
    tiny_config.tasks = ["linear"]  # (the old name of linear_regression)
    tiny_config.attention_scoring = ["ssa"]
    first = run_icl(tiny_config, tmp_path, progress=False)
    data = json.loads((tmp_path / "results.json").read_text())
    grid = data["summary"]["linear_regression"]["ssa"]["grid"]
    assert len(grid["mse"]) == 2 and len(grid["mse"][0]) == 2
    assert set(data["baselines"]["linear_regression"]) == {"zero", "least_squares"}
    assert (tmp_path / "linear_regression_mse_heatmap.png").is_file()
    assert "MSE, ssa" in (tmp_path / "report.md").read_text()
    # a run folder written before the renames (old folder name, `scoring` keys) is still resumed and reused
    runs = tmp_path / "runs"
    (runs / "linear_regression-ssa-seed0").rename(runs / "linear-ssa-seed0")
    for path in [runs / "linear-ssa-seed0" / "result.json", runs / "linear-ssa-seed0" / "checkpoint" / "run_spec.json"]:
        text = path.read_text().replace('"attention_scoring"', '"scoring"').replace('"linear_regression"', '"linear"')
        path.write_text(text)
    from ssa_hf.train.checkpoint import write_manifest

    write_manifest(runs / "linear-ssa-seed0" / "checkpoint", step=2)
    again = run_icl(tiny_config, tmp_path, progress=False, plots=False)
    assert [r["eval"] for r in again.runs] == [r["eval"] for r in first.runs]
    assert not (runs / "linear_regression-ssa-seed0").exists()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_yaml_presets_match(name):
    assert load_config(REPO / "configs" / "icl" / f"{name}.yaml").to_dict() == preset(name).to_dict()


def test_presets():
    quick, paper = preset("quick"), preset("paper")
    assert (quick.tasks, quick.scoring, quick.seeds) == (["every"], ["softmax", "ssa", "temperature"], list(range(10)))
    assert (quick.stats.primary.treatment, quick.stats.primary.control, quick.stats.primary.min_value) == ("ssa", "softmax", 12)
    assert (quick.model.layers, quick.model.heads, quick.model.width) == (2, 4, 64)
    assert (paper.model.layers, paper.model.heads, paper.model.width, paper.train.steps) == (12, 8, 256, 500_000)
    c = paper.train.curriculum
    assert (c.start, c.end, c.increment, c.interval) == (11, 41, 2, 2000)
    assert paper.eval.sigmas == list(range(1, 30)) and paper.eval.lengths[0] == 10 and paper.eval.lengths[-1] == 200


def test_paper_preset_uses_the_authors_ssa_setting():
    """One definition of "the paper's SSA" for the ICL models: the ICL paper preset equals configs/models/icl_paper."""
    from ssa_hf.icl.model import ICLModelConfig
    from ssa_hf.presets import load_model_config

    model = load_model_config("icl_paper")
    options = preset("paper").model.scoring_options
    assert options == {name: getattr(model, name) for name in options}
    assert (options["ssa_parametrization"], options["ssa_granularity"]) == ("exp", "layer")
    backbone = ICLModelConfig(layers=1, heads=2, width=16, scoring_options=options).backbone_config()
    assert backbone.ssa_b_init == model.ssa_b_init and backbone.ssa_n_init == model.ssa_n_init


def test_quick_preset_temperature_arm_is_matched_to_ssa():
    from ssa_hf.icl.model import ICLModel

    quick = preset("quick")
    quick.model.scoring = "temperature"
    params = ICLModel(quick.model).scoring_parameters()
    ts = [value for layer in params.values() for value in layer["t"]]
    options = quick.model.backbone_config().scoring_settings()
    assert ts and all(abs(t - 1 / (options["ssa_n_init"] * options["ssa_b_init"])) < 1e-6 for t in ts)


@pytest.mark.parametrize(
    "update, message",
    [
        ({"tasks": ["every", "most"]}, "unknown ICL task 'most'"),
        ({"scoring": ["softmax", "nope"]}, "unknown scoring function 'nope'"),
        ({"train": {"stepz": 3}}, r"unknown config key 'train.stepz'; did you mean 'train.steps'"),
        ({"train": {"curriculum": {"start": 50}}}, "curriculum"),
        ({"eval": {"sigmas": [0]}}, "eval.sigmas"),
        ({"eval": {"lengths": [1000]}}, "max_points"),
        ({"seeds": [1, 1]}, "duplicates"),
        ({"preset": "huge"}, "unknown ICL preset"),
    ],
)
def test_bad_configs_name_what_to_fix(update, message):
    with pytest.raises(ValueError, match=message):
        config_from_dict(update, base=preset("quick"))


@pytest.mark.parametrize("scoring_option", ["--attention-scoring", "--scoring"])  # (--scoring: the old name)
def test_cli_overrides(tmp_path, scoring_option):
    from ssa_hf.cli import build_parser
    from ssa_hf.commands.icl import config_from_args

    args = build_parser().parse_args(
        ["icl", "--preset", "quick", scoring_option, "softmax,ssa,ssmax", "--seeds", "3,4", "--width", "32",
         "--steps", "7", "--attention-only", "--linear-sigmas", "1,2", "--output-dir", str(tmp_path)]
    )
    config = config_from_args(args)
    assert config.attention_scoring == ["softmax", "ssa", "ssmax"] and config.seeds == [3, 4]
    assert config.model.width == 32 and config.model.attention_only and config.train.steps == 7
    assert config.eval.linear_sigmas_x == config.eval.linear_sigmas_ab == [1.0, 2.0]
    assert config.model.layers == 2  # untouched fields keep the preset's value


def test_every_config_key_is_an_option_and_full_keys_win(tmp_path):
    from ssa_hf.cli import build_parser
    from ssa_hf.commands.icl import config_from_args

    args = build_parser().parse_args(["icl", "--train.lr", "3e-4", "--eval.seed", "7", "--steps", "5",
                                      "--train.steps", "6", "--tasks", "every", "linear"])
    config = config_from_args(args)
    assert (config.train.lr, config.eval.seed, config.train.steps) == (3e-4, 7, 6)
    assert config.tasks == ["every", "linear_regression"]  # (linear: the old name)


def test_old_names_are_aliases_with_a_deprecation_warning(caplog):
    with caplog.at_level("WARNING"):
        config = config_from_dict({"scoring": ["ssa"], "tasks": ["linear"], "model": {"scoring": "softmax"},
                                   "stats": {"primary": {"task": "linear", "sweep": "grid", "metric": "mse",
                                                         "min_value": 1, "treatment": "ssa", "control": "softmax"}}},
                                  base=preset("quick"))
    assert config.attention_scoring == ["ssa"] and config.scoring == ["ssa"]  # (the old attribute name reads it)
    assert config.model.attention_scoring == "softmax" and config.tasks == ["linear_regression"]
    assert config.stats.primary.task == "linear_regression"
    assert "config key 'scoring' is deprecated" in caplog.text and "'model.scoring'" in caplog.text
    with pytest.raises(ValueError, match="name the same setting"):
        config_from_dict({"scoring": ["ssa"], "attention_scoring": ["ssa"]})


def test_renamed_linear_task_keeps_its_prompts():
    """linear_regression draws the prompts `linear` drew: same training seeds, same test cells (the results of
    runs before the rename stay reproducible)."""
    from ssa_hf.icl.evaluate import cell_prompts
    from ssa_hf.icl.train import data_seed

    assert data_seed("linear_regression", 3) == data_seed("linear", 3) == zlib.crc32(b"icl-train|linear|3")
    cfg = preset("quick").eval
    new, old = cell_prompts("linear_regression", False, 2.0, 9, cfg, 3.0), cell_prompts("linear", False, 2.0, 9, cfg, 3.0)
    assert torch.equal(new.xs, old.xs) and torch.equal(new.ys, old.ys) and new.task == old.task == "linear_regression"
    generator = torch.Generator().manual_seed(zlib.crc32(b"icl-eval|1234|linear|standard|2.0|9|3.0"))
    xs = torch.randn((cfg.batches * cfg.batch_size, 9), generator=generator) * 2.0
    assert torch.equal(new.xs, xs)  # the key of the cell is the one used before the rename


def test_cli_reports_bad_options(capsys):
    from ssa_hf.cli import main

    assert main(["icl", "--tasks", "most", "--output-dir", "unused"]) == 2
    assert "unknown ICL task 'most'" in capsys.readouterr().err


@pytest.mark.slow
def test_parallel_workers_give_the_same_results(tmp_path, tiny_config):
    """Two worker processes (spawn) train and evaluate exactly what one process does."""
    serial = run_icl(tiny_config, tmp_path / "serial", progress=False, plots=False)
    tiny_config.workers = 2
    parallel = run_icl(tiny_config, tmp_path / "parallel", progress=False, plots=False)
    strip = lambda runs: [{k: v for k, v in r.items() if k not in ("train", "eval_seconds")} for r in runs]  # noqa: E731
    assert strip(parallel.runs) == strip(serial.runs)
    assert [r["train"]["history"] for r in parallel.runs] == [r["train"]["history"] for r in serial.runs]


def _spec_file(folder, name="every-ssa-seed0"):
    return folder / "runs" / name / "checkpoint" / "run_spec.json"


def test_a_rerun_with_fewer_steps_refuses_instead_of_reporting_the_longer_run(tmp_path, tiny_config):
    """`--steps 2` into a folder of 3-step runs must not report them as 2-step results."""
    tiny_config.scoring, tiny_config.seeds, tiny_config.train.steps = ["ssa"], [0], 3
    run_icl(tiny_config, tmp_path, progress=False, plots=False)
    before = (tmp_path / "results.json").read_text()
    tiny_config.train.steps = 2
    with pytest.raises(ValueError, match=r"every-ssa-seed0: it has trained 3 steps, more than train.steps=2.*--steps 3"):
        run_icl(tiny_config, tmp_path, progress=False, plots=False)
    assert (tmp_path / "results.json").read_text() == before
    # a checkpoint written before the steps were recorded: the finished run's result.json tells
    spec = json.loads(_spec_file(tmp_path).read_text())
    del spec["trained_steps"]
    _spec_file(tmp_path).write_text(json.dumps(spec))
    from ssa_hf.train.checkpoint import write_manifest

    (_spec_file(tmp_path).parent / "manifest.json").unlink()
    write_manifest(_spec_file(tmp_path).parent, step=3)  # an intact older checkpoint, not a damaged one
    with pytest.raises(ValueError, match="trained 3 steps"):
        run_icl(tiny_config, tmp_path, progress=False, plots=False)
    # more steps resume the run, and results.json reports what ran
    tiny_config.train.steps = 4
    results = run_icl(tiny_config, tmp_path, progress=False, plots=False)
    assert [r["train"]["steps"] for r in results.runs] == [4] and results.runs[0]["train"]["resumed_from"] == 3
    assert json.loads((tmp_path / "results.json").read_text())["config"]["train"]["steps"] == 4


def test_a_rerun_with_other_settings_refuses_and_says_how_to_reuse(tmp_path, tiny_config):
    tiny_config.scoring, tiny_config.seeds = ["ssa"], [0, 1]
    run_icl(tiny_config, tmp_path, progress=False, plots=False)
    tiny_config.train.lr *= 2
    with pytest.raises(ValueError) as error:
        run_icl(tiny_config, tmp_path, progress=False, plots=False)
    message = str(error.value)
    assert "every-ssa-seed0: it was trained with train.lr=" in message and "every-ssa-seed1" in message
    assert "another --output-dir" in message


def test_docs_blocks_render_from_the_results_json(tmp_path, tiny_config):
    # what scripts/render_docs.py writes into docs/icl.md and README.md from docs/icl_quick_results.json
    from ssa_hf.icl.pipeline import ICLResults
    from ssa_hf.icl.report import docs_blocks

    run_icl(tiny_config, tmp_path, progress=False, plots=False)
    results = ICLResults(**json.loads((tmp_path / "results.json").read_text()))
    blocks = docs_blocks(results)
    assert set(blocks) == {"icl-quick-runs", "icl-quick-primary", "icl-quick-reading", "icl-quick-secondary",
                           "icl-quick-tables"}
    assert blocks["icl-quick-reading"].startswith("Verdict on the primary endpoint: **")  # no seen seeds here
    failed = results.failed_runs()
    assert blocks["icl-quick-runs"].startswith(f"{4 - len(failed)} of 4 runs learned the rule") and failed[0] in \
        blocks["icl-quick-runs"]
    primary = results.paired["primary"]
    assert blocks["icl-quick-primary"].startswith(f"ssa {100 * primary['mean_a']:.1f}%, softmax")
    assert f"lower in {primary['lower']} of 2 seeds" in blocks["icl-quick-primary"]
    tables = blocks["icl-quick-tables"]
    assert "| test set | cell | ssa | softmax |" in tables and "By prompt length at sigma 1:" in tables
    assert "correct at 4" in tables
