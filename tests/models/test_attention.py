"""The functional API and every backend against the eager reference; the transformers registration."""

import pytest
import torch
import torch.nn.functional as F

import ssa_hf
from ssa_hf.models.attention import BACKENDS, IMPLEMENTATIONS, scored_attention, ssa_attention, supported_backends
from ssa_hf.models.scoring import SCORING_FUNCTIONS

PARAMS = {"b": [0.5, 1.0, 2.0, 0.8, 1.2, 0.3, 1.7, 1.0], "n": [1.0, 1.5, 3.0, 2.0, 1.2, 1.0, 2.5, 1.5],
          "t": [0.5, 1.0, 2.0, 1.5, 0.7, 1.1, 0.9, 1.3], "s": [0.3] * 8, "alpha": [1.5] * 8}


def literal_ssa(q, k, v, b, n, mask, scale):
    """The definition, in float64: w = f(s) / sum f(s), f(x) = (1 + b|x|)^(sgn(x) n)."""
    s = (q @ k.transpose(-1, -2)) * scale
    f = torch.pow(1 + b.view(-1, 1, 1) * s.abs(), torch.sign(s) * n.view(-1, 1, 1))
    f = torch.where(mask, f, torch.zeros_like(f))
    w = f / f.sum(-1, keepdim=True).clamp_min(1e-300)
    return w @ v


def make_inputs(batch=2, heads=8, kv_heads=2, q_len=63, kv_len=63, dim=100, dtype=torch.float32, grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, dim, generator=g, dtype=dtype) * 2
    k = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype) * 2
    v = torch.randn(batch, kv_heads, kv_len, dim, generator=g, dtype=dtype)
    # padding: batch 0 left-padded by 5 keys, batch 1 right-padded by 7 keys
    pad = torch.ones(batch, kv_len, dtype=torch.bool)
    pad[0, : min(5, kv_len - 1)] = False
    if batch > 1:
        pad[1, -min(7, kv_len - 1) :] = False
    mask = pad[:, None, None, :].expand(batch, 1, q_len, kv_len)
    return [t.requires_grad_(grad) for t in (q, k, v)], mask


def params_for(scoring, heads=8, grad=False):
    spec = SCORING_FUNCTIONS[scoring]
    return {name: torch.tensor(PARAMS[name][:heads], requires_grad=grad) for name in spec.parameter_names if name in PARAMS}


def test_ssa_attention_matches_literal_formula_float64():
    (q, k, v), mask = make_inputs(heads=4, kv_heads=4, q_len=9, kv_len=9, dim=16, dtype=torch.float64)
    b, n = torch.tensor([0.5, 1.0, 2.0, 0.8], dtype=torch.float64), torch.tensor([1.0, 1.5, 3.0, 2.0], dtype=torch.float64)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    out = ssa_attention(q, k, v, b, n, attn_mask=mask, is_causal=True, backend="eager")
    expected = literal_ssa(q, k, v, b, n, mask & causal, 16**-0.5)
    rows_with_keys = (mask & causal).any(-1, keepdim=True).expand_as(out)
    torch.testing.assert_close(out[rows_with_keys], expected[rows_with_keys])
    assert (out[~rows_with_keys] == 0).all(), "fully masked query rows give zeros"


def test_gradcheck_ssa_float64_q_k_v_b_n():
    (q, k, v), mask = make_inputs(batch=1, heads=2, kv_heads=2, q_len=4, kv_len=5, dim=3, dtype=torch.float64, grad=True)
    mask = torch.ones(1, 1, 4, 5, dtype=torch.bool)
    mask[..., 0, 4] = False
    b = torch.tensor([0.7, 1.4], dtype=torch.float64, requires_grad=True)
    n = torch.tensor([1.3, 2.2], dtype=torch.float64, requires_grad=True)
    fn = lambda q, k, v, b, n: ssa_attention(q, k, v, b, n, attn_mask=mask, backend="eager")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v, b, n))
    # and the gradients equal those of the literal definition
    ours = torch.autograd.grad(fn(q, k, v, b, n).sum(), (q, k, v, b, n))
    literal = torch.autograd.grad(literal_ssa(q, k, v, b, n, mask, 3**-0.5).sum(), (q, k, v, b, n))
    for a, e in zip(ours, literal):
        torch.testing.assert_close(a, e)


# every (backend, scoring) pair a backend claims to run on CPU, inference and training
CASES = [(b, s, g) for s in SCORING_FUNCTIONS for g in (False, True) for b in supported_backends(s, "cpu", g) if b != "eager"]


@pytest.mark.parametrize("backend,scoring,grad", CASES, ids=[f"{b}-{s}-{'train' if g else 'infer'}" for b, s, g in CASES])
@pytest.mark.parametrize("causal", [False, True])
def test_backend_agrees_with_eager(backend, scoring, grad, causal):
    (q, k, v), mask = make_inputs(grad=grad)
    params = params_for(scoring, grad=grad)
    kwargs = dict(attn_mask=mask, is_causal=causal, enable_gqa=True)
    out = scored_attention(q, k, v, scoring, params, backend=backend, **kwargs)
    ref_inputs = [t.detach().clone().requires_grad_(grad) for t in (q, k, v)]
    ref_params = {n: p.detach().clone().requires_grad_(grad) for n, p in params.items()}
    ref = scored_attention(*ref_inputs, scoring, ref_params, backend="eager", **kwargs)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    if grad:
        upstream = torch.randn_like(out)
        got = torch.autograd.grad(out, [q, k, v, *params.values()], upstream)
        want = torch.autograd.grad(ref, [*ref_inputs, *ref_params.values()], upstream)
        for name, a, e in zip(["q", "k", "v", *params], got, want):
            torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4, msg=lambda m: f"grad {name}: {m}")


