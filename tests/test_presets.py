"""Model presets (configs/models/): loading, overrides, building, parameter counts and `ssa-hf params`."""

from __future__ import annotations

import re

import pytest
import torch

import ssa_hf
from ssa_hf import SSABertConfig, SSAGPT2Config, SSALlamaConfig
from ssa_hf.cli import main as cli
from ssa_hf.presets import (
    build_model,
    count_parameters,
    describe_parameters,
    list_presets,
    load_model_config,
    load_preset,
    parse_overrides,
)

PRESETS = ["tiny_llama", "tiny_bert", "tiny_gpt2", "icl_paper", "decoder_114m", "babyberta"]


def unique_parameter_count(model: torch.nn.Module) -> int:
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel()
    return total


def llama_parameter_formula(c: SSALlamaConfig) -> int:
    """Count of a Llama decoder by hand: embeddings, attention, MLP (SwiGLU: 3 matrices; relu2: 2), norms (RMSNorm:
    a gain; LayerNorm1P: a gain and a bias), head, learned scoring values."""
    head_dim = c.hidden_size // c.num_attention_heads
    attention = 2 * c.hidden_size * c.num_attention_heads * head_dim + 2 * c.hidden_size * c.num_key_value_heads * head_dim
    mlp = (2 if c.mlp_type == "relu2" else 3) * c.hidden_size * c.intermediate_size
    norm = (2 if c.norm_type == "layernorm1p" else 1) * c.hidden_size
    per_layer = attention + mlp + 2 * norm
    embeddings = c.vocab_size * c.hidden_size
    head = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
    values = c.num_attention_heads if c.scoring_granularity == "head" else 1
    scoring = values * (int(c.ssa_learn_b) + int(c.ssa_learn_n)) if c.attention_scoring == "ssa" else 0
    return embeddings + c.num_hidden_layers * (per_layer + scoring) + norm + head


def gpt2_parameter_formula(c) -> int:
    """Count of a GPT-2 decoder by hand: token and position embeddings, attention (with biases), the 2-matrix MLP,
    two LayerNorms per layer and a final one, the head, learned scoring values."""
    d, inner = c.hidden_size, c.n_inner or 4 * c.hidden_size
    attention = d * 3 * d + 3 * d + d * d + d
    mlp = d * inner + inner + inner * d + d
    per_layer = attention + mlp + 2 * 2 * d
    embeddings = c.vocab_size * d + c.n_positions * d
    head = 0 if c.tie_word_embeddings else c.vocab_size * d
    values = c.num_attention_heads if c.scoring_granularity == "head" else 1
    scoring = values * (int(c.ssa_learn_b) + int(c.ssa_learn_n)) if c.attention_scoring == "ssa" else 0
    return embeddings + c.num_hidden_layers * (per_layer + scoring) + 2 * d + head


def test_every_shipped_preset_is_listed():
    assert set(PRESETS) <= set(list_presets())


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_meta_count_matches_formula(name):
    config = load_model_config(name)
    assert isinstance(config, (SSALlamaConfig, SSABertConfig, SSAGPT2Config))
    assert load_preset(name).description
    count = count_parameters(config)
    assert count > 0
    if isinstance(config, SSALlamaConfig):
        assert count == llama_parameter_formula(config)
    if isinstance(config, SSAGPT2Config):
        assert count == gpt2_parameter_formula(config)


@pytest.mark.parametrize("name", ["tiny_llama", "tiny_bert", "tiny_gpt2"])
def test_meta_count_equals_built_model(name):
    config = load_model_config(name)
    model = build_model(config)
    assert count_parameters(config) == unique_parameter_count(model)


def test_tied_embeddings_are_counted_once():
    untied = count_parameters(load_model_config("tiny_llama", tie_word_embeddings=False))
    tied_config = load_model_config("tiny_llama", tie_word_embeddings=True)
    tied = count_parameters(tied_config)
    assert untied - tied == tied_config.vocab_size * tied_config.hidden_size
    assert tied == unique_parameter_count(build_model(tied_config))


def test_decoder_114m_matches_the_paper_model():
    config = load_model_config("decoder_114m")
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.num_key_value_heads) == (12, 768, 24, 8)
    assert config.tie_word_embeddings and 49_000 <= config.vocab_size <= 51_000
    count = count_parameters(config)
    assert abs(count - 114e6) <= 0.05 * 114e6, count
    # Nemotron's block: a two-matrix squared-ReLU MLP of 3,072, LayerNorm1P, RoPE on half of each head, std 0.0134
    assert (config.mlp_type, config.intermediate_size, config.norm_type) == ("relu2", 3072, "layernorm1p")
    assert config.rotary_fraction() == 0.5 and config.initializer_range == 0.0134 and config.rms_norm_eps == 1e-5
    assert count == 114_133_260
    assert (config.ssa_learn_b, config.ssa_b_init, config.ssa_learn_n, config.ssa_n_init) == (False, 0.8, True, 1.5)
    assert config.scoring_parametrization == "raw"  # n trained with no clamp, as the authors' run


def test_icl_and_babyberta_shapes():
    icl = load_model_config("icl_paper")
    assert (icl.num_hidden_layers, icl.num_attention_heads, icl.hidden_size) == (12, 8, 256)
    bb = load_model_config("babyberta")
    assert (bb.num_hidden_layers, bb.num_attention_heads, bb.hidden_size, bb.intermediate_size, bb.vocab_size) == (8, 8, 256, 1024, 8192)
    # RoBERTa numbers positions from pad_token_id + 1: 128 tokens need 130 rows
    assert bb.max_position_embeddings == 128 + bb.pad_token_id + 1
    assert bb.ssa_learn_n is False and bb.ssa_n_init == 1.5


