"""The native C tile kernels (ssa_hf/models/native.py), tile by tile against the torch-op tiles of blockwise.py
(the readable statement of the same math), plus the decode kernel, non-finite inputs and the build fallback.

End-to-end results of the blockwise kernel on both tile implementations are in test_blockwise.py."""

import warnings

import pytest
import torch

from ssa_hf.models import blockwise as bw
from ssa_hf.models import native
from ssa_hf.models.blockwise import blockwise_attention


@pytest.fixture(scope="module")
def kernels():
    native.set_native_enabled(True)
    k = native.load_native_tiles()
    assert k is not None, "the native kernels did not build (is a C compiler installed?)"
    yield k
    native.set_native_enabled(None)


GB, GH, G, R, C = 2, 3, 2, 5, 37  # odd sizes: vector loops get remainders
SCALE = 0.25


def _tile(seed, big=4.0):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(GB * GH, R * G, C, generator=gen) * big
    dp = torch.randn(GB * GH, R * G, C, generator=gen)
    b = torch.rand(1, GH, 1, G, 1, generator=gen) * 1.5 + 0.2
    n = torch.rand(1, GH, 1, G, 1, generator=gen) * 1.5 + 1.0
    return s, dp, b, n


def _masks(seed):
    """Tile masks of every layout the driver produces: causal patterns (with offsets) and explicit bool tiles
    broadcast over batch, heads or group heads."""
    gen = torch.Generator().manual_seed(seed)
    cases = {"none": None}
    for off in (-2, 0, 3, 40):
        rows = torch.arange(R).view(R, 1)
        tensor = (torch.arange(C).view(1, C) <= rows + off).view(1, 1, R, 1, C)
        cases[f"causal{off}"] = bw._TileMask(tensor, causal_offset=off)
    for shape in ((1, 1, R, 1, C), (GB, 1, R, 1, C), (GB, GH, R, G, C), (1, GH, R, 1, C)):
        m = torch.rand(shape, generator=gen) > 0.35
        m[..., 0, :, :] = False  # a row with no visible key
        cases["mask" + "x".join(map(str, shape))] = bw._TileMask(m.contiguous())
    return cases


MASKS = list(_masks(0))


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("scoring", ["ssa", "softmax"])
@pytest.mark.parametrize("static", [True, False], ids=["fixed-offset", "online-max"])
def test_forward_tile_matches_torch(kernels, mask_name, scoring, static):
    ssa = scoring == "ssa"
    s, _, b, n = _tile(1)
    tm = _masks(0)[mask_name]
    rows = (GB, GH, R, G)
    if static:
        m0 = torch.rand(rows) * 3 + 8.0  # an offset above every g, as the row bound is
    else:
        m0 = torch.where(torch.rand(rows) > 0.5, torch.randn(rows), torch.full(rows, float("-inf")))
    l0 = torch.rand(rows)
    results = []
    for ops in (bw._TorchTiles(ssa, SCALE), bw._NativeTiles(kernels, ssa, SCALE)):
        st, m, l = s.clone(), m0.clone(), l0.clone()
        p, alpha = ops.fwd(st, st.view(GB, GH, R, G, C), b, n, m, l, tm, static)
        results.append((p.clone(), m, l, alpha))
    (p_t, m_t, l_t, a_t), (p_n, m_n, l_n, a_n) = results
    torch.testing.assert_close(p_n, p_t, rtol=2e-6, atol=1e-30)
    torch.testing.assert_close(l_n, l_t, rtol=2e-6, atol=0)
    # the online maximum: libm's log1pf in C, torch.log(1 + x) in the torch tiles (less exact near 0)
    torch.testing.assert_close(m_n, m_t, rtol=1e-6, atol=2e-7)
    if not static:
        torch.testing.assert_close(a_n.view(rows), a_t.view(rows), rtol=1e-6, atol=0)
    if tm is not None:  # masked weights are exactly 0
        visible = tm.tensor.expand(GB, GH, R, G, C).reshape(p_n.shape)
        assert (p_n[~visible] == 0).all()


