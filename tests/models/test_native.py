"""native.py: the build cache's rules (private folder, ownership, hashes, one build under concurrency), the
fallback when no compiler works, and the fused kernel's handling of non-finite inputs.

The cache rules are exercised on a tiny C++ source (it builds in seconds); the kernel's values and gradients
against the float64 oracle are in test_blockwise.py."""

import json
import os
import platform
import stat
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from ssa_hf.models import native
from ssa_hf.models.blockwise import blockwise_attention

TINY = "extern \"C\" int ssa_hf_cache_probe() { return 42; }\n"
FLAGS = ["-O0"]


def _load(root, name="probe_a"):
    return native.load_library(name, TINY, FLAGS, root=str(root))


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_build_is_private_recorded_and_reused(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    lib = _load(root)
    assert _mode(root) == 0o700 and _mode(os.path.dirname(lib)) == 0o700
    record = lib + ".sha256"
    assert open(record).read() == native._sha256(lib)

    def no_build(*args, **kwargs):
        raise AssertionError("a verified library was rebuilt")

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", no_build)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _load(root) == lib


@pytest.mark.parametrize("damage", ["truncated", "replaced", "record-missing", "group-writable-file"])
def test_damaged_library_is_rebuilt_with_one_warning(tmp_path, damage):
    root = tmp_path / "cache"
    lib = _load(root)
    original = open(lib, "rb").read()
    if damage == "truncated":  # a half-written or truncated file: loading it used to crash with SIGBUS
        with open(lib, "r+b") as f:
            f.truncate(len(original) // 2)
    elif damage == "replaced":  # someone else's code under our name
        with open(lib, "r+b") as f:
            f.seek(len(original) // 2)
            f.write(b"\x90" * 64)
    elif damage == "record-missing":
        os.unlink(lib + ".sha256")
    else:
        os.chmod(lib, 0o664)
    with pytest.warns(UserWarning, match="rebuilding"):
        assert _load(root) == lib
    assert open(lib + ".sha256").read() == native._sha256(lib)
    assert _mode(lib) & (stat.S_IWGRP | stat.S_IWOTH) == 0


def test_folder_others_can_write_is_emptied_and_closed(tmp_path):
    root = tmp_path / "cache"
    lib = _load(root)
    os.chmod(root, 0o777)
    planted = root / "planted.so"
    planted.write_bytes(b"not ours")
    with pytest.warns(UserWarning, match="writable by other users"):
        assert _load(root) == lib
    assert _mode(root) == 0o700 and not planted.exists()


def test_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setattr(native.os, "getuid", lambda: os.stat(root).st_uid + 1)
    with pytest.raises(native.UnsafeCacheError, match="another user"):
        _load(root)


def test_two_processes_building_at_once_make_one_build(tmp_path):
    """Both processes wait on the file lock; the second finds the first one's verified library."""
    root, log = tmp_path / "cache", tmp_path / "builds.log"
    script = textwrap.dedent(f"""
        import torch.utils.cpp_extension as ce
        from ssa_hf.models import native
        real = ce.load_inline
        def counted(*args, **kwargs):
            with open({str(log)!r}, "a") as f:
                f.write("build\\n")
            return real(*args, **kwargs)
        ce.load_inline = counted
        print(native.load_library("probe_b", {TINY!r}, {FLAGS!r}, root={str(root)!r}))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert outs[0][0].strip() == outs[1][0].strip()
    assert log.read_text().count("build") == 1


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(native, "_STATE", {"ops": None, "tried": False, "off_warned": False})
    native.set_native_enabled(True)
    yield
    native.set_native_enabled(None)


@pytest.mark.parametrize("compiler, message", [("/nonexistent/c++", "no C\\+\\+ compiler found"),
                                               ("/bin/false", "the C\\+\\+ build failed")])
def test_no_working_compiler_warns_once_and_runs_torch(tmp_path, monkeypatch, fresh_state, compiler, message):
    monkeypatch.setenv("SSA_HF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", compiler)
    with pytest.warns(UserWarning, match=message):
        assert native.load_kernels() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once only
        assert native.load_kernels() is None
        q = torch.randn(1, 2, 20, 8)
        out = blockwise_attention(q, q, q, torch.ones(2), torch.ones(2), is_causal=True)
    assert torch.isfinite(out).all()


def test_disabled_by_environment_warns_once(monkeypatch, fresh_state):
    """The variable is read at import and by set_native_enabled(None) (not per call: an os.environ lookup costs
    more than a decoding call's bookkeeping)."""
    monkeypatch.setenv("SSA_HF_BLOCKWISE_NATIVE", "0")
    try:
        native.set_native_enabled(None)
        with pytest.warns(UserWarning, match="SSA_HF_BLOCKWISE_NATIVE=0"):
            assert native.load_kernels() is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert native.load_kernels() is None
    finally:
        monkeypatch.delenv("SSA_HF_BLOCKWISE_NATIVE")
        native.set_native_enabled(None)
    assert native.native_enabled()


def test_no_global_thread_settings_are_changed():
    """The package sets no OMP_* variables and leaves torch's thread count alone."""
    before = (torch.get_num_threads(), {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "MKL_"))})
    q = torch.randn(2, 2, 70, 8, requires_grad=True)
    blockwise_attention(q, q, q, 1.0, 1.5, is_causal=True).sum().backward()
    after = (torch.get_num_threads(), {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "MKL_"))})
    assert before == after


def test_non_finite_inputs_propagate_like_the_torch_path():
    """inf/NaN never reach the polynomial log/exp: the fused kernel hands such calls to the torch path; a NaN in a
    visible key gives NaN outputs for the rows that see it, one in a masked key changes nothing."""
    assert native.load_kernels() is not None, "the fused CPU kernel did not build"
    B, H, L, D = 1, 2, 40, 8
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, H, L, D, generator=gen) for _ in range(3))
    b, n = torch.ones(H), torch.full((H,), 1.5)
    k_bad = k.clone()
    k_bad[0, 0, 7] = float("nan")
    got = blockwise_attention(q, k_bad, v, b, n, is_causal=True, block_size=8)
    assert got[0, 0, 7:].isnan().all() and not got[0, 0, :7].isnan().any() and not got[0, 1].isnan().any()
    mask = torch.ones(B, 1, 1, L, dtype=torch.bool)
    dec = blockwise_attention(q[:, :, -1:], k_bad, v, b, n, attn_mask=mask)
    assert dec[0, 0].isnan().all() and not dec[0, 1].isnan().any()
    mask[..., 7] = False
    dec = blockwise_attention(q[:, :, -1:], k_bad, v, b, n, attn_mask=mask)
    clean = blockwise_attention(q[:, :, -1:], k, v, b, n, attn_mask=mask)
    torch.testing.assert_close(dec, clean)


