"""Integration: the four lm-eval tasks (and PIQA) and the Zorro probes on the offline copies in ../shared/data
(or $SSA_HF_DATA_DIR), a few examples each, with the tiny checkpoints. Skipped, with the reason, when the data
is absent."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from ssa_hf.evaluation.harness import EvalConfig, run_eval
from ssa_hf.evaluation.lm_tasks import task_manager
from ssa_hf.evaluation.zorro import ZORRO_PARADIGMS, ProbeConfig, run_probe

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("SSA_HF_DATA_DIR", REPO.parent / "shared" / "data"))

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not DATA.is_dir(), reason=f"offline data not found at {DATA} (set SSA_HF_DATA_DIR)"),
]

TASKS = ["arc_easy", "arc_challenge", "boolq", "hellaswag"]
# record counts and label counts from each data set's SOURCE.md
SPLIT_SIZES = {"arc_easy": 2376, "arc_challenge": 1172, "boolq": 3270, "hellaswag": 10042, "piqa": 1838}
LABEL_COUNTS = {"boolq": {1: 2033, 0: 1237}, "hellaswag": {0: 2515, 1: 2485, 2: 2584, 3: 2458}, "piqa": {0: 910, 1: 928}}


def test_local_tasks_read_every_document_with_valid_labels(tmp_path):
    names = list(SPLIT_SIZES)
    tasks = task_manager(DATA, names, tmp_path).load(names)["tasks"]
    for name, task in tasks.items():
        docs = list(task.eval_docs)
        assert len(docs) == SPLIT_SIZES[name], name
        # labels through the task's own doc_to_target for every document where SOURCE.md gives the counts; ARC's
        # Jinja templates are slow, so every 10th document there
        checked = docs if name in LABEL_COUNTS else docs[::10]
        golds = [task.doc_to_target(doc) for doc in checked]
        assert all(0 <= g < len(task.doc_to_choice(doc)) for g, doc in zip(golds, checked)), name
        if name in LABEL_COUNTS:
            assert Counter(golds) == LABEL_COUNTS[name], name
    # always "yes" on BoolQ: the majority baseline REFERENCE.md quotes
    assert LABEL_COUNTS["boolq"][1] / SPLIT_SIZES["boolq"] == pytest.approx(0.622, abs=5e-4)


def test_four_tasks_on_a_few_examples(ssa_causal_dir, tmp_path):
    results = run_eval(EvalConfig(model=str(ssa_causal_dir), tasks=TASKS, data_dir=str(DATA), limit=3,
                                  batch_size=4, device="cpu", output_dir=str(tmp_path)))
    for name in TASKS:
        task = results.tasks[name]
        assert task["n"] == 3 and task["n_total"] == SPLIT_SIZES[name]
        assert task["num_fewshot"] == 0 and task["baselines"]["n"] == 3
        assert 0 <= task["metrics"]["acc"]["value"] <= 1
    assert results.tasks["boolq"]["baselines"]["chance"] == pytest.approx(0.5)
    assert (tmp_path / "eval.md").is_file()


@pytest.mark.parametrize("kind", ["causal", "mlm"])
def test_zorro_probes_on_a_few_pairs(kind, ssa_causal_dir, masked_dir, tmp_path):
    model = ssa_causal_dir if kind == "causal" else masked_dir
    version = "sentences" if kind == "causal" else "sentences_conll2021"
    results = run_probe(ProbeConfig(model=str(model), zorro_dir=str(DATA / "zorro"), version=version, limit=2,
                                    device="cpu", output_dir=str(tmp_path)), progress=False)
    assert list(results.paradigms) == list(ZORRO_PARADIGMS)
    assert results.settings["zorro_version"] == version
    methods = ["loglik"] if kind == "causal" else ["holistic", "pll"]
    assert list(results.mean) == methods
    assert all(results.paradigms[p][m]["n"] == 2 for p in ZORRO_PARADIGMS for m in methods)
    assert (tmp_path / "probe.png").is_file()
