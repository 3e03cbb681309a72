"""The functional API (ssa_hf/models/attention.py) against the float64 oracle, its refusals, and the registration
with transformers. Each backend against eager is in test_backends.py."""

import pytest
import torch
import torch.nn.functional as F

import ssa_hf
from ssa_hf.models.attention import BACKENDS, IMPLEMENTATIONS, scored_attention, ssa_attention
from ssa_hf.models.scoring import SCORING_FUNCTIONS

from . import oracle
from .inputs import make_inputs, params_for

def test_ssa_attention_matches_literal_formula_float64():
    (q, k, v), mask = make_inputs(heads=4, kv_heads=4, q_len=9, kv_len=9, dim=16, dtype=torch.float64)
    b, n = torch.tensor([0.5, 1.0, 2.0, 0.8], dtype=torch.float64), torch.tensor([1.0, 1.5, 3.0, 2.0], dtype=torch.float64)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    out = ssa_attention(q, k, v, b, n, attn_mask=mask, is_causal=True, backend="eager")
    expected, _ = oracle.attention(q, k, v, "ssa", {"b": b, "n": n}, mask & causal, scale=16**-0.5)
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
    literal = torch.autograd.grad(oracle.attention(q, k, v, "ssa", {"b": b, "n": n}, mask, scale=3**-0.5)[0].sum(), (q, k, v, b, n))
    for a, e in zip(ours, literal):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scoring", list(SCORING_FUNCTIONS))
def test_eager_attention_matches_the_oracle_float64(scoring, causal):
    """Every row-wise scoring function through the functional API (GQA, padding, causal) against the formula."""
    (q, k, v), mask = make_inputs(heads=4, kv_heads=2, q_len=7, kv_len=7, dim=5, dtype=torch.float64)
    params = {name: p.double() for name, p in params_for(scoring, heads=4).items()}
    out, weights = scored_attention(q, k, v, scoring, params, attn_mask=mask, is_causal=causal, enable_gqa=True,
                                    backend="eager", return_weights=True)
    want, want_weights = oracle.attention(q, k, v, scoring, params, mask, causal)
    torch.testing.assert_close(weights, want_weights, atol=1e-7, rtol=1e-6)
    torch.testing.assert_close(out, want, atol=1e-7, rtol=1e-6)


def test_softmax_scoring_equals_sdpa():
    (q, k, v), mask = make_inputs(kv_heads=8)
    ours = scored_attention(q, k, v, "softmax", attn_mask=mask, is_causal=False, backend="eager")
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, sdpa, atol=1e-5, rtol=1e-5)


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


def test_per_head_tensors_checked_before_are_checked_again_once_changed():
    """scored_attention remembers b, n tensors whose values passed its checks (a decoding loop passes the same ones
    each call), but an in-place edit, a `.data` swap or a new tensor with the same values is looked at again:
    a bad value is refused on the next call, and the output follows the new values."""
    (q, k, v), _ = make_inputs(kv_heads=8, q_len=1, kv_len=6, dim=4)
    heads = q.shape[1]
    b, n = torch.full((heads,), 0.8), torch.full((heads,), 1.5)
    first = scored_attention(q, k, v, "ssa", {"b": b, "n": n})
    torch.testing.assert_close(scored_attention(q, k, v, "ssa", {"b": b, "n": n}), first)
    b[1] = float("nan")
    with pytest.raises(ValueError, match="b must be finite"):
        scored_attention(q, k, v, "ssa", {"b": b, "n": n})
    b.fill_(0.8)
    torch.testing.assert_close(scored_attention(q, k, v, "ssa", {"b": b, "n": n}), first)
    n.data = torch.full((heads,), -2.0)
    with pytest.raises(ValueError, match="n must be > 0"):
        scored_attention(q, k, v, "ssa", {"b": b, "n": n})
    n.data = torch.full((heads,), 3.0)
    third = scored_attention(q, k, v, "ssa", {"b": b, "n": n})
    torch.testing.assert_close(third, ssa_attention(q, k, v, 0.8, 3.0))
    assert not torch.allclose(third, first)


def test_per_head_tensors_made_in_inference_mode_are_checked_on_every_call():
    """Inference tensors have no version counter: on the CPU they are remembered by their values (elsewhere not
    at all), so they work, and a bad value written in place is still refused."""
    (q, k, v), _ = make_inputs(kv_heads=8, q_len=1, kv_len=6, dim=4)
    with torch.inference_mode():
        b, n = torch.full((q.shape[1],), 0.8), torch.full((q.shape[1],), 1.5)
        first = scored_attention(q, k, v, "ssa", {"b": b, "n": n})
        torch.testing.assert_close(scored_attention(q, k, v, "ssa", {"b": b, "n": n}), first)
        b.fill_(0.5)  # a valid new value is followed, not the remembered one
        torch.testing.assert_close(scored_attention(q, k, v, "ssa", {"b": b, "n": n}), ssa_attention(q, k, v, 0.5, 1.5))
        b[0] = -1.0
        with pytest.raises(ValueError, match="b must be > 0"):
            scored_attention(q, k, v, "ssa", {"b": b, "n": n})