def test_kernel_runs_on_torchs_thread_pool():
    """The kernel's parallel region really runs on torch's pool: as many threads as torch.set_num_threads says
    (compiled without -fopenmp, ATen's header-only parallel_for is a serial loop), and loading the library maps no
    OpenMP runtime of its own (a fresh process compares its maps before and after: other packages, scikit-learn's
    wheel for one, may bring their own libgomp, which is not the kernel's doing)."""
    ops = native.load_kernels()
    assert ops is not None, "the fused CPU kernel did not build"
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            assert ops.parallel_width(16) == threads
    finally:
        torch.set_num_threads(before)
    script = textwrap.dedent("""
        import json
        from ssa_hf.models import native

        def runtimes():
            return sorted({line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line or "libomp" in line})

        before = runtimes()
        assert native.load_kernels() is not None
        print(json.dumps([before, runtimes()]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after == before, f"loading the kernel mapped OpenMP runtimes {sorted(set(after) - set(before))}"


@pytest.mark.parametrize("batch, kv_heads, length, keys, regions",
                         [(1, 8, 64, 96, 1), (1, 1, 512, 512, 1), (2, 2, 1, 96, 0), (1, 1, 40, 40, 0)],
                         ids=["items-per-head", "key-chunks", "decode-step-serial", "small-serial"])
def test_one_parallel_region_per_call(batch, kv_heads, length, keys, regions):
    """Forward and backward each open at most one parallel region: bounds, finiteness checks, delta, zeroing and
    the chunked dq/db reductions all happen inside the work items (beside busy processes every barrier costs a
    scheduler time slice, docs/performance.md); calls of under ~1M flops (a small model's decoding step) open
    none and run on the calling thread."""
    ops = native.load_kernels()
    assert ops is not None, "the fused CPU kernel did not build"
    gen = torch.Generator().manual_seed(3)
    H, D = 2 * kv_heads, 16
    q = torch.randn(batch, H, length, D, generator=gen, requires_grad=True)
    k, v = (torch.randn(batch, kv_heads, keys, D, generator=gen, requires_grad=True) for _ in range(2))
    b = torch.full((H,), 0.8, requires_grad=True)
    n = torch.full((H,), 1.5, requires_grad=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        before = ops.parallel_regions()
        out = blockwise_attention(q, k, v, b, n, is_causal=length == keys, block_size=16)
        assert ops.parallel_regions() - before == regions
        out.square().sum().backward()
        assert ops.parallel_regions() - before == 2 * regions
    finally:
        torch.set_num_threads(threads)
    assert all(t.grad is not None and t.grad.isfinite().all() for t in (q, k, v, b, n))
    # and no other region: the counted helper is the source's only at::parallel_for
    source = native.NATIVE_SOURCE
    assert source.count("at::parallel_for(") == 1


def _cpu_flags():
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_vector_width_follows_the_cpu_and_is_in_the_cache_key():
    """An AVX-512 CPU gets the 16-lane passes, built 512-wide; AVX2 the 8-lane ones; the flags (hence the code
    path) are part of the build's cache key."""
    flags = native.native_flags()
    cpu = _cpu_flags()
    ops = native.load_kernels()
    assert ops is not None, "the fused CPU kernel did not build"
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu:
        assert "-mprefer-vector-width=512" in flags and "-DCPU_CAPABILITY_AVX512" in flags
        assert ops.vector_lanes() == 16
    elif {"avx2", "fma"} <= cpu:
        assert "-DCPU_CAPABILITY_AVX2" in flags and ops.vector_lanes() == 8
    assert native.native_flags({"avx2", "fma", "f16c"}) != native.native_flags(set()) or not cpu
    keys = {native._build_key(native.native_flags(f)) for f in ({"avx2", "fma", "f16c"}, set(),
                                                                  {"avx512f", "avx512bw", "avx512vl", "avx512dq"})}
    assert len(keys) == 3


def _score_pass_reference(s, scale, b, n, off, d, dp, ssa):
    x = s.double() * scale
    g = torch.copysign(torch.log1p(b * x.abs()), x) * n if ssa else x
    p = torch.exp(g - off)
    ds = p * (dp.double() - d) * ((n * b * scale / (1 + b * x.abs())) if ssa else scale)
    # the size of dS's terms (P dP and P delta), against which its rounding is measured
    ds_size = p * (dp.double().abs() + abs(d)) * ((n * b * scale / (1 + b * x.abs())) if ssa else scale)
    return p, ds, ds_size, (p * (dp.double() - d) * g).sum(1)


@pytest.mark.parametrize("path", ["vector", "portable"])
@pytest.mark.parametrize("ssa", [True, False], ids=["ssa", "softmax"])
@pytest.mark.parametrize("b, n, spread", [(0.8, 1.5, 8.0), (1e-4, 1.0, 3.0), (50.0, 1.0, 20.0), (3.0, 30.0, 2.0), (0.8, -1.5, 8.0)])
def test_score_pass_accuracy(path, ssa, b, n, spread):
    """The per-score transform alone, forward (P) and backward (P, dS, sum(dg g)), on rows of 1 to 600 scores (the
    vector loop, its masked tail, rows shorter than a vector, rows of several of the SSA backward's 32-vector chunks
    with a tail) against float64: relative error of P and of dS
    (against the size of its terms) at most 1e-6 plus what float32 g itself carries (its rounding, ~6e-8 |g|,
    moves P by as much relative: rows spanning tens of nats cannot do better in float32)."""
    ops = native.load_kernels()
    assert ops is not None, "the fused CPU kernel did not build"
    if path == "vector" and ops.vector_lanes() == 0:
        pytest.skip("this CPU has neither AVX2 nor AVX-512: the portable passes are the only ones built")
    ops.set_portable(path == "portable")
    try:
        gen = torch.Generator().manual_seed(17)
        scale = 0.125
        for cols in (1, 7, 16, 33, 77, 600):
            s = torch.randn(40, cols, generator=gen) * spread / scale
            dp = torch.randn(40, cols, generator=gen)
            x = s.double() * scale
            g = torch.copysign(torch.log1p(b * x.abs()), x) * n if ssa else x
            off = float(g.max()) + 0.25
            p_ref, ds_ref, ds_size, dn_ref = _score_pass_reference(s, scale, b, n, off, 0.3, dp, ssa)
            got = s.clone()
            sums = ops.score_pass(got, torch.empty(0), scale, b, n, off, 0.0, ssa)
            live = p_ref > 1e-30  # 2^-126 and below: 0 or subnormal on either path
            tol = 1e-6 + 1.2e-7 * (g.abs() + abs(off))
            assert ((got.double() - p_ref).abs() / p_ref / tol)[live].max() < 1
            torch.testing.assert_close(sums.double(), p_ref.sum(1), rtol=2e-6 * (1 + abs(off)), atol=1e-30)
            got, dgot = s.clone(), dp.clone()
            acc = ops.score_pass(got, dgot, scale, b, n, off, 0.3, ssa)
            assert ((got.double() - p_ref).abs() / p_ref / tol)[live].max() < 1
            assert ((dgot.double() - ds_ref).abs() / ds_size / tol)[live].max() < 1
            if ssa:
                # y = 1 + b|x| is a float32: its rounding (6e-8) is an absolute error of up to 6e-8 n in g,
                # which dominates when b|x| is tiny, except on the AVX-512 pass, which takes log1p's argument b|x|
                # itself there; + 1e-30: rows whose every P underflows float32
                w = p_ref * (dp.double().abs() + 0.3)
                floor = 0.0 if path == "vector" and ops.vector_lanes() == 16 else 1e-7 * abs(n)
                bound = 2e-6 * (1 + off) * (w * g.abs()).sum(1) + floor * w.sum(1) + 1e-30
                assert ((acc.double() - dn_ref).abs() / bound).max() < 1
    finally:
        ops.set_portable(False)


def test_build_says_that_it_builds_and_how_long_it_took(tmp_path, capfd):
    _load(tmp_path / "cache", name="probe_say")
    err = capfd.readouterr().err
    assert "ssa-hf: building the fused CPU attention kernel" in err
    assert "ssa-hf: kernel built in" in err
    _load(tmp_path / "cache", name="probe_say")  # verified and reused: nothing said
    assert capfd.readouterr().err == ""


def test_build_lock_held_elsewhere_times_out_with_a_message(tmp_path, monkeypatch, capfd):
    """Another process holds the build lock: this one says it waits, gives up after the timeout with a
    RuntimeError naming the lock (load_kernels turns it into one warning and the torch path)."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    lock = root / "probe_lock.lock"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from filelock import FileLock
        held = FileLock({str(lock)!r})
        held.acquire()
        print("held", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("SSA_HF_BUILD_LOCK_TIMEOUT", "1")
        with pytest.raises(RuntimeError, match="held the kernel build lock .*probe_lock.lock"):
            _load(root, name="probe_lock")
        assert "waiting (at most 1 s) for another process" in capfd.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert os.path.basename(_load(root, name="probe_lock")) == "probe_lock.so"  # free again: builds


def test_lock_timeout_falls_back_to_torch_with_one_warning(tmp_path, monkeypatch, fresh_state):
    monkeypatch.setenv("SSA_HF_CACHE_DIR", str(tmp_path / "cache"))

    def stuck(*args, **kwargs):
        raise RuntimeError("another process has held the kernel build lock x.lock for over 1 s")

    monkeypatch.setattr(native, "load_library", stuck)
    with pytest.warns(UserWarning, match="build lock") as record:
        assert native.load_kernels() is None
    assert len(record) == 1
    q = torch.randn(1, 2, 12, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.isfinite(blockwise_attention(q, q, q, 1.0, 1.5, is_causal=True)).all()


@pytest.mark.parametrize("mode, refused", [(0o777, True), (0o775, True), (0o1777, False), (0o755, False)],
                         ids=["world-writable", "group-writable", "sticky", "private"])
def test_folders_above_the_cache_are_checked(tmp_path, mode, refused):
    above = tmp_path / "above"
    above.mkdir()
    os.chmod(above, mode)
    root = above / "ssa_hf" / "native"
    if refused:
        with pytest.raises(native.UnsafeCacheError, match="can be written by other users"):
            _load(root)
    else:
        assert os.path.exists(_load(root))


def test_folder_above_of_another_user_or_a_link_of_another_user_is_refused(tmp_path, monkeypatch):
    above = tmp_path / "above"
    above.mkdir(mode=0o755)
    real_stat, real_lstat, me = os.stat, os.lstat, os.getuid()

    def stat_as_other(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if os.path.realpath(path) == os.path.realpath(above):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, me + 1) + tuple(st)[5:])
        return st

    monkeypatch.setattr(native.os, "stat", stat_as_other)
    with pytest.raises(native.UnsafeCacheError, match="above .* belongs to another user"):
        _load(above / "cache")
    monkeypatch.setattr(native.os, "stat", real_stat)
    link = tmp_path / "link"
    link.symlink_to(above)

    def lstat_as_other(path, *args, **kwargs):
        st = real_lstat(path, *args, **kwargs)
        if str(path) == str(link):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, me + 1) + tuple(st)[5:])
        return st

    monkeypatch.setattr(native.os, "lstat", lstat_as_other)
    with pytest.raises(native.UnsafeCacheError, match="is a link that belongs to another user"):
        _load(link / "cache")


@pytest.mark.slow
def test_avx2_build_matches_the_oracle(monkeypatch):
    """The 8-lane (AVX2) passes, built on this machine with the AVX2 flags (a second build, ~1 CPU-minute: slow):
    the per-score pass and whole calls (GQA, padding mask, causal; softmax; head dims 4 to 16; decoding rows; bf16)
    against float64."""
    if not {"avx2", "fma", "f16c"} <= _cpu_flags():
        pytest.skip("no AVX2 on this CPU")
    flags = native.native_flags({"avx2", "fma", "f16c"}, isa="avx2")  # what SSA_HF_KERNEL_ISA=avx2 builds
    name = f"ssa_hf_native_{native._build_key(flags)}"
    ops = native.load_library(name, native.NATIVE_SOURCE, flags + [f"-DSSA_HF_NS={name}"], module=True)
    assert ops.vector_lanes() == 8
    monkeypatch.setitem(native._STATE, "ops", ops)
    monkeypatch.setitem(native._STATE, "tried", True)
    native.set_native_enabled(True)
    try:
        for ssa, (b, n, spread) in ((True, (0.8, 1.5, 8.0)), (False, (0.8, 1.5, 8.0)), (True, (3.0, 30.0, 2.0))):
            gen = torch.Generator().manual_seed(5)
            s = torch.randn(40, 77, generator=gen) * spread * 8
            dp = torch.randn(40, 77, generator=gen)
            x = s.double() * 0.125
            g = torch.copysign(torch.log1p(b * x.abs()), x) * n if ssa else x
            off = float(g.max()) + 0.25
            p_ref, ds_ref, ds_size, _ = _score_pass_reference(s, 0.125, b, n, off, 0.3, dp, ssa)
            got, dgot = s.clone(), dp.clone()
            ops.score_pass(got, dgot, 0.125, b, n, off, 0.3, ssa)
            live = p_ref > 1e-30
            tol = 1e-6 + 1.2e-7 * (g.abs() + abs(off))
            assert ((got.double() - p_ref).abs() / p_ref / tol)[live].max() < 1
            assert ((dgot.double() - ds_ref).abs() / ds_size / tol)[live].max() < 1
        from .test_blockwise import _check, _inputs, _padding_mask, check_decoding_rows

        q, k, v, b, n = _inputs(3, 4, 2, 45, 45, 20, seed=3)
        mask = _padding_mask(3, 45, 45, seed=3)
        _check(q, k, v, b, n, attn_mask=mask, is_causal=True)
        _check(q, k, v, b, n, scoring="softmax", is_causal=True)
        for D, Dv in ((4, 4), (8, 8), (16, 16), (8, 16)):  # the small-head-dim tile products' 8-lane forms
            qs, ks, _, bs, ns = _inputs(2, 4, 2, 45, 45, D, seed=50 + D, big=2.0)
            vs = torch.randn(2, 2, 45, Dv, generator=torch.Generator().manual_seed(Dv))
            _check(qs, ks, vs, bs, ns, attn_mask=mask[:2], is_causal=False, block_size=(16, 24))
        for D, dtype in ((5, torch.float32), (32, torch.float32), (40, torch.bfloat16)):  # decoding rows, 8 lanes
            check_decoding_rows(D, dtype, kv_length=100)
        out = blockwise_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), b, n, is_causal=True)
        ref = blockwise_attention(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(), b, n,
                                  is_causal=True)  # the same rounded inputs in float32: only out's rounding differs
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    finally:
        native.set_native_enabled(None)


def test_kernel_isa_is_read_from_the_environment_and_checked(monkeypatch):
    """SSA_HF_KERNEL_ISA builds for less than this CPU has (avx2: -march=haswell, 8 lanes; portable: no -march),
    each its own cache key; a value it does not know, or avx2 on a CPU without it, fails with what to set."""
    avx2 = {"avx2", "fma", "f16c"}
    monkeypatch.delenv("SSA_HF_KERNEL_ISA", raising=False)
    assert native.kernel_isa() == "native"
    if platform.machine() in ("x86_64", "AMD64"):
        flags = native.native_flags(avx2, isa="avx2")
        assert "-march=haswell" in flags and "-march=native" not in flags and "-DCPU_CAPABILITY_AVX2" in flags
        with pytest.raises(ValueError, match="lacks AVX2"):
            native.native_flags(set(), isa="avx2")
    assert native.native_flags(avx2, isa="portable") == native.FLAGS_PORTABLE
    keys = {native._build_key(native.native_flags(avx2, isa=isa)) for isa in ("native", "portable")}
    assert len(keys) == 2
    monkeypatch.setenv("SSA_HF_KERNEL_ISA", "Portable")
    assert native.kernel_isa() == "portable" and native.native_flags() == native.FLAGS_PORTABLE
    monkeypatch.setenv("SSA_HF_KERNEL_ISA", "avx1024")
    with pytest.raises(ValueError, match="SSA_HF_KERNEL_ISA='avx1024'"):
        native.native_flags()


@pytest.mark.parametrize("cap", [None, "AVX2"])
def test_tile_products_follow_the_cpu_and_onednns_isa_cap(cap):
    """The brgemm ukernel is picked for float32 where oneDNN runs AVX-512 (with its JIT capped at AVX2 it measured
    slower than sgemm) and for bf16 where, besides, the CPU multiplies bf16 natively and the probe passes (capped
    at AVX2, torch's brgemm has no bf16 products: the probe fails); either way a call matches the oracle."""
    features = native._cpu_features()
    avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= features
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    env.pop("DNNL_MAX_CPU_ISA", None)
    if cap:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    code = textwrap.dedent("""
        import torch
        from ssa_hf.models import native
        from ssa_hf.models.blockwise import blockwise_attention
        ops = native.load_kernels()
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 4, 70, 32, generator=g) for _ in range(3))
        b, n = torch.full((4,), 0.8), torch.full((4,), 1.5)
        ref = blockwise_attention(q.double(), k.double(), v.double(), b, n, is_causal=True)
        errs = [(blockwise_attention(q.to(dt), k.to(dt), v.to(dt), b, n, is_causal=True).double() - ref).abs().max()
                for dt in (torch.float32, torch.bfloat16)]
        print(ops.f32_brgemm(), ops.bf16_brgemm(), float(errs[0]) < 1e-5, float(errs[1]) < 2e-2)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    f32, bf16, f32_ok, bf16_ok = done.stdout.split()[-4:]
    assert f32 == str(avx512 and cap is None)
    assert bf16 == str(avx512 and cap is None and bool({"avx512_bf16", "amx_bf16"} & features))
    assert f32_ok == bf16_ok == "True"
