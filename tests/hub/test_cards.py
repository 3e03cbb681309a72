"""ssa_hf.hub.cards and card_inputs: model cards from configs and evaluation results, and their validation."""

from __future__ import annotations

import json

import pytest
import torch
from huggingface_hub import ModelCard

from ssa_hf.hub import EvaluationResult, normalize_evaluation, read_scoring_parameters, render_model_card, save_checkpoint_folder, validate_model_card
from ssa_hf.presets import build_model, load_model_config

from .helpers import tiny_tokenizer, LM_EVAL_JSON


def test_lm_eval_results_are_read():
    results = normalize_evaluation(LM_EVAL_JSON)
    got = {(r.task, r.metric): r for r in results}
    assert set(got) == {("arc_easy", "acc"), ("arc_easy", "acc_norm"), ("boolq", "acc")}
    assert got["arc_easy", "acc_norm"].stderr == 0.012 and got["arc_easy", "acc_norm"].num_fewshot == 0
    assert got["arc_easy", "acc"].dataset == "allenai/ai2_arc" and got["boolq", "acc"].split == "validation"


@pytest.mark.parametrize("bad, message", [
    ([{"task": "x", "metric": "acc"}], "missing \\['value'\\]"),
    ([{"task": "x", "metric": "acc", "value": 0.5, "shots": 0}], "unknown keys \\['shots'\\]"),
    ([{"task": "x", "metric": "acc", "value": float("nan")}], "finite number"),
    ([{"task": "x", "metric": "acc", "value": 0.5, "num_fewshot": -1}], "num_fewshot"),
    ({"scores": []}, "expected a list"),
])
def test_bad_evaluation_input(bad, message):
    with pytest.raises(ValueError, match=message):
        normalize_evaluation(bad)


def test_card_from_config_has_metadata_and_text():
    config = load_model_config("decoder_114m")
    evaluation = [
        {"task": "arc_easy", "metric": "acc_norm", "value": 0.5387, "dataset": "allenai/ai2_arc",
         "dataset_config": "ARC-Easy", "split": "test", "num_fewshot": 0, "stderr": 0.01,
         "baselines": {"chance": 0.25}, "source": "lm-evaluation-harness 0.4.13"},
        EvaluationResult(task="boolq", metric="acc", value=0.5618, num_fewshot=0,
                         baselines={"chance": 0.5, "majority": 0.622}),
    ]
    training = {"datasets": ["HuggingFaceFW/fineweb-edu"], "steps": 22000, "sequence_length": 1024}
    card = render_model_card(config, training=training, evaluation=evaluation, base_preset="decoder_114m",
                             license="apache-2.0", language="en", repo_id="someone/ssa-114m")
    data = card.data
    assert data.library_name == "transformers" and data.pipeline_tag == "text-generation"
    assert {"ssa-hf", "scaled-signed-averaging", "ssa-attention"} <= set(data.tags)
    assert data.datasets == ["HuggingFaceFW/fineweb-edu"] and data.license == "apache-2.0"
    assert data.ssa_hf["base_preset"] == "decoder_114m" and data.ssa_hf["parameters"] == 114_133_260
    assert data.ssa_hf["scoring"]["ssa_b_init"] == 0.8
    assert {(r.task_name, r.metric_type, r.metric_value) for r in data.eval_results} == {
        ("arc_easy", "acc_norm", 0.5387), ("boolq", "acc", 0.5618)}
    text = card.text
    assert "someone/ssa-114m" in text and "trust_remote_code=True" in text and "import ssa_hf" in text
    assert "majority 0.622" in text and "| steps | 22000 |" in text
    assert "Naim, Omar" in text and "2508.14685" in text
    assert "114,133,260" in text
    # the card survives a save / load cycle and the offline validation
    reloaded = ModelCard(str(card))
    assert reloaded.data.to_dict() == data.to_dict()
    validate_model_card(reloaded)


def test_card_reads_trained_scoring_values(tmp_path):
    config = load_model_config("tiny_llama")
    model = build_model(config)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            layer.self_attn.scoring.params["n"].raw.add_(0.3 * (i + 1))
    folder = save_checkpoint_folder(model, tmp_path / "ckpt", tiny_tokenizer(), base_preset="tiny_llama",
                                    training={"datasets": ["local/toy"], "steps": 3})
    stored = read_scoring_parameters(folder)
    assert set(stored) == set(model.scoring_parameters())
    for name, values in model.scoring_parameters().items():
        assert stored[name]["n"] == pytest.approx(values["n"], rel=1e-6)
        assert stored[name]["b"] == pytest.approx(values["b"], rel=1e-6)
    card = ModelCard.load(folder / "README.md")
    first_n = model.scoring_parameters()["model.layers.0.self_attn.scoring"]["n"][0]
    assert f"{first_n:.4g}" in card.text and card.data.model_name == "ckpt"
    assert json.loads((folder / "ssa_hf_card.json").read_text())["base_preset"] == "tiny_llama"
    with pytest.raises(FileExistsError):
        save_checkpoint_folder(model, folder)
    save_checkpoint_folder(model, folder, overwrite=True, card=False)
    assert not (folder / "README.md").exists() and (folder / "model.safetensors").is_file()


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("pipeline_tag: fill-mask", "pipeline_tag: [a, b]"), "pipeline_tag"),
    (lambda t: t.replace("tags:\n- ssa-hf\n", "tags:\n- 17\n"), "tags"),
    (lambda t: t.replace("model_name: ssa_bert-ssa", "model_name: x\nmodel-index: [{name: x, results: [{}]}]"),
     "rejected by huggingface_hub.*model_index"),
    (lambda t: t.replace("## Citation", "## Cite"), "missing sections"),
    (lambda t: t.replace("---\n", "", 1), "no YAML metadata header"),
    (lambda t: t.replace("library_name: transformers", "library_name: transformers\nbase_model: not a repo id!"),
     "base_model"),
])
def test_validation_catches_broken_cards(edit, message):
    text = str(render_model_card(load_model_config("tiny_bert")))
    validate_model_card(text)
    assert edit(text) != text
    with pytest.raises(ValueError, match=message):
        validate_model_card(edit(text))


def test_card_for_masked_lm_and_softmax():
    card = render_model_card(load_model_config("babyberta", attention_scoring="softmax"))
    assert card.data.pipeline_tag == "fill-mask" and "softmax-attention" in card.data.tags
    assert "scaled-signed-averaging" not in card.data.tags and "AutoModelForMaskedLM" in card.text
    assert "No evaluation results were given" in card.text
