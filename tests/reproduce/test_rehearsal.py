"""The rehearsal of a scale (`ssa-hf reproduce --scale paper --rehearse`): the paper config's whole code path
(every experiment, every evaluation, all eight lm-eval tasks with ReCoRD, the report) at toy sizes on made-up
data, offline. The fast test runs the smallest size; the slow one the default size, whose trainings go through
`accelerate launch` over 2 CPU processes."""

from __future__ import annotations

import json

import pytest

from ssa_hf.cli import main
from ssa_hf.evaluation.lm_tasks import PAPER_TASKS
from ssa_hf.reproduce import load_config, scale_config_path
from ssa_hf.reproduce.claims import expected_claims
from ssa_hf.reproduce.rehearsal import rehearsal_config, write_rehearsal_data


def _check_report(out, size):
    summary = json.loads((out / "results.json").read_text())
    paper = load_config(scale_config_path("paper"))
    # every claim of the paper scale got its row: nothing pending, nothing failed after a first step
    assert {c["id"] for c in summary["claims"]} == set(expected_claims(paper)) and not summary["pending"]
    assert summary["scale"] == "rehearsal" and "REHEARSAL" in (out / "RESULTS.md").read_text()
    for arm in ("softmax", "ssa"):
        for seed in paper.causal.seeds.confirmatory[:2]:
            tasks = json.loads((out / "causal" / f"{arm}-seed{seed}" / "result.json").read_text())["evaluations"][
                "lm_eval"]["tasks"]
            assert set(tasks) == set(PAPER_TASKS)  # ReCoRD included: the task that once aborted the paper scale
            assert set(tasks["record"]["metrics"]) >= {"f1", "em"}
    # the SSA-2 arm of BabyBERTa runs beside SSA-1.5
    assert (out / "masked" / f"ssa2-seed{paper.masked.seeds.confirmatory[0]}" / "result.json").is_file()
    return summary


def test_the_rehearsal_keeps_the_scale_and_shrinks_only_sizes(tmp_path):
    paper = load_config(scale_config_path("paper"))
    config = rehearsal_config(paper, write_rehearsal_data(tmp_path / "data"), "small")
    assert list(config.icl) == list(paper.icl) and set(config.causal.arms) == set(paper.causal.arms)
    for name, experiment in config.icl.items():
        assert experiment.claims.keys() == paper.icl[name].claims.keys()
        assert experiment.config["tasks"] == paper.icl[name].config["tasks"]
        assert experiment.config["train"]["steps"] < 10 and len(experiment.seeds.confirmatory) == 2
    assert config.causal.evaluation["lm_eval"]["tasks"] == paper.causal.evaluation["lm_eval"]["tasks"] == ["paper"]
    assert config.causal.claims.keys() == paper.causal.claims.keys()
    # the paper's launch of the decoder trainings, over 2 CPU processes
    assert paper.launch["kinds"] == ["causal"]
    assert config.launch == {"config_file": "configs/accelerate/cpu_2proc.yaml", "num_processes": 2, "kinds": ["causal"]}
    assert config.scale == "rehearsal" and config.workers == 2


def test_the_tiny_rehearsal_of_the_paper_scale_reaches_its_report(tmp_path):
    out = tmp_path / "out"
    assert main(["reproduce", "--scale", "paper", "--rehearse", "tiny", "--output-dir", str(out)]) == 0
    _check_report(out, "tiny")


@pytest.mark.slow
def test_the_rehearsal_of_the_paper_scale_with_workers_and_accelerate_launch(tmp_path):
    out = tmp_path / "out"
    assert main(["reproduce", "--scale", "paper", "--rehearse", "--output-dir", str(out)]) == 0
    _check_report(out, "small")
    log = (out / "causal" / "ssa-seed0" / "run.log").read_text()
    assert "accelerate.commands.launch" in log and "--num_processes 2" in log
