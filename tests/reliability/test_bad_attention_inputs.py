"""Bad input to the functional API (`ssa_hf.ssa_attention`, `ssa_hf.scored_attention`): each is refused at the
entry, before any backend runs, with an error that names the argument and what to change - the same error
whichever backend was asked for. Inputs with a defined result (NaN in the data, integer parameters) get it."""

import math

import pytest
import torch

from ssa_hf import scored_attention, ssa_attention

BACKENDS = [None, "eager", "blockwise", "flex"]


def qkv(dtype=torch.float32, heads=2, length=4, dim=8):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, heads, length, dim, generator=g).to(dtype) for _ in range(3)]


def _all(dtype):
    return lambda q, k, v: (q.to(dtype), k.to(dtype), v.to(dtype))


def _one(index, change):
    def apply(q, k, v):
        tensors = [q, k, v]
        tensors[index] = change(tensors[index])
        return tuple(tensors)

    return apply


def _all_dims():
    return lambda q, k, v: (q[0], k[0], v[0])


# (id, change to (q, k, v), extra keyword arguments, error type, message)
BAD_INPUTS = [
    ("int64", _all(torch.int64), {}, TypeError, r"query has dtype torch.int64.*pass float16, bfloat16, float32 or float64"),
    ("int_value", _one(2, lambda t: t.long()), {}, TypeError, "value has dtype torch.int64"),
    ("bool", _all(torch.bool), {}, TypeError, "query has dtype torch.bool"),
    ("complex", _all(torch.complex64), {}, TypeError, "query has dtype torch.complex64"),
    ("float8_e4m3", _all(torch.float8_e4m3fn), {}, TypeError, r"query has dtype torch.float8_e4m3fn.*query.to\(torch.bfloat16\)"),
    ("float8_e5m2", _all(torch.float8_e5m2), {}, TypeError, "query has dtype torch.float8_e5m2"),
    ("mixed_dtypes", _one(0, lambda t: t.double()), {}, TypeError, r"one dtype, got torch.float64, torch.float32 and torch.float32"),
    ("half_value", _one(2, lambda t: t.half()), {}, TypeError, r"one dtype.*convert them with .to\(query.dtype\)"),
    ("meta_key", _one(1, lambda t: t.to("meta")), {}, ValueError, r"one device, got cpu, meta and cpu"),
    ("list_query", _one(0, lambda t: t.tolist()), {}, TypeError, "query must be a torch.Tensor"),
    ("batch", _one(0, lambda t: t.expand(2, -1, -1, -1)), {}, ValueError, "query has batch size 2 and key 1"),
    ("three_dims", _all_dims(), {}, ValueError, r"must be 4-D \[batch, heads, length, head_dim\]"),
    ("key_dim", _one(1, lambda t: t[..., :4]), {}, ValueError, r"query \(1, 2, 4, 8\) and key \(1, 2, 4, 4\) need the same head_dim"),
    # (no heads: the CPU kernel divided by zero, SIGFPE; head_dim 0: a ZeroDivisionError from the default scale)
    ("no_heads", lambda q, k, v: (q[:, :0], k[:, :0], v[:, :0]), {}, ValueError, r"query \(1, 0, 4, 8\) .*>= 1 head"),
    ("head_dim_0", lambda q, k, v: (q[..., :0], k[..., :0], v), {}, ValueError, r"need the same head_dim, >= 1"),
    *[(f"scale={s}", None, {"scale": s}, ValueError, r"scale must be a finite number > 0 \(or None")
      for s in (math.nan, math.inf, -math.inf, 0.0, -0.5, "0.1", True)],
    *[(f"b={b}", None, {"b": b}, ValueError, "b must be finite") for b in (math.nan, math.inf)],
    ("n_nan_head", None, {"n": torch.tensor([1.5, math.nan])}, ValueError, r"n must be finite, got \[1.5, nan\]"),
    ("b_zero", None, {"b": 0.0}, ValueError, "b must be > 0"),
    ("n_negative", None, {"n": torch.tensor([1.5, -1.0])}, ValueError, "n must be > 0"),
    ("b_string", None, {"b": "1"}, TypeError, "b must be a real number or a float tensor"),
    ("b_complex", None, {"b": torch.tensor([1 + 1j, 1])}, TypeError, "b must be .* got dtype torch.complex64"),
    ("b_bool", None, {"b": torch.tensor([True, True])}, TypeError, "got dtype torch.bool"),
    ("b_shape", None, {"b": torch.ones(3)}, ValueError, r"b must be a scalar or a tensor of shape \[num_heads=2\]"),
    ("mask_float", None, {"attn_mask": torch.zeros(4, 4)}, ValueError, "attn_mask must be boolean"),
    ("mask_shape", None, {"attn_mask": torch.ones(3, 3, dtype=torch.bool)}, ValueError, r"attn_mask of shape \(3, 3\) does not broadcast"),
    ("mask_heads", None, {"attn_mask": torch.ones(1, 3, 4, 4, dtype=torch.bool)}, ValueError, "does not broadcast|must have 1 or 2"),
    ("mask_meta", None, {"attn_mask": torch.ones(4, 4, dtype=torch.bool, device="meta")}, ValueError, "attn_mask is on meta"),
    ("mask_list", None, {"attn_mask": [[True]]}, TypeError, "attn_mask must be a boolean torch.Tensor"),
]