def test_registered_with_transformers():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    for name in IMPLEMENTATIONS:
        assert name in AttentionInterface._global_mapping
        assert name in AttentionMaskInterface._global_mapping
    assert set(BACKENDS) == {"eager", "flex", "blockwise"}
    assert ssa_hf.ssa_attention is ssa_attention


def test_inference_reuses_a_layers_scoring_groups_until_its_parameters_change():
    """No-grad calls compute each layer's state (scoring groups, bound runner) once; an optimizer step, an in-place
    edit or a load (also one that assigns new tensors) make the next call build a new one, so outputs always follow
    the parameters; calls with gradients compute the groups in the graph."""
    from tests.models.tiny import build

    model = build("llama", "ssa", seed=1).eval()
    ids = torch.randint(4, model.config.vocab_size, (1, 12))
    layer = model.model.layers[0].self_attn

    def state():
        return layer.scoring.__dict__["_ssa_layer_state"]

    with torch.no_grad():
        first = model(ids).logits
        cached = state()
        assert cached.groups is not None and cached.runners
        again = model(ids).logits
        assert state() is cached  # reused, not rebuilt
        torch.testing.assert_close(again, first)
        for p in layer.scoring.parameters():
            p.add_(0.3)  # in place: the version counter moves
        edited = model(ids).logits
        assert state() is not cached
        assert not torch.allclose(edited, first)
    reference = build("llama", "ssa", seed=1).eval()
    state_dict = {k: v.clone() for k, v in reference.state_dict().items()}
    before = state()
    model.load_state_dict(state_dict, assign=True)  # new tensors: the owner's entry no longer holds the snapshot's
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, first)
    assert state() is not before
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model.train()
    loss = model(ids, labels=ids).loss  # with gradients: no cache involved, the graph reaches the parameters
    loss.backward()
    assert all(p.grad is not None for p in layer.scoring.parameters() if p.requires_grad)
    optimizer.step()
    model.eval()
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, first)


# --------------------------------------------------------------------------------------------------
# b and n checked where they change, not per call
# --------------------------------------------------------------------------------------------------


def _first_b(model):
    return model.model.layers[1].self_attn.scoring.params["b"]


def _nan_b_after_load(model, tmp_path):
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path)
    with torch.no_grad():
        _first_b(loaded).raw[1] = float("nan")
    return loaded


def _nan_b_by_optimizer_step(model, tmp_path, foreach=False):
    ids = torch.randint(4, model.config.vocab_size, (1, 12))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
    model.train()
    model(ids, labels=ids).loss.backward()
    _first_b(model).raw.grad[1] = float("nan")  # a non-finite gradient reaches the update
    optimizer.step()
    return model


def _nan_b_by_load_state_dict(model, tmp_path, assign=False):
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    key = next(k for k in weights if k.endswith("layers.1.self_attn.scoring.params.b.raw"))
    weights[key][1] = float("nan")
    model.load_state_dict(weights, assign=assign)
    return model


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("damage", [
    _nan_b_after_load, _nan_b_by_optimizer_step, lambda m, p: _nan_b_by_optimizer_step(m, p, foreach=True),
    _nan_b_by_load_state_dict, lambda m, p: _nan_b_by_load_state_dict(m, p, assign=True),
], ids=["after_load", "optimizer_step", "optimizer_step_foreach", "load_state_dict", "load_state_dict_assign"])
def test_a_nan_b_fails_loudly_before_the_next_call_uses_it(damage, grad, tmp_path):
    from tests.models.tiny import build

    model = build("llama", "ssa", seed=1).eval()
    ids = torch.randint(4, model.config.vocab_size, (1, 12))
    with torch.no_grad():
        model(ids)  # every layer has a checked state now
    model = damage(model, tmp_path)
    with torch.set_grad_enabled(grad), pytest.raises(ValueError, match=r"layer 1 .*scoring\.b: not finite, got \[.*nan"):
        model(ids)


