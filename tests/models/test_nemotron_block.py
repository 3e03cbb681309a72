"""SSALlama's block options (mlp_type, norm_type, partial_rotary_factor) and the `raw` SSA parametrisation: the
Nemotron-faithful block of the decoder_114m preset."""

from __future__ import annotations

import pytest
import torch

import ssa_hf  # noqa: F401  (registers the classes)
from ssa_hf import SSALlamaConfig, SSALlamaForCausalLM
from ssa_hf.models.modeling_ssa_llama import PartialRotaryEmbedding, SquaredReLUMLP, ZeroCentredLayerNorm

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, max_position_embeddings=64)
NEMOTRON = dict(mlp_type="relu2", norm_type="layernorm1p", partial_rotary_factor=0.5, initializer_range=0.0134)


def model(seed: int = 0, **fields) -> SSALlamaForCausalLM:
    torch.manual_seed(seed)
    return SSALlamaForCausalLM(SSALlamaConfig(**{**SMALL, **fields})).eval()


def test_defaults_are_llama_and_unchanged():
    config = SSALlamaConfig(**SMALL)
    assert (config.mlp_type, config.norm_type, config.rotary_fraction()) == ("swiglu", "rmsnorm", 1.0)
    # like stock Llama: no partial_rotary_factor attribute (transformers' RoPE code reads it when present) and none
    # in rope_parameters unless asked for
    assert not hasattr(config, "partial_rotary_factor") and "partial_rotary_factor" not in config.rope_parameters
    layer = model().model.layers[0]
    assert type(layer.mlp).__name__ == "LlamaMLP" and type(layer.input_layernorm).__name__ == "LlamaRMSNorm"
    assert type(model().model.rotary_emb).__name__ == "LlamaRotaryEmbedding"
    # a config.json written before these fields existed loads with the defaults
    old = SSALlamaConfig(**SMALL).to_dict()
    for key in ("mlp_type", "norm_type"):
        old.pop(key)
    assert SSALlamaConfig.from_dict(old).mlp_type == "swiglu"


def test_nemotron_block_shapes_and_initialisation():
    m = model(**NEMOTRON)
    layer = m.model.layers[0]
    assert isinstance(layer.mlp, SquaredReLUMLP) and not hasattr(layer.mlp, "gate_proj")
    assert layer.mlp.up_proj.weight.shape == (96, 32) and layer.mlp.down_proj.weight.shape == (32, 96)
    for norm in (layer.input_layernorm, layer.post_attention_layernorm, m.model.norm):
        assert isinstance(norm, ZeroCentredLayerNorm)
        assert torch.count_nonzero(norm.weight) == 0 and torch.count_nonzero(norm.bias) == 0  # gamma - 1 = 0
    assert isinstance(m.model.rotary_emb, PartialRotaryEmbedding)
    # head_dim 16, factor 0.5: 4 rotating pairs with the frequencies of an 8-dimensional RoPE, 4 still pairs
    expected = 1.0 / (10000.0 ** (torch.arange(0, 8, 2).float() / 8))
    assert torch.allclose(m.model.rotary_emb.inv_freq, torch.cat([expected, torch.zeros(4)]))
    assert m.config.hidden_act == "relu2"
    assert abs(layer.mlp.up_proj.weight.std().item() - 0.0134) < 0.002  # initializer_range
    logits = m(torch.randint(0, 64, (2, 12))).logits
    assert logits.shape == (2, 12, 64) and torch.isfinite(logits).all()


def test_each_option_changes_the_output():
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    base = model().model(ids).last_hidden_state
    for option in ({"mlp_type": "relu2"}, {"norm_type": "layernorm1p"}, {"partial_rotary_factor": 0.5}):
        changed = model(**option)
        changed.load_state_dict(model().state_dict(), strict=False)  # same shared weights
        out = changed.model(ids).last_hidden_state
        assert not torch.allclose(out, base, atol=1e-5), option


def test_squared_relu_mlp_and_layernorm1p_compute_what_they_say():
    config = SSALlamaConfig(**SMALL, mlp_type="relu2")
    mlp = SquaredReLUMLP(config)
    x = torch.randn(3, 32)
    assert torch.allclose(mlp(x), mlp.down_proj(torch.relu(mlp.up_proj(x)) ** 2))
    norm = ZeroCentredLayerNorm(32, eps=1e-5)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    reference = torch.nn.functional.layer_norm(x, (32,), eps=1e-5) * (1 + norm.weight) + norm.bias
    assert torch.allclose(norm(x), reference, atol=1e-6)