def call(entry, backend, change, kwargs):
    q, k, v = qkv()
    if change is not None:
        q, k, v = change(q, k, v)
    kwargs = dict(kwargs)
    b, n = kwargs.pop("b", 1.0), kwargs.pop("n", 1.5)
    if entry == "ssa_attention":
        return ssa_attention(q, k, v, b, n, backend=backend, **kwargs)
    if entry == "scored_attention":
        return scored_attention(q, k, v, "ssa", {"b": b, "n": n}, backend=backend, **kwargs)
    # a mixture of scoring heads: the same door
    return scored_attention(q, k, v, ["ssa", "softmax"], {"ssa": {"b": b, "n": n}}, backend=backend, **kwargs)


def _entries(case):
    # a mixture reads per-head tensors per group of heads: shape cases of b, n apply to the single-function entries
    per_head_tensor = any(torch.is_tensor(case[2].get(name)) for name in ("b", "n"))
    return ["ssa_attention", "scored_attention"] + ([] if per_head_tensor else ["mixture"])


CASES = [pytest.param(case, entry, id=f"{case[0]}-{entry}") for case in BAD_INPUTS for entry in _entries(case)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case,entry", CASES)
def test_bad_input_is_refused_at_the_entry(case, entry, backend):
    _, change, kwargs, error, message = case
    with pytest.raises(error, match=message):
        call(entry, backend, change, kwargs)


def test_an_edit_through_data_is_checked_again():
    """`.data` edits move neither the version counter nor the storage the checked-tensor cache compares: the
    values are compared too (CPU), so a b set to -0.5 after a first call is refused, not used (it gave NaN)."""
    q, k, v = qkv()
    b, n = torch.tensor([1.0, 1.0]), torch.tensor([1.5, 1.5])
    ssa_attention(q, k, v, b, n)
    b.data.fill_(-0.5)
    with pytest.raises(ValueError, match=r"b must be > 0, got \[-0.5, -0.5\]"):
        ssa_attention(q, k, v, b, n)
    b.data.fill_(2.0)
    torch.testing.assert_close(ssa_attention(q, k, v, b, n), ssa_attention(q, k, v, 2.0, n))


@pytest.mark.parametrize("dropout", [math.nan, -0.1, 1.0, 2.0])
def test_bad_dropout_is_refused(dropout):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"dropout_p must be a number in \[0, 1\)"):
        scored_attention(q, k, v, "ssa", {"b": 1.0, "n": 1.5}, dropout_p=dropout)


@pytest.mark.parametrize("backend", ["eager", "blockwise", "flex"])
def test_nan_in_the_data_propagates(backend):
    # defined result: as F.scaled_dot_product_attention, a NaN query row gives a NaN output row, never a finite guess
    q, k, v = qkv()
    q[0, 0, 1, 0] = math.nan
    with torch.no_grad():
        out = ssa_attention(q, k, v, 1.0, 1.5, backend=backend)
    assert out[0, 0, 1].isnan().all()
    assert out[0, 1].isfinite().all() and out[0, 0, 0].isfinite().all()


def test_integer_parameters_are_converted():
    # defined result: integer b, n tensors are read as floats
    q, k, v = qkv()
    out = ssa_attention(q, k, v, torch.tensor([1, 2]), torch.tensor([2, 3]), backend="eager")
    ref = ssa_attention(q, k, v, torch.tensor([1.0, 2.0]), torch.tensor([2.0, 3.0]), backend="eager")
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_supported_dtypes_run(dtype):
    q, k, v = qkv(dtype)
    out = ssa_attention(q, k, v, 1.0, 1.5, backend="eager")
    assert out.dtype == dtype and out.isfinite().all()


# (scoring, params, message): strict names, never an ignored key
BAD_NAMES = [
    ("ssa", {"b": 1.0, "n": 1.5, "nn": 3.0}, r"'ssa' takes the parameters \['b', 'n'\]; got 'nn'; did you mean 'n'\?"),
    ("sigmoid", {"lenght": 1000.0}, r"'sigmoid' takes the parameters \['length'\]; got 'lenght'; did you mean 'length'"),
    ("cosformer", {"M": 4.0}, r"'cosformer' takes the parameters \['m'\]; got 'M'; did you mean 'm'"),
    ("softmax", {"b": 1.0, "n": 1.5}, r"'softmax' takes no parameters; got 'b' \('b' is a parameter of ssa\)"),
    ("temperature", {"s": 1.0}, r"'temperature' takes the parameters \['t'\]; got 's' \('s' is a parameter of ssmax\)"),
    (["ssa", "softmax"], {"ssa": {"b": 1.0, "n": 1.5}, "softmax": {"t": 1.0}}, r"'softmax' takes no parameters; got 't'"),
]


@pytest.mark.parametrize("backend", [None, "eager"])
@pytest.mark.parametrize("scoring,params,message", BAD_NAMES, ids=[f"{s}-{sorted(p)}" for s, p, _ in BAD_NAMES])
def test_unknown_parameter_names_are_refused(scoring, params, message, backend):
    q, k, v = qkv()
    with pytest.raises(ValueError, match=message):
        scored_attention(q, k, v, scoring, params, backend=backend)