def test_an_out_of_range_fixed_n_loaded_into_a_model_is_refused():
    from tests.models.tiny import build

    model = build("llama", "ssa", ssa_learn_n=False).eval()
    ids = torch.randint(4, model.config.vocab_size, (1, 12))
    weights = model.state_dict()
    weights["model.layers.0.self_attn.scoring.params.n.value"] = torch.full((4,), 0.5)
    model.load_state_dict(weights)
    with torch.no_grad(), pytest.raises(ValueError, match=r"layer 0 .*scoring\.n: must be >= 1"):
        model(ids)


def test_a_mixture_with_a_nan_parameter_names_its_group():
    from tests.models.tiny import build

    model = build("llama", ["ssa", "ssa", "softmax", "temperature"]).eval()
    ids = torch.randint(4, model.config.vocab_size, (1, 12))
    with torch.no_grad():
        model(ids)
        model.model.layers[0].self_attn.scoring.groups["ssa"].params["n"].raw.fill_(float("nan"))
        with pytest.raises(ValueError, match=r"scoring\.groups\.ssa\.n: not finite"):
            model(ids)


def test_decoding_checks_the_values_once_per_layer_not_per_step(monkeypatch):
    """A greedy generate with the KV cache checks each layer's b and n when its state is built, never again while
    they stay unchanged; an edit between two generates is checked (and refused) at the next one."""
    from ssa_hf.models.settings import ScoringParameters
    from tests.models.tiny import build

    model = build("llama", "ssa", seed=2).eval()
    checks = []
    real = ScoringParameters.parameter_problems
    monkeypatch.setattr(ScoringParameters, "parameter_problems", lambda self, prefix="": checks.append(1) or real(self, prefix))
    ids = torch.randint(4, model.config.vocab_size, (1, 5))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    assert out.shape[1] == 11 and len(checks) == model.config.num_hidden_layers
    with torch.no_grad():
        model.model.layers[0].self_attn.scoring.params["n"].raw.fill_(float("inf"))
        with pytest.raises(ValueError, match=r"layer 0 .*scoring\.n: not finite"):
            model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)


def test_a_standard_implementation_set_by_hand_runs_the_configured_scoring():
    """`config._attn_implementation = "sdpa"` (or "eager") on an SSA model would make transformers call its softmax
    (a hand edit bypasses the aliases): the forward maps it as a request of that name is mapped, so the SSA model
    gives its own logits, never softmax's; a name that cannot run SSA set by hand is refused (test_modeling)."""
    from tests.models.tiny import build

    ids = torch.randint(4, 64, (1, 6))
    model = build("llama", "ssa").eval()
    with torch.no_grad():
        want = model(ids).logits
        for name, runs in (("sdpa", "ssa_auto"), ("eager", "ssa_eager")):
            model.config._attn_implementation = name
            torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-6)
            assert model.config._attn_implementation == runs
    softmax = build("llama", "softmax").eval()
    softmax.config._attn_implementation = "sdpa"
    with torch.no_grad():
        assert softmax(ids).logits.isfinite().all()


def test_a_model_made_under_inference_mode_runs_and_still_refuses_a_nan_b():
    """Tensors made under torch.inference_mode have no version counter: the layer state compares their values
    instead, so such a model decodes, and an in-place NaN (possible only inside inference mode) is still refused."""
    from tests.models.tiny import build

    ids = torch.randint(4, 64, (1, 6))
    with torch.inference_mode():
        model = build("llama", "ssa").eval()
        first = model(ids).logits
        out = model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0)
        torch.testing.assert_close(model(ids).logits, first)
        model.model.layers[0].self_attn.scoring.params["b"].raw[0] = float("nan")
        with pytest.raises(ValueError, match=r"layer 0 .*scoring\.b: not finite"):
            model(ids)
    assert out.shape == (1, 9)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_bf16_autocast_runs_the_kernel_in_bf16_in_training_and_decoding(family, monkeypatch):
    """Mixed precision (float32 weights under CPU bf16 autocast) gives the fused kernel bf16 q, k and v, as autocast
    gives them to SDPA, in a training step and in every decoding step (whose bound runner would otherwise read
    Llama's float32 RoPE outputs beside bf16 values and compute in float32)."""
    from ssa_hf.models import blockwise as bw
    from tests.models.tiny import build

    seen = []
    real = bw._kernel_forward
    monkeypatch.setattr(bw, "_kernel_forward", lambda q, k, v, *rest: seen.append((q.dtype, k.dtype, v.dtype))
                        or real(q, k, v, *rest))
    model = build(family, "ssa", seed=3).train()
    ids = torch.randint(4, model.config.vocab_size, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss) and len(seen) == model.config.num_hidden_layers
    training = len(seen)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model.eval().generate(ids[:1], max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape[1] == 16 and len(seen) == training + 4 * model.config.num_hidden_layers
    assert set(seen) == {(torch.bfloat16,) * 3}, seen
