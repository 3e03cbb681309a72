"""The model card a Hub user reads: for every family, the install line, absolute repository and paper links, the
attention-implementation text that matches the code, the training paragraph generated from the run; evaluation
results as `ssa-hf eval` and lm-eval write them, with --limit subsets said and bookkeeping fields kept out."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

from ssa_hf.hub import normalize_evaluation, render_model_card
from ssa_hf.hub.cards import INSTALL_LINE, PAPER_URL, REPOSITORY_URL
from ssa_hf.presets import load_model_config

from ..conftest import REPO

TRAINING = {"trained_with": "ssa-hf pretrain (accelerate)", "steps": 1200, "tokens": 2_457_600, "data": "train.jsonl",
            "sequence_length": 128, "global_batch_size": 16, "learning_rate": 0.001, "processes": 2,
            "mixed_precision": "bf16", "validation_loss": 4.21, "seed": 0}

# what `ssa-hf eval --limit 50` writes as eval.json (the fields the card reads)
SSA_EVAL_JSON = {
    "kind": "lm_eval", "name": "tiny", "model": {}, "settings": {"limit": 50}, "wall_time_s": 3.0,
    "versions": {"lm_eval": "0.4.13"},
    "tasks": {
        "boolq": {"metrics": {"acc": {"value": 0.52, "stderr": 0.071}}, "num_fewshot": 0, "n": 50, "n_total": 3270,
                  "baselines": {"chance": 0.5, "majority": 0.62, "majority_answer": "yes", "num_choices": [2], "n": 50},
                  "data": {"dataset_path": "json", "split": "validation"}},
        "arc_easy": {"metrics": {"acc": {"value": 0.3, "stderr": 0.06}, "acc_norm": {"value": 0.28, "stderr": None}},
                     "num_fewshot": 0, "n": 50, "n_total": 2376, "baselines": None,
                     "data": {"dataset_path": "allenai/ai2_arc", "dataset_name": "ARC-Easy", "split": "test"}},
    },
}

# lm-eval's own results JSON of a --limit 50 run (sample_len and alias sit beside the metrics)
LM_EVAL_LIMITED = {
    "results": {"boolq": {"alias": "boolq", "sample_len": 50, "acc,none": 0.56, "acc_stderr,none": 0.07}},
    "n-shot": {"boolq": 0}, "n-samples": {"boolq": {"original": 3270, "effective": 50}},
    "configs": {"boolq": {"dataset_path": "super_glue", "dataset_name": "boolq", "validation_split": "validation"}},
    "config": {"limit": 50.0}, "lm_eval_version": "0.4.13",
}

FAMILY_PRESETS = {"ssa_llama": "tiny_llama", "ssa_bert": "tiny_bert", "ssa_gpt2": "tiny_gpt2"}


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_card_urls_are_the_projects_urls():
    urls = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]
    assert urls == {"Repository": REPOSITORY_URL, "Paper": PAPER_URL}


@pytest.mark.parametrize("family", sorted(FAMILY_PRESETS))
@pytest.mark.parametrize("scoring", ["ssa", "softmax"])
def test_card_for_each_family(family, scoring):
    config = load_model_config(FAMILY_PRESETS[family], attention_scoring=scoring)
    assert config.model_type == family
    text = render_model_card(config, training=TRAINING, evaluation=SSA_EVAL_JSON).text
    assert INSTALL_LINE in text and f"```bash\n{INSTALL_LINE}\n```" in text
    assert REPOSITORY_URL in text and PAPER_URL in text
    links = _links(text)
    assert links and all(link.startswith("https://") for link in links), links  # relative links break on the Hub
    # sdpa and eager map onto ssa-hf's implementations (docs/models.md), they are not refused
    assert '`attn_implementation="sdpa"` run `ssa_auto`' in text and '`"eager"` runs `ssa_eager`' in text
    assert "refuses them" not in text
    if scoring == "ssa":
        assert "softmax kernels (`\"flash_attention_2\"`, paged attention) are refused" in text
    else:
        assert "also accepts transformers' softmax kernels" in text
    summary = re.search(r"How it was trained: (.*)", text).group(1)
    for fragment in ("ssa-hf pretrain (accelerate)", "1,200 steps (2,457,600 tokens)", "train.jsonl",
                     "sequence length 128", "2 processes", "mixed precision bf16", "Validation loss at the end: 4.21"):
        assert fragment in summary, (fragment, summary)


def test_card_without_training_says_so():
    text = render_model_card(load_model_config("tiny_llama")).text
    assert "How it was trained: not recorded" in text


def test_softmax_model_without_aliases_says_sdpa_is_pytorchs():
    config = load_model_config("tiny_llama", attention_scoring="softmax", attn_implementation_aliases={})
    text = render_model_card(config).text
    assert "run transformers' own softmax implementations" in text and "run `ssa_auto`" not in text


def test_eval_json_of_ssa_hf_eval_is_read(tmp_path):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(SSA_EVAL_JSON))
    results = {(r.task, r.metric): r for r in normalize_evaluation(path)}
    assert set(results) == {("boolq", "acc"), ("arc_easy", "acc"), ("arc_easy", "acc_norm")}
    boolq = results["boolq", "acc"]
    assert (boolq.value, boolq.stderr, boolq.num_fewshot, boolq.documents, boolq.documents_total) == (0.52, 0.071, 0, 50, 3270)
    assert boolq.baselines == {"chance": 0.5, "majority": 0.62} and boolq.dataset is None  # a local copy: no Hub id
    assert results["arc_easy", "acc"].dataset == "allenai/ai2_arc" and results["arc_easy", "acc_norm"].stderr is None
    assert boolq.source == "ssa-hf eval (lm-evaluation-harness 0.4.13)"


def test_comparison_file_is_refused_with_what_to_give():
    with pytest.raises(ValueError, match="give the eval.json of the model"):
        normalize_evaluation({"kind": "lm_eval_comparison", "runs": []})


def test_limited_lm_eval_results_publish_no_bookkeeping_and_say_subset():
    results = normalize_evaluation(LM_EVAL_LIMITED)
    assert [(r.task, r.metric, r.documents, r.documents_total) for r in results] == [("boolq", "acc", 50, 3270)]
    card = render_model_card(load_model_config("tiny_llama"), evaluation=LM_EVAL_LIMITED)
    text = str(card)
    assert "sample_len" not in text and "alias" not in text
    assert [r.metric_type for r in card.data.eval_results] == ["acc"]
    assert "These scores come from a subset" in text and "boolq on 50 of its 3,270 documents" in text
    assert "| 50 of 3,270 |" in text


def test_full_split_scores_carry_no_subset_note():
    full = json.loads(json.dumps(SSA_EVAL_JSON))
    for entry in full["tasks"].values():
        entry["n"] = entry["n_total"]
    text = render_model_card(load_model_config("tiny_llama"), evaluation=full).text
    assert "come from a subset" not in text and "| 3,270 of 3,270 |" in text


def test_push_takes_the_eval_json_of_ssa_hf_eval(ssa_checkpoint, hub_recorder, tmp_path):
    from huggingface_hub import ModelCard

    from ssa_hf.cli import main

    path = tmp_path / "eval.json"
    path.write_text(json.dumps(SSA_EVAL_JSON))
    assert main(["push", str(ssa_checkpoint), "someone/tiny-ssa", "--evaluation", str(path)]) == 0
    card = ModelCard(hub_recorder[-1][2]["README.md"].decode())
    assert {(r.task_name, r.metric_type) for r in card.data.eval_results} == {
        ("boolq", "acc"), ("arc_easy", "acc"), ("arc_easy", "acc_norm")}
    assert "boolq on 50 of its 3,270 documents" in card.text