def _neox_partial_rope(x, positions, rotated, base=10000.0):
    """Nemotron's layout: RoPE (rotate-half within them) on the first `rotated` dimensions, the rest unchanged."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotated, 2).float() / rotated))
    angles = positions[:, None].float() * inv_freq
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    head, rest = x[..., :rotated], x[..., rotated:]
    half = rotated // 2
    turned = torch.cat([-head[..., half:], head[..., :half]], -1)
    return torch.cat([head * cos + turned * sin, rest], -1)


def test_partial_rope_equals_nemotrons_up_to_a_permutation_of_head_dimensions():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    config = SSALlamaConfig(**SMALL, partial_rotary_factor=0.5)
    d, r = config.head_dim, 8
    positions = torch.arange(10)
    cos, sin = PartialRotaryEmbedding(config)(torch.zeros(1), positions[None])
    q, k = torch.randn(1, 1, 10, d), torch.randn(1, 1, 10, d)
    ours_q, ours_k = apply_rotary_pos_emb(q, k, cos, sin)
    # ours rotates pairs (i, i + d/2), i < r/2; Nemotron pairs (j, j + r/2), j < r/2, within the first r dims
    perm = list(range(r // 2)) + list(range(d // 2, d // 2 + r // 2)) + list(range(r // 2, d // 2)) + list(range(d // 2 + r // 2, d))
    neox_q, neox_k = _neox_partial_rope(q[..., perm], positions, r), _neox_partial_rope(k[..., perm], positions, r)
    assert torch.allclose(ours_q[..., perm], neox_q, atol=1e-5) and torch.allclose(ours_k[..., perm], neox_k, atol=1e-5)
    scores_ours = ours_q @ ours_k.transpose(-1, -2)
    assert torch.allclose(scores_ours, neox_q @ neox_k.transpose(-1, -2), atol=1e-4)


def test_save_load_and_generate(tmp_path):
    m = model(**NEMOTRON, scoring_granularity="layer", scoring_parametrization="raw", ssa_b_init=0.8, ssa_learn_b=False)
    ids = torch.randint(0, 64, (1, 6))
    m.save_pretrained(tmp_path)
    loaded = SSALlamaForCausalLM.from_pretrained(tmp_path).eval()
    assert (loaded.config.mlp_type, loaded.config.norm_type, loaded.config.rotary_fraction()) == ("relu2", "layernorm1p", 0.5)
    assert isinstance(loaded.model.rotary_emb, PartialRotaryEmbedding)
    assert torch.equal(m(ids).logits, loaded(ids).logits)
    out = loaded.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False)
    assert out.shape == (1, 11) and torch.equal(out[:, :6], ids)
    # incremental decoding with the KV cache matches a full forward pass
    with torch.no_grad():
        full = loaded(out[:, :-1]).logits[:, -1]
    assert torch.equal(full.argmax(-1), out[:, -1])


def test_raw_n_is_unclamped_and_loads_below_one(tmp_path):
    m = model(scoring_granularity="layer", scoring_parametrization="raw", ssa_b_init=0.8, ssa_learn_b=False, ssa_n_init=1.5)
    scoring = m.model.layers[0].self_attn.scoring
    assert torch.allclose(scoring()["n"], torch.tensor([1.5, 1.5]))
    with torch.no_grad():
        scoring.params["n"].raw.fill_(0.7)  # below 1: softplus would never get there, exp only above 0
    assert torch.allclose(scoring()["n"], torch.tensor([0.7, 0.7]))
    assert scoring.params["n"].raw.requires_grad
    m.save_pretrained(tmp_path)
    loaded = SSALlamaForCausalLM.from_pretrained(tmp_path)  # any finite n loads under `raw`
    assert torch.allclose(loaded.model.layers[0].self_attn.scoring()["n"], torch.tensor([0.7, 0.7]))
    with torch.no_grad():
        loaded.model.layers[0].self_attn.scoring.params["n"].raw.fill_(float("nan"))
    with pytest.raises(ValueError, match="not finite"):
        loaded.validate_scoring_parameters()


@pytest.mark.parametrize("bad,message", [
    ({"mlp_type": "geglu"}, "mlp_type must be one of"),
    ({"norm_type": "layernorm"}, "norm_type must be one of"),
    ({"partial_rotary_factor": 0.0}, r"partial_rotary_factor must be a number in \(0, 1\]"),
    ({"partial_rotary_factor": 1.5}, r"partial_rotary_factor must be a number in \(0, 1\]"),
    ({"partial_rotary_factor": 0.3}, "whole even number"),
    ({"partial_rotary_factor": 0.0625}, "whole even number"),  # 1 of 16 dimensions
    ({"mlp_type": "relu2", "hidden_act": "gelu"}, "mlp_type='relu2' uses squared ReLU"),
    ({"partial_rotary_factor": 0.5, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
     "rope_type 'default' only"),
    ({"partial_rotary_factor": 0.5, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25}},
     "disagrees"),
    ({"scoring_parametrization": "clamped"}, "scoring_parametrization must be one of"),
])
def test_bad_values_are_refused_with_the_field_named(bad, message):
    with pytest.raises(ValueError, match=message):
        SSALlamaConfig(**{**SMALL, **bad})
