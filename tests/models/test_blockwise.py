"""Tests of the blockwise (memory-efficient) attention kernel against the float64 oracle (tests/models/oracle.py)."""

import warnings
from typing import Optional

import pytest
import torch
import torch.nn.functional as F

from ssa_hf.models import blockwise as bw
from ssa_hf.models import native
from ssa_hf.models.blockwise import blockwise_attention

from . import oracle


@pytest.fixture(autouse=True, params=["native", "portable", "torch"])
def kernel(request):
    """Every test runs three times: on the fused C++ kernel with its vectorised per-score passes (the fast path
    users get; at::vec, 16 lanes on AVX-512), on the same kernel forced onto its portable scalar passes (what
    CPUs without AVX2 run), and on the torch path (float64, and the fallback where no compiler works).  The
    native runs fail, rather than silently testing torch, when the kernel cannot be built. The portable run also
    switches the tile products, forward and backward, to the kind this CPU does not pick: bf16 through the brgemm
    ukernel or fp32 on converted tiles; fp32 through the ukernel or sgemm and the small-head-dim loops."""
    native.set_native_enabled(request.param != "torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the fused kernel is off" (said once per process)
        loaded = native.load_kernels()
    assert (loaded is not None) == (request.param != "torch"), "the fused CPU kernel did not build"
    if loaded is not None:
        loaded.set_portable(request.param == "portable")
        # the bf16 products of the other kind (brgemm or fp32 on converted tiles, whichever this CPU does not pick)
        # run with the portable passes, so that every bf16 test covers both
        auto, auto_f32 = loaded.set_bf16_brgemm(-1), loaded.set_f32_brgemm(-1)
        if request.param == "portable":
            loaded.set_bf16_brgemm(0 if auto else 1)
            loaded.set_f32_brgemm(0 if auto_f32 else 1)
    yield request.param
    if loaded is not None:
        loaded.set_portable(False)
        loaded.set_bf16_brgemm(-1)
        loaded.set_f32_brgemm(-1)
    native.set_native_enabled(None)


def reference_attention(q, k, v, b=None, n=None, attn_mask=None, is_causal=False, scale=None, scoring="ssa"):
    """The float64 oracle's output, with the kernel's (b, n) signature."""
    params = {"b": b, "n": n} if scoring == "ssa" else {}
    return oracle.attention(q, k, v, scoring, params, attn_mask, is_causal, scale)[0]


def _inputs(B, H, Hkv, Lq, Lk, D, seed=0, big=3.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, H, Lq, D, generator=gen) * big).to(dtype)
    k = (torch.randn(B, Hkv, Lk, D, generator=gen) * big).to(dtype)
    v = torch.randn(B, Hkv, Lk, D, generator=gen).to(dtype)
    b = (torch.rand(H, generator=gen) * 1.5 + 0.3)
    n = (torch.rand(H, generator=gen) * 1.5 + 1.0)
    return q, k, v, b, n


def _padding_mask(B, Lq, Lk, seed=0, side="right"):
    gen = torch.Generator().manual_seed(seed + 100)
    lens = torch.randint(Lk // 3, Lk + 1, (B,), generator=gen)
    lens[0] = Lk
    idx = torch.arange(Lk)
    if side == "right":
        keep = idx[None, :] < lens[:, None]
    else:
        keep = idx[None, :] >= (Lk - lens)[:, None]
    return keep[:, None, None, :].expand(B, 1, Lq, Lk).clone()


def _check(q, k, v, b, n, scoring="ssa", attn_mask=None, is_causal=False, block_size=16, rtol=2e-4, atol=2e-5,
           grad_bn=True):
    q = q.clone().requires_grad_(True)
    k = k.clone().requires_grad_(True)
    v = v.clone().requires_grad_(True)
    b = b.clone().requires_grad_(grad_bn)
    n = n.clone().requires_grad_(grad_bn)
    out = blockwise_attention(q, k, v, b, n, attn_mask=attn_mask, is_causal=is_causal, scoring=scoring,
                              block_size=block_size)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    b64 = b.detach().double().requires_grad_(grad_bn)
    n64 = n.detach().double().requires_grad_(grad_bn)
    ref = reference_attention(q64, k64, v64, b64, n64, attn_mask=attn_mask, is_causal=is_causal, scoring=scoring)
    assert out.shape == ref.shape and out.dtype == q.dtype
    torch.testing.assert_close(out.double(), ref, rtol=rtol, atol=atol)
    gen = torch.Generator().manual_seed(7)
    dout = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (out.double() * dout).sum().backward()
    (ref * dout).sum().backward()
    pairs = [(q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)]
    if scoring == "ssa" and grad_bn:
        pairs += [(b.grad, b64.grad), (n.grad, n64.grad)]
    for got, want in pairs:
        assert got is not None and torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol * max(1.0, want.abs().max().item()))
    return out


@pytest.fixture(params=["fixed-offset", "online-max"])
def row_offset(request, monkeypatch):
    """Run a test with the fixed row offset (the default whenever the SSA bound allows it) and with the online
    row maximum (forced by a bound limit below any bound)."""
    if request.param == "online-max":
        monkeypatch.setattr(bw, "_STATIC_BOUND_MAX", -1.0)
    return request.param


@pytest.fixture(params=["parallel", "serial"])
def work_split(request, monkeypatch):
    """Run a test with the work items in one parallel region of two threads and on the calling thread alone (the
    kernel's choice for calls under bw._SERIAL_FLOPS, which is moved so that every call takes the path)."""
    monkeypatch.setattr(bw, "_SERIAL_FLOPS", 0.0 if request.param == "parallel" else float("inf"))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield request.param
    torch.set_num_threads(threads)


@pytest.fixture(params=[(16, 16), (8, 32)], ids=["square-tiles", "wide-tiles"])
def tiles(request):
    """Tile shapes: query rows per work item (over the G heads of a key/value head) and keys per tile."""
    return request.param