def test_overrides_apply_and_typos_are_refused():
    config = load_model_config("tiny_llama", attention_scoring="softmax", hidden_size=64)
    assert config.attention_scoring == "softmax" and config.hidden_size == 64
    with pytest.raises(ValueError, match="attention_scoring"):
        load_model_config("tiny_llama", attention_scorng="softmax")
    with pytest.raises(ValueError, match="attention_scoring: unknown scoring function"):
        load_model_config("tiny_llama", attention_scoring="softmaxx")
    with pytest.raises(ValueError, match="unknown model preset 'tiny_lama'.*tiny_llama"):
        load_model_config("tiny_lama")


def test_bad_preset_files(tmp_path):
    bad_family = tmp_path / "bad.yaml"
    bad_family.write_text("family: gpt2\nconfig: {}\n")
    with pytest.raises(ValueError, match="'family' must be one of"):
        load_model_config(bad_family)
    bad_field = tmp_path / "typo.yaml"
    bad_field.write_text("family: ssa_bert\nconfig:\n  hidden_sise: 32\n")
    with pytest.raises(ValueError, match="hidden_sise.*hidden_size"):
        load_model_config(bad_field)
    with pytest.raises(FileNotFoundError):
        load_model_config(tmp_path / "missing.yaml")


def test_configs_dir_override(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.yaml").write_text(
        "family: ssa_llama\nconfig: {vocab_size: 8, hidden_size: 16, intermediate_size: 16, num_hidden_layers: 1,"
        " num_attention_heads: 2}\n")
    monkeypatch.setenv("SSA_HF_CONFIGS_DIR", str(tmp_path))
    assert list_presets() == ["mine"]
    assert load_model_config("mine").hidden_size == 16
    monkeypatch.setenv("SSA_HF_CONFIGS_DIR", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="SSA_HF_CONFIGS_DIR"):
        load_model_config("mine")


@pytest.mark.parametrize("name, task, cls", [
    ("tiny_llama", None, ssa_hf.SSALlamaForCausalLM),
    ("tiny_llama", "base", ssa_hf.SSALlamaModel),
    ("tiny_llama", "sequence_classification", ssa_hf.SSALlamaForSequenceClassification),
    ("tiny_bert", None, ssa_hf.SSABertForMaskedLM),
    ("tiny_bert", "base", ssa_hf.SSABertModel),
])
def test_build_model_tasks(name, task, cls):
    config = load_model_config(name)
    model = build_model(config, task)
    assert type(model) is cls
    assert model.config is not config  # building never changes the caller's config
    ids = torch.randint(3, config.vocab_size, (1, 6))
    out = model(input_ids=ids)
    assert torch.isfinite(out[0]).all()


def test_build_model_refuses_wrong_task_and_config():
    with pytest.raises(ValueError, match="masked_lm.*not available for ssa_llama"):
        build_model(load_model_config("tiny_llama"), "masked_lm")
    from transformers import LlamaConfig

    with pytest.raises(ValueError, match="SSALlamaConfig or SSABertConfig"):
        build_model(LlamaConfig())


def test_parse_overrides():
    assert parse_overrides(["a=1", "b=softmax", "c=true", "d=[x, y]", "e=0.5"]) == {
        "a": 1, "b": "softmax", "c": True, "d": ["x", "y"], "e": 0.5}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_overrides(["novalue"])


def test_params_command_prints_counts(capsys):
    assert cli(["params", "tiny_llama", "decoder_114m", "--set", "attention_scoring=softmax"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ") and "preset" not in line}
    assert set(rows) == {"tiny_llama", "decoder_114m"}
    for name, line in rows.items():
        expected = count_parameters(load_model_config(name, attention_scoring="softmax"))
        assert f"{expected:,}" in line
    assert re.search(r"\| decoder_114m \| SSALlamaForCausalLM \| 12 \| 768 \| 3072 \| 24 \| 8 \| 50257 \|", out)
    assert describe_parameters("decoder_114m").parameters_m == pytest.approx(114.1, abs=0.05)


def test_params_command_reports_bad_override(capsys):
    assert cli(["params", "tiny_llama", "--set", "hidden_sz=3"]) == 2
    assert "hidden_size" in capsys.readouterr().err


@pytest.mark.parametrize("name", list_presets())
def test_parameter_counts_stated_in_preset_files_are_the_measured_ones(name):
    """A preset's comments state its size ("~27k parameters", "total = 114,133,260"); each figure matches the
    built model's count (tiny_llama said ~42k where `ssa-hf params` counts 26,800)."""
    from ssa_hf.presets import count_parameters, presets_dir

    text = (presets_dir() / f"{name}.yaml").read_text()
    measured = count_parameters(load_model_config(name))
    for value, unit in re.findall(r"~([\d.]+)\s*([kM]) parameters", text):
        claimed = float(value) * {"k": 1e3, "M": 1e6}[unit]
        assert abs(claimed - measured) <= 0.05 * measured, f"{name}: states ~{value}{unit}, counts {measured:,}"
    for exact in re.findall(r"(?:total\s+=|params \w+`: )\s*([\d,]{4,})", text):
        assert int(exact.replace(",", "")) == measured, f"{name}: states {exact}, counts {measured:,}"