@pytest.mark.parametrize("mask_name", MASKS)
@pytest.mark.parametrize("scoring", ["ssa", "softmax"])
def test_backward_tile_matches_torch(kernels, mask_name, scoring):
    ssa = scoring == "ssa"
    s, dp, b, n = _tile(2)
    tm = _masks(0)[mask_name]
    rows = (GB, GH, R, G)
    lse = torch.rand(rows) * 3 + 6.0
    lse[0, 0, 1] = float("inf")  # a row without any visible key (the forward's marker)
    delta = torch.randn(rows)
    results = []
    for ops in (bw._TorchTiles(ssa, SCALE), bw._NativeTiles(kernels, ssa, SCALE)):
        st, dpt = s.clone(), dp.clone()
        dn = torch.zeros(rows) if ssa else None
        p, ds = ops.bwd(st, dpt, st.view(GB, GH, R, G, C), dpt.view(GB, GH, R, G, C), lse, delta, b, n, tm, dn)
        results.append((p.clone(), ds.clone(), dn))
    (p_t, ds_t, dn_t), (p_n, ds_n, dn_n) = results
    torch.testing.assert_close(p_n, p_t, rtol=2e-6, atol=1e-30)
    torch.testing.assert_close(ds_n, ds_t, rtol=2e-5, atol=1e-7)
    if ssa:
        torch.testing.assert_close(dn_n, dn_t, rtol=2e-5, atol=1e-6)
    empty = p_n.view(GB, GH, R, G, C)[0, 0, 1]
    assert (empty == 0).all() and (ds_n.view(GB, GH, R, G, C)[0, 0, 1] == 0).all()


def test_fast_log_exp_accuracy_over_wide_scores(kernels):
    """P = exp(g - offset) from the kernel's polynomial log/exp against float64, scores up to 1e4."""
    s = torch.cat([torch.logspace(-6, 4, 2000), -torch.logspace(-6, 4, 2000), torch.zeros(1)]).view(1, 1, -1)
    for b, n in ((0.3, 1.0), (1.0, 1.5), (2.0, 3.0)):
        x = s.double() * SCALE
        g = n * torch.sign(x) * torch.log1p(b * x.abs())
        off = float(g.max())
        want = torch.exp(g - off)
        st = s.clone()
        l = torch.zeros(1)
        kernels.fwd(st, 1, 1, torch.tensor([b]), torch.tensor([n]), SCALE, None, None, False,
                    torch.tensor([off]), l, None)
        keep = want > 1e-30
        rel = ((st.double() - want).abs() / want)[keep]
        # the same formula in float32 torch ops: the kernel's polynomials add little to float32 rounding itself
        x32 = s * SCALE
        torch32 = torch.exp(n * torch.sign(x32) * torch.log1p(b * x32.abs()) - off)
        rel32 = ((torch32.double() - want).abs() / want)[keep]
        assert rel.max() < 2 * rel32.max() + 1e-7, (rel.max(), rel32.max())
        assert (st[~keep] < 1e-30).all()


@pytest.mark.parametrize("scoring", ["ssa", "softmax"])
def test_decode_kernel_gqa_mask_against_float64(kernels, scoring):
    from tests.models.test_blockwise import reference_attention

    B, H, Hkv, Lk, D = 3, 6, 2, 45, 24
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, h, L, D, generator=gen) * 2 for h, L in ((H, 1), (Hkv, Lk), (Hkv, Lk)))
    b, n = torch.rand(H, generator=gen) + 0.3, torch.rand(H, generator=gen) + 1.0
    mask = torch.rand(B, 1, 1, Lk, generator=gen) > 0.3
    mask[1] = False  # a sequence with nothing to attend to returns 0
    with torch.no_grad():
        out = blockwise_attention(q, k, v, b, n, attn_mask=mask, scoring=scoring)
    ref = reference_attention(q, k, v, b, n, attn_mask=mask, scoring=scoring)
    torch.testing.assert_close(out.double(), ref, rtol=2e-5, atol=2e-6)
    assert (out[1] == 0).all()


