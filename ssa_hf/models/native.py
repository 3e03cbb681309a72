"""The fused CPU attention kernel (C++, built with torch.utils.cpp_extension on first use) and its build cache.

One native call per forward and one per backward: the loop over (batch, key/value head, query block) runs in a
single parallel region on torch's intra-op thread pool (``at::parallel_for``, so ``torch.set_num_threads``
applies and no second thread team is created), work items handed out dynamically so that a thread the
scheduler delays (other processes on the machine) holds nobody up.  Tile products go through the CPU BLAS torch
links (MKL's ``sgemm_``, one thread per worker); between them, SSA's g(s) = n sgn(s) log(1 + b|s|), the mask, the
exponential and the online (or fixed-offset) normalisation are one vectorised pass per tile.  log and exp are
short polynomials after an exponent/mantissa split (|error| ~1e-7, float32 rounding level): the vectorised
logs of libm and torch cost ~3x their exp.  blockwise.py wraps the two entry points in a torch custom op and
keeps the same math in torch ops (float64, and machines where the build fails).

Build cache (compiled code runs in this process, so it is loaded only from a place only this user can write):
- folder ``$SSA_HF_CACHE_DIR/native`` (default ``~/.cache/ssa_hf/native``), created with mode 0700; a folder
  that belongs to another user is refused (the torch path runs, one warning); one of ours that others can
  write is emptied and closed (0700) before use;
- a library is loaded only when its folder and file belong to this user, are not group/world-writable, and
  its SHA-256 matches the one recorded when it was built; otherwise it is rebuilt (one warning);
- the folders above it must belong to this user or root and be writable by nobody else (sticky ones such as
  /tmp excepted), and links on the way must belong to this user or root; otherwise it is refused the same way;
- builds are serialised by a file lock: concurrent first uses in several processes make one build; a process
  that finds the lock taken says so on stderr and waits at most ``$SSA_HF_BUILD_LOCK_TIMEOUT`` seconds (default
  900), then runs the torch path (one warning);
- a build prints one line on stderr when it starts and one with its time when it ends (about a minute of CPU);
- the key of a build hashes the source, compiler flags, torch and Python versions and the CPU's model and
  features (the build uses -march=native, and the flags name the vector width: ``native_flags``).
The per-score passes are vectorised with ``at::vec::Vectorized<float>``: 16 lanes where the CPU has AVX-512 (built
with -mprefer-vector-width=512), 8 with AVX2; the scalar passes stay built as the portable path (the only one on
other CPUs; tests force it with the ops' ``set_portable``).  ``SSA_HF_KERNEL_ISA=avx2`` or ``portable`` builds for
less than this CPU has (``kernel_isa``).
``SSA_HF_BLOCKWISE_NATIVE=0`` (or ``set_native_enabled(False)``) turns the native kernel off: the torch path
runs, with one warning saying so.  The variable is read at import (and again by ``set_native_enabled(None)``).  The build needs a C++ compiler (``$CXX`` or c++) and ninja (a dependency).

Part of the remote-code unit: imports only torch, the standard library and filelock (a transformers dependency).
"""

import contextlib
import hashlib
import importlib.util
import math
import os
import platform
import shutil
import stat
import sys
import threading
import time
import warnings

import torch

from .native_decode import DECODE_SOURCE
from .native_kernels import KERNEL_SOURCE
from .native_math import MATH_SOURCE
from .native_ops import OPS_SOURCE
from .native_rows import ROWS_SOURCE
from .native_tiles import TILES_SOURCE

__all__ = ["load_kernels", "native_enabled", "set_native_enabled", "cache_root", "load_library", "NATIVE_SOURCE"]

NATIVE_SOURCE = MATH_SOURCE + ROWS_SOURCE + DECODE_SOURCE + TILES_SOURCE + KERNEL_SOURCE + OPS_SOURCE

# -fno-trapping-math lets the compiler if-convert the selects in the tile loops and vectorise them (8x faster
# here); results are the same, only floating-point exception flags may differ
# -fopenmp: at::parallel_for is a template in ATen's headers whose OpenMP region is compiled into this library;
# without the flag it silently becomes a serial loop (one core whatever torch.set_num_threads says).  Nothing is
# linked for it: the GOMP symbols resolve to the OpenMP runtime torch has loaded, so there is one thread pool.
FLAGS_PORTABLE = ["-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast"]
FLAGS = FLAGS_PORTABLE[:1] + ["-march=native"] + FLAGS_PORTABLE[1:]
# The vectorised per-score passes (at::vec::Vectorized<float>) take their width from ATen's CPU_CAPABILITY macros,
# which torch sets per kernel file and an extension must set itself; -march=native alone leaves Vectorized on its
# scalar fallback.  GCC prefers 256-bit vectors on AVX-512 cores unless told otherwise (its own loops too).
_AVX512_FEATURES = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
_AVX2_FEATURES = ("avx2", "fma", "f16c")
FLAGS_AVX512 = ["-mprefer-vector-width=512", "-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512"]
FLAGS_AVX2 = ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"]

