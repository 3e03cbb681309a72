"""FlexAttention on CPU, compiled (the tests elsewhere run its uncompiled path: SSA_HF_FLEX_COMPILE=0 in
tests/conftest.py; here compilation is switched back on). Scalar and per-layer parameters used to fail with an
InductorError; head dims below 32 gave wrong numbers from torch's compiled CPU kernel and now run uncompiled.
Each compilation costs 10-20 s here, so the shapes are tiny and shared."""

import pytest
import torch

from ssa_hf import SSALlamaConfig, SSALlamaForCausalLM, ssa_attention
from ssa_hf.models import flex

HEADS, LENGTH, DIM = 2, 16, 32


@pytest.fixture
def compiled_flex(monkeypatch):
    monkeypatch.setenv("SSA_HF_FLEX_COMPILE", "1")
    calls = []
    compiled = flex._compiled_flex()

    def counting():
        calls.append(1)
        return compiled

    monkeypatch.setattr(flex, "_compiled_flex", counting)
    return calls


def qkv(dim=DIM):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, HEADS, LENGTH, dim, generator=g) for _ in range(3)]


def test_compiled_flex_takes_scalar_parameters(compiled_flex):
    # floats and 0-dim tensors reach the kernel as one value broadcast to every head (as per-layer parameters do)
    q, k, v = qkv()
    b, n = 0.7, 2.0
    with torch.no_grad():
        out = ssa_attention(q, k, v, b, n, is_causal=True, backend="flex")
    assert compiled_flex, "the compiled kernel ran"
    torch.testing.assert_close(out, ssa_attention(q, k, v, b, n, is_causal=True, backend="eager"), atol=1e-5, rtol=1e-4)


def test_compiled_flex_runs_a_per_layer_model(compiled_flex):
    config = SSALlamaConfig(vocab_size=64, hidden_size=HEADS * DIM, intermediate_size=32, num_hidden_layers=1,
                            num_attention_heads=HEADS, num_key_value_heads=HEADS, scoring_granularity="layer",
                            ssa_n_init=2.0, attn_implementation="ssa_flex")
    model = SSALlamaForCausalLM(config).eval()
    ids = torch.randint(0, 64, (1, LENGTH), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        flex_logits = model(ids).logits
        model.set_attn_implementation("ssa_eager")
        eager_logits = model(ids).logits
    assert compiled_flex, "the compiled kernel ran"
    torch.testing.assert_close(flex_logits, eager_logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dim", [8, 16])
def test_small_head_dims_run_uncompiled_and_agree_with_eager(compiled_flex, dim):
    q, k, v = qkv(dim)
    with torch.no_grad():
        out = ssa_attention(q, k, v, 1.0, 1.5, backend="flex")
    assert not compiled_flex, "torch's compiled CPU kernel is wrong below head_dim 32: it must not run"
    torch.testing.assert_close(out, ssa_attention(q, k, v, 1.0, 1.5, backend="eager"), atol=1e-5, rtol=1e-4)


def test_small_head_dim_inside_a_compiled_function_is_refused_or_right():
    # inside torch.compile the kernel would be compiled anyway: refused clearly (or, where dynamo runs the call
    # outside the graph, the uncompiled path gives the right numbers) - never the compiled kernel's wrong ones
    q, k, v = qkv(16)
    compiled = torch.compile(lambda q, k, v: ssa_attention(q, k, v, 1.0, 1.5, backend="flex"))
    try:
        with torch.no_grad():
            out = compiled(q, k, v)
    except Exception as error:  # dynamo may wrap the error it traced
        assert "head_dim 16 < 32 gives wrong results when compiled" in str(error)
        assert "ssa_blockwise" in str(error)
    else:
        torch.testing.assert_close(out, ssa_attention(q, k, v, 1.0, 1.5, backend="eager"), atol=1e-5, rtol=1e-4)


def test_compiled_flex_gives_zero_for_fully_masked_rows_as_eager(compiled_flex):
    """A row with no key to attend (and a whole batch entry masked out) is 0 on every backend, flex included."""
    g = torch.Generator().manual_seed(1)
    q, k, v = [torch.randn(2, HEADS, LENGTH, DIM, generator=g) for _ in range(3)]
    mask = torch.ones(2, 1, LENGTH, LENGTH, dtype=torch.bool)
    mask[0, :, 3, :] = False
    mask[1] = False
    with torch.no_grad():
        out = ssa_attention(q, k, v, 1.0, 1.5, attn_mask=mask, backend="flex")
        reference = ssa_attention(q, k, v, 1.0, 1.5, attn_mask=mask, backend="eager")
    assert compiled_flex, "the compiled kernel ran"
    assert out.isfinite().all() and out[0, :, 3].eq(0).all() and out[1].eq(0).all()
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-4)