def test_non_finite_inputs_propagate_like_torch(kernels):
    """inf/NaN scores never reach the polynomial log/exp: the tiled path routes the call to the torch tiles, the
    decode kernel checks its rows; a NaN in a visible key gives NaN outputs, one in a masked key changes nothing."""
    B, H, L, D = 1, 2, 40, 8
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, H, L, D, generator=gen) for _ in range(3))
    b, n = torch.ones(H), torch.full((H,), 1.5)
    k_bad = k.clone()
    k_bad[0, 0, 7] = float("nan")
    mask = torch.ones(B, 1, L, L, dtype=torch.bool)
    with torch.no_grad():
        native.set_native_enabled(False)
        want = blockwise_attention(q, k_bad, v, b, n, is_causal=True, block_size=8)
        native.set_native_enabled(True)
        got = blockwise_attention(q, k_bad, v, b, n, is_causal=True, block_size=8)
        torch.testing.assert_close(got, want, equal_nan=True)
        assert got[0, 0, 7:].isnan().all() and not got[0, 0, :7].isnan().any() and not got[0, 1].isnan().any()
        # decoding: NaN key visible -> NaN row; masked -> the same as without it
        dec = blockwise_attention(q[:, :, -1:], k_bad, v, b, n, attn_mask=mask[:, :, -1:])
        assert dec[0, 0].isnan().all() and not dec[0, 1].isnan().any()
        mask[..., 7] = False
        dec = blockwise_attention(q[:, :, -1:], k_bad, v, b, n, attn_mask=mask[:, :, -1:])
        clean = blockwise_attention(q[:, :, -1:], k, v, b, n, attn_mask=mask[:, :, -1:])
        torch.testing.assert_close(dec, clean)


def test_build_is_cached_and_failure_falls_back_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("SSA_HF_CACHE_DIR", str(tmp_path / "cache"))
    path = native._build(native._cache_dir())
    assert path.startswith(str(tmp_path))

    def no_compiler(*args, **kwargs):  # a cached build never runs the compiler again
        raise AssertionError("compiled twice")

    monkeypatch.setattr(native.subprocess, "run", no_compiler)
    assert native._build(native._cache_dir()) == path
    monkeypatch.undo()

    # a machine without a working C compiler: one warning that says what to install, then the torch tiles
    monkeypatch.setenv("SSA_HF_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(native, "_compilers", lambda: ["/bin/false"])
    monkeypatch.setattr(native, "_STATE", {"tiles": None, "tried": False})
    native.set_native_enabled(True)
    try:
        with pytest.warns(UserWarning, match="C compiler"):
            assert native.load_native_tiles() is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once only
            assert native.load_native_tiles() is None
            assert isinstance(bw._tile_ops(torch.float32, True, 1.0), bw._TorchTiles)
            q = torch.randn(1, 2, 20, 8)
            out = blockwise_attention(q, q, q, torch.ones(2), torch.ones(2), is_causal=True)
        assert torch.isfinite(out).all()
    finally:
        native.set_native_enabled(None)


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("SSA_HF_BLOCKWISE_NATIVE", "0")
    assert not native.native_enabled() and native.load_native_tiles() is None
    assert isinstance(bw._tile_ops(torch.float32, True, 1.0), bw._TorchTiles)


def test_read_only_cache_folder_builds_in_the_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SSA_HF_CACHE_DIR", str(tmp_path / "read-only"))
    monkeypatch.setattr(native.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    real_build, tried = native._build, []

    def build(directory):  # the cache folder refuses writes (root ignores chmod, so simulate it)
        tried.append(directory)
        if directory.startswith(str(tmp_path / "read-only")):
            raise PermissionError(13, "Permission denied", directory)
        return real_build(directory)

    monkeypatch.setattr(native, "_build", build)
    monkeypatch.setattr(native, "_STATE", {"tiles": None, "tried": False})
    native.set_native_enabled(True)
    try:
        kernels = native.load_native_tiles()
    finally:
        native.set_native_enabled(None)
    assert len(tried) == 2 and kernels is not None and kernels.path.startswith(str(tmp_path / "tmp"))