_LOCK = threading.Lock()
_STATE = {"ops": None, "tried": False, "off_warned": False}
# None: follow SSA_HF_BLOCKWISE_NATIVE (default on); True/False: forced
_OVERRIDE = [None]


class UnsafeCacheError(RuntimeError):
    """The cache folder cannot be trusted and cannot be made private."""


def _enabled_by_environment():
    raw = os.environ.get("SSA_HF_BLOCKWISE_NATIVE", "1")
    return raw == "1" or raw.strip().lower() not in ("0", "false", "no", "off", "")


# SSA_HF_BLOCKWISE_NATIVE as read at import and by set_native_enabled(None) (an os.environ lookup of an unset
# variable costs ~0.7 us, and this is asked per layer call)
_FROM_ENVIRONMENT = [_enabled_by_environment()]


def set_native_enabled(enabled):
    """Force the native kernel on (True) or off (False); None follows ``SSA_HF_BLOCKWISE_NATIVE`` (read again
    now)."""
    if enabled is None:
        _FROM_ENVIRONMENT[0] = _enabled_by_environment()
    _OVERRIDE[0] = None if enabled is None else bool(enabled)


def native_enabled():
    override = _OVERRIDE[0]
    return _FROM_ENVIRONMENT[0] if override is None else override


def cache_root():
    root = os.environ.get("SSA_HF_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "ssa_hf")
    return os.path.join(root, "native")


def _cpu_signature():
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features", "CPU part"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor()


def _cpu_features():
    """The CPU's feature flags (x86 /proc/cpuinfo), empty where unknown."""
    for line in _cpu_signature().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


KERNEL_ISAS = ("native", "avx2", "portable")


def kernel_isa():
    """The instruction set the kernel is built for, from ``SSA_HF_KERNEL_ISA``: ``native`` (default: this CPU's,
    -march=native), ``avx2`` (code any AVX2 CPU runs: -march=haswell and the 8-lane passes; e.g. a build shared by
    machines of several kinds, or the figures of a CPU without AVX-512 measured on one with it) or ``portable``
    (no -march: the scalar passes only)."""
    isa = os.environ.get("SSA_HF_KERNEL_ISA", "").strip().lower() or "native"
    if isa not in KERNEL_ISAS:
        raise ValueError(f"SSA_HF_KERNEL_ISA={isa!r}: expected one of {', '.join(KERNEL_ISAS)} (or unset it)")
    return isa


def native_flags(features=None, isa=None):
    """Compiler flags of the kernel build for `isa` (default: kernel_isa()).  native: -march=native with the
    per-score passes' vector width from the CPU's features (AVX-512: 16 lanes, AVX2: 8; otherwise the portable
    scalar passes only)."""
    isa = kernel_isa() if isa is None else isa
    features = _cpu_features() if features is None else set(features)
    x86 = platform.machine() in ("x86_64", "AMD64")
    if isa == "portable":
        return list(FLAGS_PORTABLE)
    if isa == "avx2":
        if not (x86 and all(f in features for f in _AVX2_FEATURES)):
            raise ValueError("SSA_HF_KERNEL_ISA=avx2, but this CPU lacks AVX2/FMA/F16C: use native or portable")
        return FLAGS_PORTABLE[:1] + ["-march=haswell", "-mtune=native"] + FLAGS_PORTABLE[1:] + FLAGS_AVX2
    if x86 and all(f in features for f in _AVX512_FEATURES):
        return FLAGS + FLAGS_AVX512
    if x86 and all(f in features for f in _AVX2_FEATURES):
        return FLAGS + FLAGS_AVX2
    return list(FLAGS)


def _is_private(st):
    return st.st_uid == os.getuid() and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _check_ancestors(path):
    """Every folder above `path` must belong to this user or root and be writable by nobody else (a sticky
    folder such as /tmp excepted: others cannot rename or delete what is ours there); a link on the way must
    belong to this user or root.  Otherwise whoever can write there can swap our folder for theirs."""
    uid = os.getuid()
    parts = os.path.abspath(path).split(os.sep)
    for i in range(1, len(parts)):  # the links on the way, as written
        here = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (uid, 0):
            raise UnsafeCacheError(f"{here}, on the way to {path}, is a link that belongs to another user")
    real = os.path.realpath(path)
    here = os.path.dirname(real)
    while True:
        st = os.stat(here)
        if st.st_uid not in (uid, 0):
            raise UnsafeCacheError(f"{here}, above {path}, belongs to another user")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise UnsafeCacheError(f"{here}, above {path}, can be written by other users (and is not sticky)")
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def _private_folder(path):
    """Create `path` with mode 0700, or check that it is a folder of this user that nobody else can write.  One
    of ours that others could write is emptied (others may have put anything there) and closed.  The folders
    above it are checked too (_check_ancestors)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    _check_ancestors(path)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCacheError(f"{path} is not a folder (a link or a file)")
    if st.st_uid != os.getuid():
        raise UnsafeCacheError(f"{path} belongs to another user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH | stat.S_IRWXG | stat.S_IRWXO):
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            warnings.warn(f"ssa-hf: the kernel cache {path} was writable by other users; emptied it and made it "
                          "private (mode 0700). The kernel is rebuilt.", stacklevel=3)
            for entry in os.listdir(path):
                full = os.path.join(path, entry)
                if os.path.isdir(full) and not os.path.islink(full):
                    shutil.rmtree(full, ignore_errors=True)
                else:
                    os.unlink(full)
        os.chmod(path, 0o700)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _verified(folder, library):
    """Whether `library` (in `folder`) may be loaded: both ours and private, and its hash the recorded one."""
    try:
        if not (_is_private(os.lstat(folder)) and _is_private(os.lstat(library))):
            return False
        with open(library + ".sha256") as f:
            return f.read().strip() == _sha256(library)
    except OSError:
        return False


def _open(name, library, module):
    """Load a verified library: as the Python extension module `name` (its PYBIND11_MODULE), or as a plain shared
    library (torch.ops.load_library)."""
    if not module:
        torch.ops.load_library(library)
        return library
    spec = importlib.util.spec_from_file_location(name, library)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def load_library(name, source, flags, root=None, module=False):
    """Build `source` with torch.utils.cpp_extension into the private cache and load it: returns the library's
    path, or with `module` the Python extension module it defines (PYBIND11_MODULE(name, ...): the kernel).  The
    library is loaded under the build lock, right after its hash check.  Raises RuntimeError (or
    UnsafeCacheError) with the reason."""
    from torch.utils import cpp_extension

    root = root or cache_root()
    _private_folder(root)
    folder = os.path.join(root, name)
    library = os.path.join(folder, name + ".so")
    with _build_lock(os.path.join(root, name + ".lock")):
        if os.path.exists(library) and _verified(folder, library):
            return _open(name, library, module)
        if os.path.exists(folder):
            if os.path.exists(library):
                warnings.warn(f"ssa-hf: the compiled kernel {library} failed its ownership, permission or hash check "
                              "(modified, truncated or half-written); rebuilding it.", stacklevel=3)
            shutil.rmtree(folder)  # unlinked, not overwritten: a process that has it loaded keeps its copy
        os.makedirs(folder, mode=0o700)
        compiler = os.environ.get("CXX", "c++")
        if shutil.which(compiler) is None:
            raise RuntimeError(f"no C++ compiler found (looked for {compiler!r}; install g++ or clang++, or set CXX)")
        # cpp_extension skips the build of a name it already built in this process: make it build afresh
        getattr(cpp_extension.JIT_EXTENSION_VERSIONER, "entries", {}).pop(name, None)
        _say(f"ssa-hf: building the fused CPU attention kernel in {folder} (once per machine and torch version; "
             "about a minute)...")
        started = time.perf_counter()
        try:
            cpp_extension.load_inline(name, cpp_sources=[source], extra_cflags=flags, build_directory=folder,
                                      is_python_module=False, no_implicit_headers=True, verbose=False)
        except Exception as exc:  # the compiler's message is in the exception text
            text = str(exc).strip().splitlines()
            _say(f"ssa-hf: the kernel build failed after {time.perf_counter() - started:.0f} s")
            raise RuntimeError(f"the C++ build failed with {compiler}: {' | '.join(text[-6:])[:800]}") from None
        _say(f"ssa-hf: kernel built in {time.perf_counter() - started:.0f} s")
        tmp = library + ".sha256.tmp"
        with open(tmp, "w") as f:
            f.write(_sha256(library))
        os.replace(tmp, library + ".sha256")
        return _open(name, library, module) if module else library  # load_inline loaded the plain library


def _say(line):
    """One line on stderr (the build takes tens of CPU-seconds: the first attention call says why it waits)."""
    print(line, file=sys.stderr, flush=True)


def _lock_timeout():
    """$SSA_HF_BUILD_LOCK_TIMEOUT (default 900): a positive finite number of seconds, else a ValueError (not the
    RuntimeError that falls back to the torch path: a setting to correct, never a silent wait forever, which
    filelock makes of a negative timeout)."""
    text = os.environ.get("SSA_HF_BUILD_LOCK_TIMEOUT", "900")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"SSA_HF_BUILD_LOCK_TIMEOUT={text!r}: give a positive, finite number of seconds (default "
                         f"900), or unset it")
    return value


@contextlib.contextmanager
def _build_lock(path):
    """The build's file lock: taken at once, or after saying that another process holds it, waiting at most
    $SSA_HF_BUILD_LOCK_TIMEOUT seconds (default 900); then a RuntimeError (the torch path runs, one warning)."""
    from filelock import FileLock, Timeout

    limit = _lock_timeout()  # (checked whether or not the lock is free)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=min(0.5, limit))
    except Timeout:
        _say(f"ssa-hf: waiting (at most {limit:.0f} s) for another process that is building the kernel "
             f"(lock {path})...")
        try:
            lock.acquire(timeout=limit)
        except Timeout:
            raise RuntimeError(f"another process has held the kernel build lock {path} for over {limit:.0f} s (a "
                               "build still running, or a stuck process: end it, or set SSA_HF_BUILD_LOCK_TIMEOUT)"
                               ) from None
    try:
        yield
    finally:
        lock.release()


def _build_key(flags):
    parts = [NATIVE_SOURCE, " ".join(flags), torch.__version__, sys.version, platform.machine(), _cpu_signature(),
             os.environ.get("CXX", "c++")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _load():
    errors = []
    for flags in dict.fromkeys((tuple(native_flags()), tuple(FLAGS_PORTABLE))):
        flags = list(flags)
        key = _build_key(flags)
        namespace = f"ssa_hf_native_{key}"
        try:
            return load_library(namespace, NATIVE_SOURCE, flags + [f"-DSSA_HF_NS={namespace}"], module=True)
        except UnsafeCacheError:
            raise
        except RuntimeError as exc:
            errors.append(str(exc))
            if "no C++ compiler" in str(exc) or "Ninja" in str(exc) or "build lock" in str(exc):
                break
            if flags != FLAGS_PORTABLE:
                _say("ssa-hf: the -march=native build failed; trying the portable build (slower kernel)")
    raise RuntimeError(errors[0])


def load_kernels():
    """The compiled kernel's ops (``.forward``, ``.backward``), or None: turned off (one warning says so), or
    the build failed (one warning says why and what to do); the torch path then runs, correct and slower."""
    if not native_enabled():
        if not _STATE["off_warned"]:
            _STATE["off_warned"] = True
            warnings.warn("ssa-hf: SSA_HF_BLOCKWISE_NATIVE=0 (or set_native_enabled(False)): the fused CPU kernel is "
                          "off; attention runs the same math in torch ops (slower).", stacklevel=2)
        return None
    if _STATE["tried"]:
        return _STATE["ops"]
    with _LOCK:
        if not _STATE["tried"]:
            try:
                _STATE["ops"] = _load()
            except UnsafeCacheError as exc:
                warnings.warn(f"ssa-hf: not loading compiled code: {exc}. Set SSA_HF_CACHE_DIR to a folder of your "
                              "own; until then attention runs in torch ops (slower).", stacklevel=2)
            except (RuntimeError, OSError) as exc:
                warnings.warn(f"ssa-hf: the fused CPU kernel is unavailable ({exc}); attention runs the same math in "
                              "torch ops (slower).", stacklevel=2)
            _STATE["tried"] = True
    return _STATE["ops"]


def reset():
    """Forget the loaded kernel (tests; a library already loaded stays mapped in this process)."""
    with _LOCK:
        _STATE.update(ops=None, tried=False, off_warned=False)