@pytest.mark.parametrize("scoring", ["softmax", "temperature", "ssa", "ssmax", "softmax1"])
def test_flex_causal_without_mask_agrees_with_eager(scoring):
    """is_causal with no mask: flex uses a causal mask_mod and a cached block mask (no dense mask), SSMax counts
    the keys of each causal row."""
    (q, k, v), _ = make_inputs(q_len=37, kv_len=37)
    params = params_for(scoring, grad=False)
    out = scored_attention(q, k, v, scoring, params, is_causal=True, enable_gqa=True, backend="flex")
    ref = scored_attention(q, k, v, scoring, params, is_causal=True, enable_gqa=True, backend="eager")
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backend", ["eager", "blockwise", "flex"])
def test_half_precision_is_finite_and_close_to_fp32(dtype, backend):
    (q, k, v), mask = make_inputs(q_len=33, kv_len=33, dim=32)
    b, n = torch.tensor(PARAMS["b"]), torch.tensor(PARAMS["n"])
    ref = ssa_attention(q * 8, k * 8, v, b, n, attn_mask=mask, enable_gqa=True, backend="eager")  # large scores
    out = ssa_attention((q * 8).to(dtype), (k * 8).to(dtype), v.to(dtype), b, n, attn_mask=mask, enable_gqa=True, backend=backend)
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)


def test_softmax_scoring_equals_sdpa():
    (q, k, v), mask = make_inputs(kv_heads=8)
    ours = scored_attention(q, k, v, "softmax", attn_mask=mask, is_causal=False, backend="eager")
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, sdpa, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "blockwise", "flex"])
def test_ssa_is_not_softmax_on_any_backend(backend):
    # large scores: a silent fallback to softmax would make these equal
    (q, k, v), _ = make_inputs(kv_heads=8, q_len=20, kv_len=20, dim=16)
    q, k = q * 6, k * 6
    ssa = ssa_attention(q, k, v, 1.0, 1.5, is_causal=True, backend=backend)
    softmax = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (ssa - softmax).abs().max() > 0.05


def test_auto_backend_choice(caplog):
    (q, k, v), _ = make_inputs(kv_heads=8, q_len=300, kv_len=300, dim=8, grad=True)
    from ssa_hf.models.attention import choose_backend

    spec = SCORING_FUNCTIONS["ssa"]
    assert choose_backend(spec, torch.device("cpu"), True, 0.0, 300, 300)[0] == "blockwise"
    assert choose_backend(spec, torch.device("cpu"), False, 0.0, 8, 8)[0] == "blockwise"  # fastest at every size
    assert choose_backend(spec, torch.device("cpu"), False, 0.0, 8, 8, need_weights=True)[0] == "eager"
    assert choose_backend(spec, torch.device("cuda"), False, 0.0, 1, 300)[0] == "eager"  # decoding: no recompiles
    assert choose_backend(SCORING_FUNCTIONS["sparsemax"], torch.device("cpu"), True, 0.0, 300, 300)[0] == "eager"
    assert choose_backend(spec, torch.device("cpu"), True, 0.1, 300, 300)[0] == "eager"  # dropout
    assert choose_backend(spec, torch.device("cuda"), True, 0.0, 300, 300)[0] == "flex"


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(backend="flex", grad=True), NotImplementedError, "forward-only"),
        (dict(backend="blockwise", scoring="sparsemax"), NotImplementedError, "runs only"),
        (dict(backend="flex", scoring="sigmoid"), NotImplementedError, "not a modification of softmax"),
        (dict(backend="warp"), ValueError, "Unknown backend"),
        (dict(scoring="nope"), ValueError, "Unknown scoring function"),
        (dict(float_mask=True), ValueError, "boolean"),
        (dict(b=-1.0), ValueError, "b must be > 0"),
        (dict(b=float("nan")), ValueError, "b must be finite"),
        (dict(no_gqa=True), ValueError, "enable_gqa"),
    ],
)
def test_refusals_say_what_to_do(kwargs, error, match):
    (q, k, v), mask = make_inputs(q_len=5, kv_len=5, dim=4, grad=kwargs.pop("grad", False))
    scoring = kwargs.pop("scoring", "ssa")
    params = {"b": kwargs.pop("b", 1.0), "n": 1.5} if scoring == "ssa" else {}
    attn_mask = torch.zeros_like(mask, dtype=torch.float32) if kwargs.pop("float_mask", False) else mask
    gqa = not kwargs.pop("no_gqa", False)
    with pytest.raises(error, match=match):
        scored_attention(q, k, v, scoring, params, attn_mask=attn_mask, enable_gqa=gqa, **kwargs)


def test_flex_compiled_forward_matches_eager():
    # the one compiled FlexAttention call of this file (CPU inference path; head_dim >= 32, see flex.py)
    from ssa_hf.models.flex import flex_scored_attention

    (q, k, v), mask = make_inputs(heads=4, kv_heads=2, q_len=32, kv_len=32, dim=32)
    params = params_for("ssa", heads=4)
    out = flex_scored_attention(q, k, v, SCORING_FUNCTIONS["ssa"], params, mask, 0.25, compile=True)
    ref = scored_attention(q, k, v, "ssa", params, attn_mask=mask, enable_gqa=True, scale=0.25, backend="eager")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)


def test_registered_with_transformers():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    for name in IMPLEMENTATIONS:
        assert name in AttentionInterface._global_mapping
        assert name in AttentionMaskInterface._global_mapping
    assert set(BACKENDS) == {"eager", "flex", "blockwise"}
    assert ssa_hf.ssa_attention is ssa_attention
