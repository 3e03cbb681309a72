"""The backend table (ssa_hf/models/backends.py): every backend against eager on what it claims to run, the automatic
choice, and what each backend refuses (linear attention runs on eager only)."""

import pytest
import torch
import torch.nn.functional as F

from ssa_hf.models.attention import BACKENDS, scored_attention, ssa_attention, supported_backends
from ssa_hf.models import attention as attention_module
from ssa_hf.models.backends import AttentionCall, choose_backend, dispatch, infer
from ssa_hf.models.linear import LINEAR_ATTENTIONS
from ssa_hf.models.scoring import SCORING_FUNCTIONS, get_scoring_function

from .inputs import PARAMS, make_inputs, params_for, qkv

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


@pytest.mark.parametrize("scoring,backend", [("ssa", "blockwise"), ("ssa", "flex"), ("ssmax", "flex"), ("softmax1", "flex")])
def test_a_mask_per_head_agrees_with_eager(scoring, backend):
    """A [B, H, Lq, Lk] mask, one row of one head fully masked (flex raised a bare broadcast error on it, and its
    SSMax key counts read head 0's mask)."""
    (q, k, v), _ = make_inputs(q_len=9, kv_len=9)
    mask = torch.rand(q.shape[0], q.shape[1], 9, 9, generator=torch.Generator().manual_seed(1)) > 0.4
    mask[..., 0] = True
    mask[-1, -1, 3] = False
    params = params_for(scoring, grad=False)
    out = scored_attention(q, k, v, scoring, params, attn_mask=mask, enable_gqa=True, backend=backend)
    ref = scored_attention(q, k, v, scoring, params, attn_mask=mask, enable_gqa=True, backend="eager")
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    assert (out[-1, -1, 3] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backend", ["eager", "blockwise", "flex"])
def test_half_precision_is_finite_and_close_to_fp32(dtype, backend):
    (q, k, v), mask = make_inputs(q_len=33, kv_len=33, dim=32)
    b, n = torch.tensor(PARAMS["b"]), torch.tensor(PARAMS["n"])
    ref = ssa_attention(q * 8, k * 8, v, b, n, attn_mask=mask, enable_gqa=True, backend="eager")  # large scores
    out = ssa_attention((q * 8).to(dtype), (k * 8).to(dtype), v.to(dtype), b, n, attn_mask=mask, enable_gqa=True, backend=backend)
    assert out.dtype == dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("backend", ["eager", "blockwise", "flex"])
def test_ssa_is_not_softmax_on_any_backend(backend):
    # large scores: a silent fallback to softmax would make these equal
    (q, k, v), _ = make_inputs(kv_heads=8, q_len=20, kv_len=20, dim=16)
    q, k = q * 6, k * 6
    ssa = ssa_attention(q, k, v, 1.0, 1.5, is_causal=True, backend=backend)
    softmax = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (ssa - softmax).abs().max() > 0.05


INFER_CASES = [(b, s) for s in ("softmax", "ssa", "ssmax", "linear") for b in supported_backends(s, "cpu", False)]


@pytest.mark.parametrize("backend,scoring", INFER_CASES, ids=[f"{b}-{s}" for b, s in INFER_CASES])
@pytest.mark.parametrize("masked", [False, True])
def test_infer_runs_what_dispatch_runs(backend, scoring, masked):
    """A call without gradients takes `infer` (arguments straight to the backend: no AttentionCall); it gives what
    `dispatch` gives for the same call, on every backend that runs it."""
    (q, k, v), mask = make_inputs(heads=4, kv_heads=4, q_len=7, kv_len=11, dim=16)
    mask = mask if masked else None
    spec = get_scoring_function(scoring)
    given = params_for(scoring, heads=4) if scoring in SCORING_FUNCTIONS else {}
    params = attention_module._head_params(spec, given, 4, q, k)
    call = AttentionCall(q, k, v, spec, params, mask, 0.3, is_causal=not masked)
    want = dispatch(call, backend)[0]
    got = infer(spec, params, q, k, v, mask, not masked, 0.3, backend)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    via_public = scored_attention(q, k, v, scoring, given, attn_mask=mask,
                                  is_causal=not masked, scale=0.3, backend=backend)
    torch.testing.assert_close(via_public, want, atol=0, rtol=0)


def test_auto_backend_choice(caplog):
    (q, k, v), _ = make_inputs(kv_heads=8, q_len=300, kv_len=300, dim=8, grad=True)
    spec = SCORING_FUNCTIONS["ssa"]
    assert choose_backend(spec, torch.device("cpu"), True, 0.0, 300, 300)[0] == "blockwise"
    assert choose_backend(spec, torch.device("cpu"), False, 0.0, 8, 8)[0] == "blockwise"  # fastest at every size
    assert choose_backend(spec, torch.device("cpu"), False, 0.0, 8, 8, need_weights=True)[0] == "eager"
    assert choose_backend(spec, torch.device("cuda"), False, 0.0, 1, 300)[0] == "eager"  # decoding: no recompiles
    assert choose_backend(SCORING_FUNCTIONS["sparsemax"], torch.device("cpu"), True, 0.0, 300, 300)[0] == "eager"
    assert choose_backend(spec, torch.device("cpu"), True, 0.1, 300, 300)[0] == "eager"  # dropout
    assert choose_backend(spec, torch.device("cuda"), True, 0.0, 300, 300)[0] == "flex"


def test_flex_compiled_forward_matches_eager():
    # the one compiled FlexAttention call of this file (CPU inference path; head_dim >= 32, see flex.py)
    from ssa_hf.models.flex import flex_scored_attention

    (q, k, v), mask = make_inputs(heads=4, kv_heads=2, q_len=32, kv_len=32, dim=32)
    params = params_for("ssa", heads=4)
    out = flex_scored_attention(q, k, v, SCORING_FUNCTIONS["ssa"], params, mask, 0.25, compile=True)
    ref = scored_attention(q, k, v, "ssa", params, attn_mask=mask, enable_gqa=True, scale=0.25, backend="eager")
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)


def test_linear_attention_runs_on_eager_only():
    for name in LINEAR_ATTENTIONS:
        assert supported_backends(name) == ["eager"] and supported_backends(name, needs_grad=False) == ["eager"]
    assert supported_backends(["ssa", "softmax"]) == ["eager", "blockwise"]
    assert supported_backends(["ssa", "linear"]) == ["eager"]
    q, k, v = qkv(dtype=torch.float32)
    for backend in ("flex", "blockwise"):
        if BACKENDS[backend].refuses(get_scoring_function("softmax"), False, q.device, 0.0):
            continue  # this backend is unavailable here for any scoring function
        with pytest.raises(NotImplementedError, match="linear attention, which runs in linear time on backend 'eager'"):
            scored_attention(q, k, v, "linear", enable_gqa=True, backend=backend)
