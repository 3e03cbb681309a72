"""docs/results.md's figures come from code: one confirmatory seed of each experiment of the CPU scale, rerun at
this commit with the declared config, gives the per-seed values docs/results_summary.json records for it, bit for
bit (slow: one seed of every experiment is minutes to tens of minutes on 2 cores).

Where the summary records no per-seed values (a summary re-rendered from a run that predates per-seed recording;
its `note` says which code changes the runs predate) there is nothing to compare with: those cases are marked
expected to fail, not run, and stop being so once a run of `ssa-hf reproduce --scale cpu --results-file
docs/results.md` records them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ssa_hf.reproduce import load_config

REPO = Path(__file__).resolve().parents[2]
SUMMARY = json.loads((REPO / "docs" / "results_summary.json").read_text())["claims"]
CONFIG = REPO / "configs" / "experiments" / "reproduce_cpu.yaml"


def _cases():
    for claim_id, figures in SUMMARY.items():
        recorded = figures.get("control_values") and figures.get("treatment_values")
        marks = [pytest.mark.slow]
        if not recorded:
            marks.append(pytest.mark.xfail(run=False, strict=True, reason=(
                "docs/results_summary.json records no per-seed values for this claim: its runs predate per-seed "
                "recording and later code changes (the summary's note)")))
        yield pytest.param(claim_id, marks=marks, id=claim_id)


def _icl_values(config, claim_id: str, seed: int, out: Path) -> tuple[float, float]:
    from ssa_hf.icl import run_icl
    from ssa_hf.icl.pipeline import finished_runs
    from ssa_hf.icl.stats import endpoint_value
    from ssa_hf.reproduce.claims import _selector, icl_baseline_evaluations
    from ssa_hf.reproduce.pipeline import icl_config

    name, claim_name = next((n, c) for n, e in config.icl.items() for c in e.claims if f"icl_{n}_{c}" == claim_id)
    experiment = config.icl[name]
    icl = icl_config(experiment, config, [seed])
    run_icl(icl, out / name, progress=False, plots=False)
    runs = {r["scoring"]: r["eval"] for r in finished_runs(icl, out / name)}
    endpoint = experiment.claims[claim_name].primary
    zero = icl_baseline_evaluations(icl).get("zero", {}).get("grid", {}).get("mse")
    return tuple(endpoint_value(runs[arm], _selector(endpoint), zero) for arm in (endpoint.control, endpoint.treatment))


def _lm_values(config, claim_id: str, seed: int, out: Path) -> tuple[float, float]:
    from ssa_hf.reproduce.claims import _getter
    from ssa_hf.reproduce.runs import data_dir_env, lm_specs, run_lm_job

    kind, claim_name = claim_id.split("_", 1)
    experiment = getattr(config, kind)
    with data_dir_env(config.data_dir):
        results = [run_lm_job(spec) for spec in lm_specs(kind, experiment, config, out, [seed])]
    getter = _getter(claim_name, experiment.claims[claim_name].primary.metric, results)
    by_arm = {r["arm"]: getter(r) for r in results}
    return by_arm[experiment.control], by_arm[experiment.treatment]


@pytest.mark.parametrize("claim_id", list(_cases()))
def test_one_seed_reruns_to_the_recorded_figures(claim_id, tmp_path):
    figures = SUMMARY[claim_id]
    config = load_config(CONFIG)
    config.data_dir = config.data_dir or os.environ.get("SSA_HF_DATA_DIR") or str(REPO.parent / "shared" / "data")
    config.workers = 1  # one process; the runs' figures do not depend on how many ran beside them (threads: 1 each)
    seed = figures["seed_list"][0]
    rerun = (_icl_values if claim_id.startswith("icl_") else _lm_values)(config, claim_id, seed, tmp_path)
    assert rerun == (figures["control_values"][0], figures["treatment_values"][0]), claim_id