@pytest.mark.parametrize("is_causal", [False, True])
def test_negative_n_matches_reference(is_causal, kernel, row_offset):
    """A learned n stored `raw` may turn negative (any finite value is valid there): g = n sgn(s) log(1 + b|s|)
    keeps n's sign on every path, forward and every gradient, b and n included.  (The vectorised passes set n's
    sign bit instead of flipping it, and the torch path's copysign dropped it: 0.55 off in the output.)"""
    q, k, v, b, _ = _inputs(2, 4, 2, 40, 40, 16, seed=31, big=1.0)
    n = torch.tensor([-0.7, 1.3, -2.0, 0.4])
    _check(q, k, v, b, n, is_causal=is_causal, block_size=(16, 24))


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("gqa", [1, 2])
def test_inference_matches_reference(is_causal, gqa, tiles, row_offset, work_split):
    B, H, L = 3, 4, 37
    q, k, v, b, n = _inputs(B, H, H // gqa, L, L, 20, seed=23)
    gen = torch.Generator().manual_seed(23)
    head_mask = torch.rand(B, H, L, L, generator=gen) > 0.2
    head_mask[1, 2, 7] = False  # a fully masked row
    for mask in (None, _padding_mask(B, L, L, seed=23, side="left"), head_mask):
        for scoring in ("ssa", "softmax"):
            with torch.no_grad():
                out = blockwise_attention(q, k, v, b, n, attn_mask=mask, is_causal=is_causal, scoring=scoring,
                                          block_size=tiles)
            ref = reference_attention(q, k, v, b, n, attn_mask=mask, is_causal=is_causal, scoring=scoring)
            torch.testing.assert_close(out.double(), ref, rtol=2e-4, atol=2e-5)
    with torch.no_grad():
        out = blockwise_attention(q, k, v, b, n, attn_mask=head_mask, block_size=16)
    assert torch.all(out[1, 2, 7] == 0)


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("scoring", ["ssa", "softmax"])
def test_odd_shapes_match_reference(is_causal, scoring, row_offset):
    q, k, v, b, n = _inputs(2, 3, 3, 63, 63, 100, seed=1)
    _check(q, k, v, b, n, scoring=scoring, is_causal=is_causal)


def test_rectangular_tiles_and_groups(row_offset):
    q, k, v, b, n = _inputs(3, 4, 2, 45, 45, 12, seed=21)
    mask = _padding_mask(3, 45, 45, seed=21, side="left")
    out = blockwise_attention(q, k, v, b, n, attn_mask=mask, is_causal=True, block_size=(8, 16))
    ref = reference_attention(q, k, v, b, n, attn_mask=mask, is_causal=True)
    torch.testing.assert_close(out.double(), ref, rtol=2e-4, atol=2e-5)
    _check(q, k, v, b, n, attn_mask=mask, is_causal=True, block_size=(16, 8))


def test_large_n_and_scores_use_online_max_and_stay_finite():
    """Scores and n large enough that the fixed offset would underflow: the kernel must switch to the online
    maximum on its own and still match the reference."""
    q, k, v, _, _ = _inputs(2, 2, 2, 40, 40, 16, seed=22, big=8.0)
    b = torch.tensor([1.0, 2.0])
    n = torch.tensor([12.0, 20.0])
    x = 1.0 / 4 * q.norm(dim=-1).max() * k.norm(dim=-1).max()
    assert (n * torch.log1p(b * x)).max() > bw._STATIC_BOUND_MAX
    _check(q, k, v, b, n, is_causal=True, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("is_causal", [False, True])
def test_gqa_8_to_2(is_causal, tiles, work_split):
    q, k, v, b, n = _inputs(2, 8, 2, 37, 37, 24, seed=2)
    _check(q, k, v, b, n, is_causal=is_causal, block_size=tiles)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("is_causal", [False, True])
def test_padding_masks(side, is_causal, work_split):
    B, L = 3, 45
    q, k, v, b, n = _inputs(B, 4, 2, L, L, 20, seed=3)
    mask = _padding_mask(B, L, L, seed=3, side=side)
    _check(q, k, v, b, n, attn_mask=mask, is_causal=is_causal)


def test_per_head_mask_and_fully_masked_rows(tiles, row_offset, work_split):
    B, H, L = 2, 4, 33
    q, k, v, b, n = _inputs(B, H, 2, L, L, 12, seed=4)
    gen = torch.Generator().manual_seed(4)
    mask = torch.rand(B, H, L, L, generator=gen) > 0.3
    mask[0, 1, 5] = False  # one fully masked query row
    mask[1, :, 20:] = False  # several fully masked rows, all heads
    out = _check(q, k, v, b, n, attn_mask=mask, is_causal=True, block_size=tiles)
    assert torch.all(out[0, 1, 5] == 0)
    assert torch.all(out[1, :, 20:] == 0)


def test_fully_masked_row_zero_grads():
    B, H, L = 1, 2, 20
    q, k, v, b, n = _inputs(B, H, H, L, L, 8, seed=5)
    mask = torch.ones(B, 1, L, L, dtype=torch.bool)
    mask[..., 3, :] = False
    q.requires_grad_(True)
    out = blockwise_attention(q, k, v, b, n, attn_mask=mask, block_size=8)
    out.sum().backward()
    assert torch.all(out[:, :, 3] == 0)
    assert torch.all(q.grad[:, :, 3] == 0)
    assert torch.isfinite(q.grad).all()


def test_decode_shapes_lq_less_than_lk(work_split):
    B, H, Hkv, Lk, D = 3, 4, 2, 50, 16
    for Lq in (1, 5):
        q, k, v, b, n = _inputs(B, H, Hkv, Lq, Lk, D, seed=6 + Lq)
        mask = _padding_mask(B, Lq, Lk, seed=6, side="left")
        # causal over the cache: query i (absolute position Lk - Lq + i) sees keys j <= Lk - Lq + i
        pos = torch.arange(Lk - Lq, Lk)
        mask = mask & (torch.arange(Lk)[None, :] <= pos[:, None])
        _check(q, k, v, b, n, attn_mask=mask, block_size=16)
        ref = reference_attention(q, k, v, b, n, attn_mask=mask)
        with torch.no_grad():
            out = blockwise_attention(q, k, v, b, n, attn_mask=mask)
        torch.testing.assert_close(out.double(), ref, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D, Dv", [(4, 4), (8, 8), (16, 16), (8, 16), (16, 4)])
def test_small_head_dims(D, Dv, dtype, kernel):
    """Head dims of 4, 8 and 16 take the kernel's own tile products on the vector path (dV, dK, dQ and the
    forward's P V; sgemm elsewhere): key tiles of 24 and 45 positions (a full vector and a tail, ragged last
    tiles and query blocks, remainders of the 2- and 4-row blocks), grouped-query heads, causal, and a padding mask
    with a fully masked row.  float32 against the float64 oracle; bf16 and fp16 against the float32 kernel on the
    same rounded inputs (as test_half_precision_inputs).  The native run checks float32 twice: as the CPU picks
    (the brgemm ukernel, where it runs, takes float32 at every head dim) and on sgemm with the vector loops."""
    B, H, Hkv, L = 2, 4, 2, 45
    q, k, _, b, n = _inputs(B, H, Hkv, L, L, D, seed=50 + D, big=2.0)
    v = torch.randn(B, Hkv, L, Dv, generator=torch.Generator().manual_seed(51 + Dv))
    mask = _padding_mask(B, L, L, seed=50, side="left")
    mask[1, :, 30] = False
    ops = native.load_kernels() if kernel == "native" else None
    for is_causal, attn_mask in ((True, None), (False, mask)):
        if dtype == torch.float32:
            for f32_mode in (-1, 0) if ops is not None else (None,):
                if ops is not None:
                    ops.set_f32_brgemm(f32_mode)
                try:
                    _check(q, k, v, b, n, attn_mask=attn_mask, is_causal=is_causal, block_size=(16, 24))
                finally:
                    if ops is not None:
                        ops.set_f32_brgemm(-1)
            continue
        qh, kh, vh = (t.to(dtype).requires_grad_(True) for t in (q, k, v))
        qf, kf, vf = (t.detach().float().requires_grad_(True) for t in (qh, kh, vh))
        out = blockwise_attention(qh, kh, vh, b, n, attn_mask=attn_mask, is_causal=is_causal, block_size=(16, 24))
        ref = blockwise_attention(qf, kf, vf, b, n, attn_mask=attn_mask, is_causal=is_causal, block_size=(16, 24))
        assert out.dtype == dtype
        tol = 1e-2 if dtype == torch.float16 else 3e-2
        torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
        dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(52))
        (out.float() * dout).sum().backward()
        (ref * dout).sum().backward()
        for got, want in ((qh, qf), (kh, kf), (vh, vf)):
            assert got.grad.dtype == dtype
            assert (got.grad.float() - want.grad).abs().max().item() <= 2 * tol * want.grad.abs().max().item()


def _cpu_has_bf16_ukernel():
    """Whether torch's brgemm runs oneDNN's bf16 ukernel here (AVX-512 x86 with torch's oneDNN): forcing it on
    reports so."""
    ops = native.load_kernels()
    try:
        return ops is not None and ops.set_bf16_brgemm(1)
    finally:
        if ops is not None:
            ops.set_bf16_brgemm(-1)


@pytest.mark.parametrize("D, Dv", [(32, 32), (64, 48), (64, 96), (34, 40)])
def test_bf16_ukernel_tiles(D, Dv, kernel):
    """bf16 through the brgemm ukernel (forced on, native and portable passes): VNNI packing of K^T, V, K, Q^T,
    dO^T, P (the forward's rounded once, the backward's hi + lo) and dS with odd key tiles (70 = a 64-column block
    and a 6-wide tail, then 13) and odd query blocks (40, 40, 3; 42 = 21 rows a head, which under the causal mask
    read the forward's once-packed tiles to odd widths 21 and 63 short of the tile, and to even ones: 42 of 70),
    value widths other than D (48; 96 = two column blocks), grouped-query heads, causal, and a
    padding mask with a fully masked query row, against the float64 oracle on the same rounded inputs: within
    bf16's tolerance, and no further from it than 1.5x the fp32-tile path's error (plus bf16's rounding of one
    output step), forward and every input gradient."""
    if kernel == "torch" or not _cpu_has_bf16_ukernel():
        pytest.skip("the ukernel is the fused kernel's, on x86 CPUs with AVX-512 and torch's oneDNN")
    ops = native.load_kernels()
    B, H, Hkv, L = 2, 4, 2, 83
    q, k, _, b, n = _inputs(B, H, Hkv, L, L, D, seed=60 + D, big=1.0)
    v = torch.randn(B, Hkv, L, Dv, generator=torch.Generator().manual_seed(61 + Dv))
    mask = _padding_mask(B, L, L, seed=60, side="right")
    mask[1, :, 7] = False  # query row 7 of batch 1 sees no key
    q, k, v = (t.bfloat16() for t in (q, k, v))
    dout = torch.randn(B, H, L, Dv, generator=torch.Generator().manual_seed(62), dtype=torch.float64)
    for is_causal, attn_mask, block_q in ((True, None, 40), (True, None, 42), (False, mask, 40)):
        leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
        ref = reference_attention(*leaves, b.double(), n.double(), attn_mask=attn_mask, is_causal=is_causal)
        (torch.nan_to_num(ref) * dout).sum().backward()
        want = [torch.nan_to_num(ref.detach())] + [t.grad for t in leaves]
        errors = {}
        for mode in (0, 1):
            assert ops.set_bf16_brgemm(mode) == bool(mode)
            got = [t.clone().requires_grad_(True) for t in (q, k, v)]
            out = blockwise_attention(*got, b, n, attn_mask=attn_mask, is_causal=is_causal, block_size=(block_q, 70))
            with torch.no_grad():  # without a gradient the forward forms no exact row sum: the same output
                plain = blockwise_attention(q, k, v, b, n, attn_mask=attn_mask, is_causal=is_causal,
                                            block_size=(block_q, 70))
            torch.testing.assert_close(plain, out.detach(), atol=0, rtol=0)
            (out.double() * dout).sum().backward()
            results = [out.detach()] + [t.grad for t in got]
            assert all(r.dtype == torch.bfloat16 and torch.isfinite(r).all() for r in results)
            errors[mode] = [(r.double() - w).abs().max().item() for r, w in zip(results, want)]
        ops.set_bf16_brgemm(-1)
        for name, w, e_uk, e_tiles in zip(("out", "dq", "dk", "dv"), want, errors[1], errors[0]):
            scale = w.abs().max().item()
            assert e_uk <= 3e-2 * scale, f"{name}: ukernel error {e_uk:.3g} at scale {scale:.3g}"
            assert e_uk <= 1.5 * e_tiles + 2 ** -8 * scale, f"{name}: ukernel {e_uk:.3g} vs fp32 tiles {e_tiles:.3g}"


@pytest.mark.parametrize("block_q", [21, 32])
def test_bf16_ukernel_rows_never_read_values_past_their_keys(block_q, kernel):
    """The forward packs a head's value tiles once, whole, for all its query blocks; a block that sees only part of a
    tile reads its own keys' values only (an odd count, 21, is packed again to that width): an inf value at the key
    right past a causal block's last key leaves the block's rows exactly as they were."""
    if kernel == "torch" or not _cpu_has_bf16_ukernel():
        pytest.skip("the ukernel is the fused kernel's, on x86 CPUs with AVX-512 and torch's oneDNN")
    ops = native.load_kernels()
    # two query heads a key/value head: block_size's 2 * block_q rows are block_q positions; 4 x 2 heads x 64 / 21
    # gives enough work items that the kernel keeps the block for up to 8 threads
    q, k, v, b, n = _inputs(4, 4, 2, 64, 64, 32, seed=5, big=1.0, dtype=torch.bfloat16)
    try:
        assert ops.set_bf16_brgemm(1)
        with torch.no_grad():
            clean = blockwise_attention(q, k, v, b, n, is_causal=True, block_size=(2 * block_q, 64))
            v[:, :, block_q] = float("inf")
            spoiled = blockwise_attention(q, k, v, b, n, is_causal=True, block_size=(2 * block_q, 64))
    finally:
        ops.set_bf16_brgemm(-1)
    torch.testing.assert_close(spoiled[:, :, :block_q], clean[:, :, :block_q], atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_backward_takes_at_most_128_by_128_tiles(dtype, kernel):
    """The causal backward runs tiles of at most 128 query positions by 128 keys (block sizes are upper bounds):
    256 x 256 then gives 128 x 128's gradients bit for bit.  Without a causal mask it keeps 256 x 256, and there the
    gradients differ (at least n's, whose per-tile row sums run in another order): the comparison can tell the
    tilings apart.  (The backward
    op alone, on one forward's results: the forward's tiles are its own.)"""
    if kernel == "torch":
        pytest.skip("tiles are the fused kernel's")
    q, k, v, b, n = _inputs(2, 4, 2, 300, 300, 32, seed=8, big=1.0, dtype=dtype)
    dout = torch.randn(2, 4, 300, 32, generator=torch.Generator().manual_seed(9)).to(dtype)
    scale = 32 ** -0.5
    for is_causal in (True, False):
        out, lse, res = bw.attention_forward(q, k, v, b, n, None, is_causal, scale, 256, 256)
        grads = [bw.attention_backward(dout, q, k, v, out, lse, res, b, n, None, is_causal, scale, *tiles, True)
                 for tiles in ((256, 256), (128, 128))]
        same = [torch.equal(x, y) for x, y in zip(*grads)]
        assert all(same) if is_causal else not all(same), (is_causal, same)


def test_bf16_ukernel_forward_takes_at_most_128_rows_an_item(kernel):
    """The bf16 ukernel's forward runs work items of at most 128 query rows (block_q an upper bound): 256 then gives
    128's output bit for bit.  The converted tiles' forward keeps 256, and there the two differ (a causal item's
    bound, hence its rows' fixed offset, depends on the keys the item sees): the comparison can tell them apart."""
    if kernel == "torch" or not _cpu_has_bf16_ukernel():
        pytest.skip("the ukernel is the fused kernel's, on x86 CPUs with AVX-512 and torch's oneDNN")
    ops = native.load_kernels()
    # 4 x 4 heads x 512 / 256 = 32 work items: the kernel keeps 256 rows an item for up to 8 threads
    q, k, v, b, n = _inputs(4, 4, 4, 512, 512, 32, seed=7, big=1.0, dtype=torch.bfloat16)
    outs = {}
    try:
        for mode in (1, 0):
            assert ops.set_bf16_brgemm(mode) == bool(mode)
            with torch.no_grad():
                outs[mode] = [blockwise_attention(q, k, v, b, n, is_causal=True, block_size=(rows, 64))
                              for rows in (256, 128)]
    finally:
        ops.set_bf16_brgemm(-1)
    torch.testing.assert_close(outs[1][0], outs[1][1], atol=0, rtol=0)
    assert not torch.equal(outs[0][0], outs[0][1])


@pytest.mark.parametrize("scoring", ["softmax", "ssa"])
def test_bf16_ukernel_forward_error_within_sdpa_error(scoring, kernel):
    """The ukernel's forward rounds P to bf16 once and divides each row by the sum of its rounded weights: the output's
    max error against float64 stays within 1.5x SDPA's bf16 error on the same inputs, softmax like for like and SSA
    against SDPA's softmax (divided by the exact sum instead, rows dominated by one key lost that key's value to the
    rounding of its weight, which the kernel's fixed offset leaves inexact: 1.9-2.2x SDPA's error at L = 512-1024)."""
    if kernel == "torch" or not _cpu_has_bf16_ukernel():
        pytest.skip("the ukernel is the fused kernel's, on x86 CPUs with AVX-512 and torch's oneDNN")
    ops = native.load_kernels()
    B, H, L, D = 1, 8, 512, 64
    gen = torch.Generator().manual_seed(23)
    q, k, v = (torch.randn(B, H, L, D, generator=gen).bfloat16() for _ in range(3))
    b, n = torch.linspace(0.5, 1.2, H), torch.linspace(1.0, 2.0, H)
    bn = (b, n) if scoring == "ssa" else (None, None)
    want = reference_attention(q.double(), k.double(), v.double(), *(t.double() for t in bn if t is not None),
                               is_causal=True, scoring=scoring)
    sdpa_error = (F.scaled_dot_product_attention(q, k, v, is_causal=True).double()
                  - reference_attention(q.double(), k.double(), v.double(), is_causal=True, scoring="softmax"))
    try:
        assert ops.set_bf16_brgemm(1)
        with torch.no_grad():
            out = blockwise_attention(q, k, v, *bn, scoring=scoring, is_causal=True)
    finally:
        ops.set_bf16_brgemm(-1)
    error, bound = (out.double() - want).abs().max().item(), 1.5 * sdpa_error.abs().max().item()
    assert error <= bound, f"{scoring}: out error {error:.3g} > 1.5 x SDPA's ({bound:.3g})"


def test_output_residual_restores_the_bits_bf16_dropped():
    """output_residual keeps what rounding to bf16 dropped as int8 in 1/256ths of each element's ulp: the refined
    output is within 1/512 of an ulp of the exact value (1/256 where the residual saturates at -128 / 127), over
    magnitudes from 1e-30 to 1e30, zeros and both signs; NaN and inf differences give a finite residual; other
    dtypes get an empty residual and refined_output returns the output itself."""
    gen = torch.Generator().manual_seed(70)
    exact = torch.randn(4096, generator=gen) * torch.logspace(-30, 30, 4096)
    exact[:8] = torch.tensor([0.0, -0.0, 1.0, -1.0, 1.0039, 255.9, 3.3e38, 1e-38])
    rounded = exact.to(torch.bfloat16)
    residual = bw.output_residual(exact, rounded)
    assert residual.dtype == torch.int8 and residual.shape == exact.shape
    refined = bw.refined_output(rounded, residual)
    ulp = bw._bf16_ulp(rounded)
    assert ((refined - exact).abs() <= ulp / 256 + 1e-45).all()
    assert ((refined - exact).abs() <= (rounded.float() - exact).abs() + 1e-45).all()
    assert ((refined - exact).abs() < ulp / 512 * 1.01).float().mean() > 0.99
    odd = bw.output_residual(torch.tensor([float("nan"), float("inf"), -float("inf")]),
                             torch.tensor([1.0, 1.0, 1.0], dtype=torch.bfloat16))
    assert odd.tolist() == [0, 127, -128]
    half = exact.half()
    assert bw.output_residual(exact, half).numel() == 0 and bw.refined_output(half, half.new_empty(0)) is half


@pytest.mark.parametrize("is_causal", [True, False])
def test_bf16_kernel_output_residual_matches_float32(is_causal, kernel):
    """The forward's residual (bf16 with a gradient to come): with fp32 tile products the bf16 output refined by it
    is as close to the float32 run's output as float32 allows, far closer than the bf16 output itself (through the
    bf16 ukernel, whose P is rounded to bf16, closer in root-mean-square); the residual is int8 of the output's
    shape, zero on a row that sees no key, and absent (empty) for float16 and float32."""
    q, k, v, b, n = _inputs(2, 4, 2, 40, 40, 32, seed=71, big=1.0, dtype=torch.bfloat16)
    mask = _padding_mask(2, 40, 40, seed=71)
    mask[1, :, 5] = False
    args = (b, n, None if is_causal else mask, is_causal, 32 ** -0.5, bw.BLOCK_Q, bw.BLOCK_K)
    want = bw.attention_forward(q.float(), k.float(), v.float(), *args)[0]
    ops = native.load_kernels() if kernel != "torch" else None
    modes = (0, 1) if ops is not None and _cpu_has_bf16_ukernel() else (0,)
    try:
        for mode in modes:
            if ops is not None:
                ops.set_bf16_brgemm(mode)
            out, _, residual = bw.attention_forward(q, k, v, *args)
            assert residual.dtype == torch.int8 and residual.shape == out.shape
            refined, rounded = bw.refined_output(out, residual) - want, out.float() - want
            if mode == 0:
                assert 0 < refined.abs().max().item() <= rounded.abs().max().item() / 16
            else:
                assert refined.pow(2).mean() < rounded.pow(2).mean()
            if not is_causal:
                assert (residual[1, :, 5] == 0).all() and (out[1, :, 5] == 0).all()
    finally:
        if ops is not None:
            ops.set_bf16_brgemm(-1)
    for dtype in (torch.float16, torch.float32):
        assert bw.attention_forward(q.to(dtype), k.to(dtype), v.to(dtype), *args)[2].numel() == 0


def test_bf16_gradient_error_within_sdpa_error_one_kv_head_per_head(kernel):
    """bf16 SSA gradients against the float64 oracle, one key/value head per query head, causal, per-head b and n
    up to 1.2 and 2.0: every input gradient's max error within 1.5x SDPA's own bf16 error on the same inputs.  The
    backward's delta = rowsum(out * grad_out) reads the output refined by its residual: from the bf16 output alone,
    SSA's g' (up to n b = 2.4 here) multiplied delta's error into dq's (1.77x SDPA's at this shape)."""
    B, H, L, D = 1, 8, 512, 64
    gen = torch.Generator().manual_seed(23)
    q, k, v = (torch.randn(B, H, L, D, generator=gen).bfloat16() for _ in range(3))
    dout = torch.randn(B, H, L, D, generator=gen, dtype=torch.float64)
    b, n = torch.linspace(0.5, 1.2, H), torch.linspace(1.0, 2.0, H)

    def grads(fn, dtype):
        leaves = [t.detach().to(dtype).clone().requires_grad_(True) for t in (q, k, v)]
        (fn(*leaves).double() * dout).sum().backward()
        return [t.grad.double() for t in leaves]

    want_ssa = grads(lambda *x: reference_attention(*x, b.double(), n.double(), is_causal=True), torch.float64)
    want_soft = grads(lambda *x: reference_attention(*x, is_causal=True, scoring="softmax"), torch.float64)
    ours = grads(lambda *x: blockwise_attention(*x, b, n, is_causal=True), torch.bfloat16)
    sdpa = grads(lambda *x: F.scaled_dot_product_attention(*x, is_causal=True), torch.bfloat16)
    for name, got, want, base, base_want in zip(("dq", "dk", "dv"), ours, want_ssa, sdpa, want_soft):
        error, bound = (got - want).abs().max().item(), 1.5 * (base - base_want).abs().max().item()
        assert error <= bound, f"{kernel} {name}: error {error:.3g} > 1.5 x SDPA's ({bound:.3g})"


def test_an_older_copys_ops_leave_this_copys_alone():
    """Checkpoints carry copies of blockwise.py, and a process may import an older one (its ops named
    ssa_hf::attention_forward / attention_backward, the forward returning (out, lse)); torch.library lets the last
    registration of a name replace the op for every copy holding it, so this copy's ops carry the schema's version
    in their names and still run themselves, with their three outputs, forward and backward."""
    from torch import Tensor

    def older_forward(query: Tensor, key: Tensor, value: Tensor, b: Tensor, n: Tensor, mask: Optional[Tensor],
                      causal: bool, scale: float, block_q: int, block_k: int) -> tuple[Tensor, Tensor]:
        return query.clone(), query.new_zeros(query.shape[:3])

    def older_backward(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, lse: Tensor,
                       b: Tensor, n: Tensor, mask: Optional[Tensor], causal: bool, scale: float, block_q: int,
                       block_k: int, need_bn: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        return query.clone(), key.clone(), value.clone(), b.clone(), n.clone()

    torch.library.custom_op("ssa_hf::attention_forward", older_forward, mutates_args=())
    torch.library.custom_op("ssa_hf::attention_backward", older_backward, mutates_args=())
    q, k, v, b, n = _inputs(1, 4, 2, 12, 12, 16, seed=72, big=1.0, dtype=torch.bfloat16)
    q.requires_grad_(True)
    args = (b, n, None, True, 16 ** -0.5, bw.BLOCK_Q, bw.BLOCK_K)
    out, lse, residual = bw.attention_forward(q, k, v, *args)
    want = reference_attention(q.detach().double(), k.double(), v.double(), b.double(), n.double(), is_causal=True)
    torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2)
    assert residual.shape == out.shape
    out.float().sum().backward()
    assert q.grad is not None and not torch.equal(q.grad, torch.ones_like(q.grad))


def test_bf16_ukernel_follows_torchs_onednn_switch(kernel):
    """With torch.backends.mkldnn off (torch's brgemm then refuses VNNI operands) the ukernel is not used even when
    forced, and bf16 attention still runs (fp32 tiles) and matches the oracle; on again, it is used again."""
    if kernel == "torch" or not _cpu_has_bf16_ukernel():
        pytest.skip("the ukernel is the fused kernel's, on x86 CPUs with AVX-512 and torch's oneDNN")
    ops = native.load_kernels()
    q, k, v, b, n = (t.bfloat16() if t.dim() == 4 else t for t in _inputs(1, 4, 4, 64, 64, 32, seed=63, big=1.0))
    ref = reference_attention(q.double(), k.double(), v.double(), b.double(), n.double(), is_causal=True)
    try:
        with torch.backends.mkldnn.flags(enabled=False):
            assert ops.set_bf16_brgemm(1) is False and ops.bf16_brgemm() is False
            with torch.no_grad():
                out = blockwise_attention(q, k, v, b, n, is_causal=True, block_size=32)
        torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
        assert ops.set_bf16_brgemm(1) is True
    finally:
        ops.set_bf16_brgemm(-1)


def check_decoding_rows(D, dtype, kv_length=300):
    """One query row per head against `kv_length` keys, 1 to 4 query heads per key/value head (rows per work item),
    against the float64 oracle on the same rounded inputs."""
    for H, Hkv in ((3, 3), (4, 2), (6, 2), (8, 2)):
        q, k, v, b, n = _inputs(2, H, Hkv, 1, kv_length, D, seed=D + H, big=1.5)
        q, k, v = (t.to(dtype) for t in (q, k, v))
        with torch.no_grad():
            out = blockwise_attention(q, k, v, b, n)
        assert out.dtype == dtype
        ref = reference_attention(q.double(), k.double(), v.double(), b.double(), n.double())
        tol = 2e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D", [5, 32, 40, 72])
def test_decoding_rows_every_head_dim(D, dtype):
    """The decoding steps' few-row products (1 to 4 query rows per work item: MHA and 2, 3, 4 query heads per kv
    head) at head dims that leave vector tails (5: tail only; 40 and 72: blocks of four vectors and a tail on 8 or
    16 lanes) and none (32), keys in groups of eight and a tail of four (300), over two key tiles (the partial output
    carried from one to the next)."""
    check_decoding_rows(D, dtype)


def test_python_float_params_and_no_bn_grad():
    q, k, v, _, _ = _inputs(2, 2, 1, 19, 19, 8, seed=8)
    out = blockwise_attention(q, k, v, 0.8, 1.5, is_causal=True, block_size=8)
    ref = reference_attention(q, k, v, 0.8, 1.5, is_causal=True)
    torch.testing.assert_close(out.double(), ref, rtol=2e-4, atol=2e-5)
    _check(q, k, v, torch.full((2,), 0.8), torch.full((2,), 1.5), is_causal=True, block_size=8, grad_bn=False)


def test_scalar_param_tensor_broadcasts_and_gets_grad():
    q, k, v, _, _ = _inputs(1, 4, 4, 10, 10, 8, seed=9)
    b = torch.tensor(0.7, requires_grad=True)
    n = torch.tensor([1.3], requires_grad=True)
    blockwise_attention(q, k, v, b, n, block_size=4).sum().backward()
    b64 = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    n64 = torch.tensor([1.3], dtype=torch.float64, requires_grad=True)
    reference_attention(q, k, v, b64, n64).sum().backward()
    torch.testing.assert_close(b.grad.double(), b64.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(n.grad.double(), n64.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("is_causal", [False, True])
def test_softmax_matches_sdpa(is_causal):
    q, k, v, _, _ = _inputs(2, 4, 4, 40, 40, 16, seed=10, big=1.0)
    mask = _padding_mask(2, 40, 40, seed=10)
    out = blockwise_attention(q, k, v, scoring="softmax", attn_mask=mask, is_causal=False, block_size=16)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out = blockwise_attention(q, k, v, scoring="softmax", is_causal=is_causal, block_size=16)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_custom_scale_and_value_dim():
    B, H, L = 1, 2, 21
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(B, H, L, 8, generator=gen)
    k = torch.randn(B, H, L, 8, generator=gen)
    v = torch.randn(B, H, L, 5, generator=gen)
    b, n = torch.tensor([0.5, 1.0]), torch.tensor([1.0, 2.0])
    out = blockwise_attention(q, k, v, b, n, scale=0.9, is_causal=True, block_size=8)
    ref = reference_attention(q, k, v, b, n, scale=0.9, is_causal=True)
    torch.testing.assert_close(out.double(), ref, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("Lq, Lk", [(30, 30), (1, 30), (3, 40)], ids=["square", "decode", "few-rows"])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "padding-and-empty-row"])
def test_half_precision_inputs(dtype, Lq, Lk, masked, kernel):
    """fp16/bf16 inputs, read in their own dtype by the fused kernel forward and backward (grouped-query heads,
    several key tiles and query blocks, chunked key blocks): outputs and gradients in the input dtype, close to
    the float32 computation on the same rounded inputs, and the b/n gradients float32.  Large scores for the
    forward (the literal power would overflow in fp16); moderate ones for the gradients, whose b/n sums over
    every score amplify the rounding of the saved output."""
    causal = Lq == Lk
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    mask = None
    if masked:  # padding, and one query row that sees no key at all (output 0, no gradient)
        mask = _padding_mask(2, Lq, Lk, seed=5)
        mask[1, :, Lq - 1, :] = False
    for big, grads in ((20.0, False), (2.0, True)):
        q, k, v, b, n = _inputs(2, 4, 2, Lq, Lk, 16, seed=12, big=big)
        b, n = b.requires_grad_(True), n.requires_grad_(True)
        qh, kh, vh = (t.to(dtype).requires_grad_(True) for t in (q, k, v))
        qf, kf, vf = (t.detach().float().requires_grad_(True) for t in (qh, kh, vh))
        bf, nf = (t.detach().clone().requires_grad_(True) for t in (b, n))
        out = blockwise_attention(qh, kh, vh, b, n, attn_mask=mask, is_causal=causal, block_size=8)
        assert out.dtype == dtype and torch.isfinite(out).all()
        ref = blockwise_attention(qf, kf, vf, bf, nf, attn_mask=mask, is_causal=causal, block_size=8)
        if masked:
            assert not out[1, :, Lq - 1].any()
        torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
        if not grads:
            continue
        dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(13))
        (out.float() * dout).sum().backward()
        (ref * dout).sum().backward()
        if masked:
            assert not qh.grad[1, :, Lq - 1].any()
        for got, want in ((qh, qf), (kh, kf), (vh, vf), (b, bf), (n, nf)):
            assert got.grad.dtype == (torch.float32 if got is b or got is n else dtype)
            scale = want.grad.abs().max().item()
            assert (got.grad.float() - want.grad).abs().max().item() <= 2 * tol * scale


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(13)
    q = torch.randn(1, 4, 7, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 7, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 7, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.5, 1.0, 1.5, 0.8], dtype=torch.float64, requires_grad=True)
    n = torch.tensor([1.0, 1.5, 2.0, 1.2], dtype=torch.float64, requires_grad=True)
    mask = torch.ones(1, 1, 7, 7, dtype=torch.bool)
    mask[..., 0] = False
    mask[..., 2, :] = False  # a fully masked row

    # float64 inputs are computed in float64 by the kernel, so gradcheck's finite differences are exact enough.
    def fn(q, k, v, b, n):
        return blockwise_attention(q, k, v, b, n, attn_mask=mask, is_causal=True, block_size=3)

    assert torch.autograd.gradcheck(fn, (q, k, v, b, n))


def test_bad_arguments():
    q, k, v, b, n = _inputs(1, 3, 3, 4, 4, 8)
    with pytest.raises(ValueError, match="ssa, softmax"):
        blockwise_attention(q, k, v, b, n, scoring="sparsemax")
    with pytest.raises(ValueError, match="multiple"):
        blockwise_attention(q, k[:, :2], v[:, :2], b, n)
    with pytest.raises(ValueError, match="bool"):
        blockwise_attention(q, k, v, b, n, attn_mask=torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="one value per head"):
        blockwise_attention(q, k, v, torch.ones(2), n)


@pytest.mark.slow
def test_long_run_parity_eager_vs_blockwise(monkeypatch):
    """A few hundred AdamW steps of a tiny SSALlama on ssa_eager and on ssa_blockwise (small tiles
    so that every layer runs several masked and unmasked tiles, padded batches): the loss curves and the learned
    SSA parameters agree."""
    import copy
    import functools

    from tests.models.tiny import build

    monkeypatch.setattr(bw, "blockwise_attention", functools.partial(blockwise_attention, block_size=16))
    steps, batch, length = 300, 4, 48
    model_e = build("llama", "ssa", seed=3, max_position_embeddings=64).train()
    model_b = copy.deepcopy(model_e)
    model_e.set_attn_implementation("ssa_eager")
    model_b.set_attn_implementation("ssa_blockwise")
    opt_e = torch.optim.AdamW(model_e.parameters(), lr=3e-3)
    opt_b = torch.optim.AdamW(model_b.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    vocab = model_e.config.vocab_size
    # a fixed small corpus (so the loss really goes down), visited in a random order, with left padding
    corpus = torch.randint(4, vocab, (16, length), generator=gen)
    losses_e, losses_b = [], []
    for step in range(steps):
        idx = torch.randint(0, corpus.shape[0], (batch,), generator=gen)
        ids = corpus[idx].clone()
        mask = torch.ones_like(ids)
        pad = torch.randint(0, length // 3, (batch,), generator=gen)
        for row, p in enumerate(pad.tolist()):
            mask[row, :p] = 0
            ids[row, :p] = model_e.config.pad_token_id
        labels = ids.masked_fill(mask == 0, -100)
        for model, opt, losses in ((model_e, opt_e, losses_e), (model_b, opt_b, losses_b)):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
    losses_e, losses_b = torch.tensor(losses_e), torch.tensor(losses_b)
    assert torch.isfinite(losses_b).all()
    assert losses_e[-20:].mean() < 0.6 * losses_e[:20].mean()  # it learned something
    # same curve: step by step early on, and within a small tolerance over the whole run
    torch.testing.assert_close(losses_b[:50], losses_e[:50], rtol=1e-4, atol=1e-4)
    assert (losses_b - losses_e).abs().max() < 2e-2
    assert abs(losses_b[-20:].mean() - losses_e[-20:].mean()) < 5e-3
    for (name, pe), (_, pb) in zip(model_e.named_parameters(), model_b.named_parameters()):
        torch.testing.assert_close(pb, pe, rtol=0.0, atol=5e-3, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("b, n", [(1e-4, 1.0), (50.0, 1.0), (0.5, 8.0), (1e-3, 20.0), (3.0, 30.0)])
def test_extreme_b_and_n(b, n, row_offset):
    """Tiny and huge b, large n: g spans hundreds of nats (the online maximum takes over from the fixed offset
    where the bound requires it); values and all five gradients still match float64."""
    q, k, v, _, _ = _inputs(2, 2, 2, 29, 29, 16, seed=31, big=4.0)
    _check(q, k, v, torch.full((2,), b), torch.full((2,), n), is_causal=True, block_size=(8, 16), rtol=1e-3,
           atol=1e-4)


def test_per_layer_parameters_broadcast_to_heads():
    """One (b, n) for all heads (per-layer granularity) as 1-element tensors: the gradient is the sum over heads."""
    q, k, v, _, _ = _inputs(1, 4, 2, 17, 17, 8, seed=32)
    b = torch.tensor([0.9], requires_grad=True)
    n = torch.tensor([1.7], requires_grad=True)
    blockwise_attention(q, k, v, b, n, is_causal=True, block_size=8).sum().backward()
    b64 = torch.tensor([0.9], dtype=torch.float64, requires_grad=True)
    n64 = torch.tensor([1.7], dtype=torch.float64, requires_grad=True)
    reference_attention(q, k, v, b64, n64, is_causal=True).sum().backward()
    torch.testing.assert_close(b.grad.double(), b64.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(n.grad.double(), n64.grad, rtol=1e-4, atol=1e-6)


def test_empty_sequences():
    q, k, v, b, n = _inputs(2, 2, 2, 0, 5, 8)
    assert blockwise_attention(q, k, v, b, n).shape == (2, 2, 0, 8)
    q, k, v, b, n = _inputs(2, 2, 2, 4, 0, 8)
    q.requires_grad_(True)
    out = blockwise_attention(q, k, v, b, n)
    assert out.shape == (2, 2, 4, 8) and torch.all(out == 0)
    out.sum().backward()
    assert torch.all(q.grad == 0)


@pytest.mark.parametrize("value_dtype", [torch.float32, torch.bfloat16], ids=["fp32-values", "bf16-values"])
def test_bf16_autocast_runs_the_bf16_kernel(value_dtype):
    """Under CPU bf16 autocast the kernel gets q, k, v as autocast gives them to SDPA (bf16: a model's linear
    layers return bf16, RoPE promotes q and k back to float32) and returns bf16: the values and gradients of the
    call on bf16 inputs outside autocast. float64 is left alone, as autocast leaves it."""
    q, k, v, b, n = _inputs(1, 4, 2, 24, 24, 16, seed=11)
    v = v.to(value_dtype)
    dout = torch.randn(1, 4, 24, 16, generator=torch.Generator().manual_seed(12)).bfloat16()

    def run(inputs, autocast):
        leaves = [x.clone().requires_grad_(True) for x in (*inputs, b, n)]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = blockwise_attention(*leaves, is_causal=True)
        out.backward(dout.to(out.dtype))
        return out, [x.grad for x in leaves]

    out, grads = run((q, k, v), autocast=True)
    ref, ref_grads = run((q.bfloat16(), k.bfloat16(), v.bfloat16()), autocast=False)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    for got, want, leaf in zip(grads, ref_grads, (q, k, v, b, n)):
        assert got.dtype == leaf.dtype and torch.equal(got, want.to(leaf.dtype))
    # float64 stays float64: the same result as without autocast
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out64 = blockwise_attention(q.double(), k.double(), v.double(), b.double(), n.double(), is_causal=True)
    assert out64.dtype == torch.float64
    assert torch.equal(out64, blockwise_attention(q.double(), k.double(), v.double(), b.double(), n.double(),
                                                  is_causal=True))


def test_no_grad_calls_skip_the_op_and_give_its_result():
    """Eager calls without gradients run the op's implementation directly (no custom-op dispatch); the result is
    the op's, and fake tensors (no-grad too) still go through the op and its fake kernel."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k, v, b, n = _inputs(1, 4, 2, 24, 24, 8, seed=4)
    with torch.no_grad():
        direct = blockwise_attention(q, k, v, b, n, is_causal=True)
    via_op = bw.attention_forward(q, k, v, b, n, None, True, 8 ** -0.5, bw.BLOCK_Q, bw.BLOCK_K)[0]
    assert torch.equal(direct, via_op)
    with FakeTensorMode():
        fq, fk, fv = torch.randn(1, 4, 24, 8), torch.randn(1, 2, 24, 8), torch.randn(1, 2, 24, 8)
        with torch.no_grad():
            out = blockwise_attention(fq, fk, fv, torch.ones(4), torch.ones(4), is_causal=True)
    assert type(out).__name__ == "FakeTensor" and out.shape == (1, 4, 24, 8)


def test_kernel_entry_returns_out_alone_without_lse_and_refuses_b_n_of_another_length(kernel):
    """The compiled forward's result without need_lse is [out] (no empty lse and residual made per decoding call),
    the same values as with it; b and n of a length other than H (or empty) are refused, never read past."""
    if kernel == "torch":
        pytest.skip("the compiled kernel's entry point")
    ops = native.load_kernels()
    q, k, v, b, n = _inputs(1, 4, 2, 5, 9, 8, seed=7)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    alone = ops.forward(q, k, v, b, n, None, True, 0.3, 256, 256, False, bw._STATIC_BOUND_MAX, bw._SERIAL_FLOPS)
    full = ops.forward(q, k, v, b, n, None, True, 0.3, 256, 256, True, bw._STATIC_BOUND_MAX, bw._SERIAL_FLOPS)
    assert len(alone) == 1 and len(full) == 3 and torch.equal(alone[0], full[0])
    for bad_b, bad_n in ((b[:1], n[:1]), (b[:3], n[:3]), (b, n[:2])):
        with pytest.raises(RuntimeError, match="one value per query head"):
            ops.forward(q, k, v, bad_b, bad_n, None, True, 0.3, 256, 256, False, bw._STATIC_BOUND_MAX,
                        bw._SERIAL_FLOPS)


@pytest.mark.parametrize("scoring", ["ssa", "softmax"])
def test_eager_gradients_skip_the_op_and_match_it(scoring):
    """Eager calls with gradients run the op's forward and backward through a plain autograd.Function (no
    custom-op dispatch): outputs and the gradients of q, k, v, b and n are the op's, bit for bit; a second
    derivative is refused, as through the op."""
    q, k, v, b, n = _inputs(1, 4, 2, 40, 40, 8, seed=5)
    if scoring == "softmax":
        b = n = torch.empty(0)
    dout = torch.randn(1, 4, 40, 8, generator=torch.Generator().manual_seed(6))

    def grads(run):
        leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, b, n)]
        out = run(*leaves)
        (out * dout).sum().backward()
        return out, [t.grad for t in leaves if t.numel()]

    eager_out, eager_grads = grads(lambda q, k, v, b, n: bw.run_blockwise(
        q, k, v, b if b.numel() else None, n if n.numel() else None, None, True, None))
    assert type(eager_out.grad_fn).__name__ == "_EagerAttentionBackward"
    op_out, op_grads = grads(lambda q, k, v, b, n: bw.attention_forward(q, k, v, b, n, None, True, 8 ** -0.5,
                                                                         bw.BLOCK_Q, bw.BLOCK_K)[0])
    assert torch.equal(eager_out, op_out)
    for got, want in zip(eager_grads, op_grads):
        assert torch.equal(got, want)
    leaf = q.detach().clone().requires_grad_(True)
    out = bw.run_blockwise(leaf, k, v, None, None, None, True, None)
    (g,) = torch.autograd.grad(out.sum(), leaf, create_graph=True)
    with pytest.raises(RuntimeError, match='second derivatives .* use the eager backend .*backend="eager"'):
        g.sum().backward()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "padding-mask"])
def test_reduced_precision_error_within_sdpa_error(dtype, is_causal, masked, kernel):
    """bf16 and fp16 inputs (read in their own dtype by the fused forward and backward, fp32 tile products and
    accumulation): the error against the float64 oracle is at most 1.5x SDPA's own error in that dtype on the
    same inputs (softmax, like for like; and SSA against SDPA's softmax error, the same rounding steps), forward
    and input gradients; outputs and gradients are in the input dtype."""
    B, H, L, D = 2, 4, 70, 32
    q, k, v, b, n = _inputs(B, H, H, L, L, D, seed=40, big=1.0)
    mask = _padding_mask(B, L, L, seed=40) if masked else None
    q16, k16, v16 = (t.to(dtype) for t in (q, k, v))
    gen = torch.Generator().manual_seed(41)
    dout = torch.randn(B, H, L, D, generator=gen, dtype=torch.float64)

    def run(fn, *args):
        leaves = [t.detach().clone().requires_grad_(True) for t in args]
        out = fn(*leaves)
        (out.double() * dout).sum().backward()
        return [out.detach()] + [t.grad for t in leaves]

    def err(got, want):
        return [(g.double() - w).abs().max().item() for g, w in zip(got, want)]

    sdpa_mask = None if mask is None else mask
    want_soft = run(lambda q, k, v: reference_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                        scoring="softmax"), q.double(), k.double(), v.double())
    want_ssa = run(lambda q, k, v: reference_attention(q, k, v, b.double(), n.double(), attn_mask=mask,
                                                       is_causal=is_causal), q.double(), k.double(), v.double())
    sdpa = err(run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=sdpa_mask, is_causal=is_causal),
                   q16, k16, v16), want_soft)
    ours_soft = run(lambda q, k, v: blockwise_attention(q, k, v, scoring="softmax", attn_mask=mask,
                                                        is_causal=is_causal, block_size=32), q16, k16, v16)
    ours_ssa = run(lambda q, k, v: blockwise_attention(q, k, v, b, n, attn_mask=mask, is_causal=is_causal,
                                                       block_size=32), q16, k16, v16)
    assert all(t.dtype == dtype for t in ours_soft + ours_ssa)
    for got, want in ((ours_soft, want_soft), (ours_ssa, want_ssa)):
        for name, e, s in zip(("out", "dq", "dk", "dv"), err(got, want), sdpa):
            assert e <= 1.5 * s, f"{kernel} {name}: error {e:.3g} > 1.5 x SDPA's {s:.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_op_matches_its_fake_kernel(dtype, kernel):
    """torch.library.opcheck on bf16 and fp16 inputs: the fake kernel's output dtypes (out in the input dtype,
    fp32 lse) are the real ones on every path, and autograd through the op works (what torch.compile and
    torch.export rely on)."""
    q, k, v, b, n = _inputs(1, 4, 2, 20, 20, 8, seed=42, big=1.0, dtype=dtype)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    args = (q, k, v, b.float(), n.float(), None, True, 8 ** -0.5, 8, 8)
    out, lse, residual = bw.attention_forward(*args)
    assert out.dtype == dtype and lse.dtype == torch.float32 and residual.dtype == torch.int8
    assert residual.shape == (out.shape if dtype == torch.bfloat16 else (0,))
    torch.library.opcheck(bw.attention_forward, args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_runner_matches_run_blockwise(dtype, kernel):
    """The bound decoding runner (straight to the kernel when no gradient is needed) gives run_blockwise's
    outputs: decode and prompt shapes, SSA and softmax, with 4-D boolean masks (straight to the kernel: padding,
    a per-row block mask as continuous batching builds, a broadcast one) and a mask of fewer dimensions (through
    run_blockwise), under autograd (its fallback: gradients reach q and b), and NaN inputs (propagated as by the
    torch path)."""
    q, k, v, b, n = _inputs(2, 4, 2, 5, 21, 16, seed=50, dtype=dtype)
    for bb, nn in ((b, n), (None, None)):
        run = bw.inference_runner(bb, nn)
        for qq, causal in ((q[:, :, -1:], False), (q, False), (q[:, :, :5], True)):
            kk, vv = (k[:, :, :5], v[:, :, :5]) if causal else (k, v)
            with torch.no_grad():
                want = bw.run_blockwise(qq, kk, vv, bb, nn, None, causal, None)
                assert torch.equal(run(qq, kk, vv, None, causal, None), want)
        padding = _padding_mask(2, 5, 21, seed=50)
        rows = torch.rand(2, 1, 5, 21, generator=torch.Generator().manual_seed(51)) < 0.6
        rows[..., 0] = True  # every row sees a key
        for mask in (padding, rows, padding[:, :, :1], rows[:1, :, :1].expand(2, 1, 5, 21), padding[0, 0]):
            with torch.no_grad():
                want = bw.run_blockwise(q, k, v, bb, nn, mask, False, 0.3)
                assert torch.equal(run(q, k, v, mask, False, 0.3), want)
    bg = b.clone().requires_grad_(True)
    qg = q.clone().requires_grad_(True)
    bw.inference_runner(bg, n)(qg, k, v, None, False, None).float().sum().backward()
    assert qg.grad is not None and bg.grad is not None and torch.isfinite(bg.grad).all()
    bad = q.clone()
    bad[0, 0, 0, 0] = float("nan")
    with torch.no_grad():
        out = bw.inference_runner(b, n)(bad, k, v, None, False, None)
    assert torch.isnan(out[0, 0, 0]).all() and torch.isfinite(out[1]).all()
