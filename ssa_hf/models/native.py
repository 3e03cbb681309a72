"""Native per-tile kernels of the blockwise attention (C, compiled on first use, loaded with ctypes).

The blockwise kernel (blockwise.py) runs its matrix products with torch (MKL/oneDNN) and everything between
them, the per-tile elementwise work, here: one pass over each tile of raw scores that applies the scoring
function, exponentiates, masks and reduces (forward), or recomputes P and forms dS and the per-row dn terms
(backward).  Why C: SSA's g(s) = n sgn(s) log(1 + b|s|) needs a logarithm per score, and the vectorised logs
that torch and TorchInductor call cost ~3x their exp (measured on the 2-core AVX-512 development machine:
~190 us vs ~55 us per 2^18-score tile).  Here log and exp are short polynomials after an exponent/mantissa
split (|error| ~1e-7, the level of float32 rounding), which the C compiler vectorises: ~85 us per tile.

The source below is compiled once per machine with the system C compiler (``$CC``, else cc/gcc/clang; the
same compiler TorchInductor needs) into a cache folder (``$SSA_HF_CACHE_DIR``, default ``~/.cache/ssa_hf``),
keyed by a hash of source, compiler, flags, platform and the CPU's model and features (the build uses
-march=native), written atomically so concurrent processes can share it.  When
no compiler works, or ``SSA_HF_BLOCKWISE_NATIVE=0``, the blockwise kernel runs the same math in torch ops
(blockwise.py's ``_TorchTiles``): identical results up to float32 rounding, slower.

Only float32 tiles run here (float16/bfloat16 inputs are computed in float32 by the blockwise kernel anyway);
float64 stays in torch.  Threads: OpenMP with ``torch.get_num_threads()`` threads.

Part of the remote-code unit: imports only torch and the standard library.
"""

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings

import torch

__all__ = ["NativeTiles", "load_native_tiles", "native_enabled", "set_native_enabled", "NATIVE_SOURCE"]

# Layout of a tile (see blockwise.py): raw scores s [nh, RG, C] float32 contiguous, nh = gb * gh tile heads,
# RG = R * G rows ordered (query position r, group head g), C keys.  Per-head parameters b, n: [gh * G].
# Row arrays (m, l, alpha, lse, delta, dn): [nh * RG] contiguous.  Masks: either `causal` (column c of row r is
# visible iff c <= r + coff) or a bool tile [mb, mh, R, mg, C] contiguous with mb in {1, gb}, mh in {1, gh},
# mg in {1, G} (broadcast where 1), or none (every key visible).
NATIVE_SOURCE = r"""
#include <stdint.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef union { float f; int32_t i; } ssa_bits;

#define SSA_LOG2E 1.4426950408889634f
#define SSA_LN2 0.6931471805599453f

#define SSA_LOG2E_D 1.4426950408889634

/* Everything in the loops is in base 2 (one multiply fewer per score each way): g2 = g * log2(e),
   P = 2^(g2 - offset * log2(e)).  The row offset in base 2 is kept as a float pair (hi + lo): its rounding
   would otherwise scale a whole row of P by up to 1 + 1e-7 * |offset|, which the backward's dn sums amplify. */

/* log2(y) for finite y >= 1.  y = 2^e * m with m in [sqrt(1/2), sqrt(2)); ln(m) = x - x^2/2 + x^3 P(x),
   x = m - 1, P a least-squares fit (max error 7e-8). */
static inline __attribute__((always_inline)) float ssa_log2_ge1(float y) {
    ssa_bits u, mm;
    u.f = y;
    int32_t adj = u.i + (0x3f800000 - 0x3f3504f3);
    int32_t e = (adj >> 23) - 127;
    mm.i = (adj & 0x007fffff) + 0x3f3504f3;
    float x = mm.f - 1.0f;
    float z = x * x;
    float p = 0.09272283084f;
    p = p * x - 0.1411843188f;
    p = p * x + 0.1467637877f;
    p = p * x - 0.1659285518f;
    p = p * x + 0.1998512912f;
    p = p * x - 0.2500092169f;
    p = p * x + 0.3333341026f;
    return (x - 0.5f * z + z * x * p) * SSA_LOG2E + (float)e;
}

/* 2^t for finite t <= ~0: 2^k * 2^f, |f| <= 1/2, 2^f = 1 + f Q(f) (relative error 5e-9); exactly 0 below -126,
   where float32 leaves the normal range.  No inf/NaN handling: the caller (blockwise.py) sends tiles here only
   when every score is finite, and runs the others with torch ops. */
static inline __attribute__((always_inline)) float ssa_exp2_le0(float t) {
    float tc = t < -126.0f ? -126.0f : t;
    float kf = (tc + 12582912.0f) - 12582912.0f;
    float f = tc - kf;
    float q = 0.0001546144746f;
    q = q * f + 0.001339086735f;
    q = q * f + 0.00961805667f;
    q = q * f + 0.05550357104f;
    q = q * f + 0.2402265092f;
    q = q * f + 0.693147188f;
    float r = 1.0f + f * q;
    ssa_bits sc;
    sc.i = ((int32_t)kf + 127) << 23;
    r = r * sc.f;
    return t < -126.0f ? 0.0f : r;
}

/* g2(s) = g(s) log2(e): n sgn(x) log2(1 + b|x|) (ssa) or x log2(e) (softmax), x = scale * s */
static inline __attribute__((always_inline)) float ssa_g2(float v, float scale, int ssa, float b, float n) {
    float x = v * scale;
    if (!ssa) return x * SSA_LOG2E;
    float a = n * ssa_log2_ge1(1.0f + b * fabsf(x));
    return x < 0.0f ? -a : a;
}

/* the same with libm: used once per row for the online maximum */
static inline __attribute__((always_inline)) float ssa_g_exact(float v, float scale, int ssa, float b, float n) {
    float x = v * scale;
    if (!ssa) return x;
    float a = n * log1pf(b * fabsf(x));
    return x < 0.0f ? -a : a;
}

typedef struct {
    int64_t nh, rg, cols, G, gh, R;
    const uint8_t* mask; int64_t mb, mh, mg;
    int64_t causal, coff;
} ssa_tile;

/* position of a row in the tile: tile head i = bi * gh + hh, query position r, group head g.  Rows are walked
   in order with a cursor (no divisions per row). */
typedef struct { int64_t bi, hh, r, g; } ssa_cursor;

static void ssa_cursor_at(const ssa_tile* t, int64_t hr, ssa_cursor* c) {
    int64_t i = hr / t->rg, rr = hr % t->rg;
    c->bi = i / t->gh; c->hh = i % t->gh; c->r = rr / t->G; c->g = rr % t->G;
}

static inline __attribute__((always_inline)) void ssa_cursor_next(const ssa_tile* t, ssa_cursor* c) {
    if (++c->g < t->G) return;
    c->g = 0;
    if (++c->r < t->R) return;
    c->r = 0;
    if (++c->hh < t->gh) return;
    c->hh = 0;
    ++c->bi;
}

/* the visible column range [0, cend) of the cursor's row, its explicit mask row (or NULL), its parameter index */
static inline __attribute__((always_inline)) int64_t ssa_row(const ssa_tile* t, const ssa_cursor* c,
                                                             const uint8_t** mrow, int64_t* pidx) {
    *pidx = c->hh * t->G + c->g;
    *mrow = 0;
    if (t->mask) {
        int64_t bi = t->mb > 1 ? c->bi : 0, hi = t->mh > 1 ? c->hh : 0, gi = t->mg > 1 ? c->g : 0;
        *mrow = t->mask + (((bi * t->mh + hi) * t->R + c->r) * t->mg + gi) * t->cols;
    }
    int64_t cend = t->cols;
    if (t->causal) {
        int64_t last = c->r + t->coff;
        cend = last + 1 < cend ? last + 1 : cend;
        if (cend < 0) cend = 0;
    }
    return cend;
}

/* this thread's share [*start, *end) of the tile's rows */
static void ssa_share(int64_t rows, int64_t* start, int64_t* end) {
#ifdef _OPENMP
    int64_t nth = omp_get_num_threads(), tid = omp_get_thread_num();
#else
    int64_t nth = 1, tid = 0;
#endif
    *start = rows * tid / nth;
    *end = rows * (tid + 1) / nth;
}

/* for (each row hr of this thread's share of tile t, with cursor c) -- inside an omp parallel region */
#define SSA_FOR_EACH_ROW(t, hr, c)                                                     \
    int64_t hr##_start, hr##_end;                                                      \
    ssa_share((t)->nh * (t)->rg, &hr##_start, &hr##_end);                              \
    ssa_cursor c;                                                                      \
    ssa_cursor_at((t), hr##_start, &c);                                                \
    for (int64_t hr = hr##_start; hr < hr##_end; ++hr, ssa_cursor_next((t), &c))

/* smallest and largest visible raw score of a row (literal has_mask, as in ssa_fwd_row) */
static inline __attribute__((always_inline)) void ssa_row_range(const float* restrict row,
                                                                const uint8_t* restrict mrow, int has_mask,
                                                                int64_t cend, float* lo, float* hi) {
    float h = -INFINITY, l = INFINITY;
    #pragma omp simd reduction(max:h) reduction(min:l)
    for (int64_t c = 0; c < cend; ++c) {
        float v = row[c];
        float vh = v, vl = v;
        if (has_mask) { vh = mrow[c] != 0 ? v : -INFINITY; vl = mrow[c] != 0 ? v : INFINITY; }
        h = vh > h ? vh : h;
        l = vl < l ? vl : l;
    }
    *lo = l; *hi = h;
}

/* p = exp(g - off) over visible columns, 0 elsewhere, written over s; returns the row sum.  Called with literal
   has_mask and ssa flags, so that each inlined copy of the loop carries no test. */
static inline __attribute__((always_inline)) float ssa_fwd_row(float* restrict row, const uint8_t* restrict mrow, int has_mask, int64_t cend,
                                int64_t cols, float scale, int ssa, float b, float n, float off) {
    const float off2 = (float)((double)off * SSA_LOG2E_D), off2_lo = (float)((double)off * SSA_LOG2E_D - off2);
    float acc = 0.0f;
    #pragma omp simd reduction(+:acc)
    for (int64_t c = 0; c < cend; ++c) {
        float e = ssa_exp2_le0((ssa_g2(row[c], scale, ssa, b, n) - off2) - off2_lo);
        if (has_mask) e = mrow[c] != 0 ? e : 0.0f;
        row[c] = e;
        acc += e;
    }
    for (int64_t c = cend; c < cols; ++c) row[c] = 0.0f;
    return acc;
}

static inline __attribute__((always_inline)) float ssa_fwd_row_any(float* row, const uint8_t* mrow, int64_t cend, int64_t cols, float scale,
                                    int ssa, float b, float n, float off) {
    if (ssa) return mrow ? ssa_fwd_row(row, mrow, 1, cend, cols, scale, 1, b, n, off)
                         : ssa_fwd_row(row, mrow, 0, cend, cols, scale, 1, b, n, off);
    return mrow ? ssa_fwd_row(row, mrow, 1, cend, cols, scale, 0, b, n, off)
                : ssa_fwd_row(row, mrow, 0, cend, cols, scale, 0, b, n, off);
}

/* P, dS and sum(dg * g) of one row (see ssa_blockwise_bwd); literal has_mask as in ssa_fwd_row */
static inline __attribute__((always_inline)) float ssa_bwd_row(float* restrict row, float* restrict drow, const uint8_t* restrict mrow,
                                int has_mask, int64_t cend, float scale, int ssa, float b, float n, float L, float d) {
    const float L2 = (float)((double)L * SSA_LOG2E_D), L2_lo = (float)((double)L * SSA_LOG2E_D - L2);
    float acc = 0.0f;
    if (ssa) {
        const float k = n * b * scale;
        #pragma omp simd reduction(+:acc)
        for (int64_t c = 0; c < cend; ++c) {
            float x = row[c] * scale;
            float y = 1.0f + b * fabsf(x);
            float a = n * ssa_log2_ge1(y);
            float g2 = x < 0.0f ? -a : a;
            float p = ssa_exp2_le0((g2 - L2) - L2_lo);
            if (has_mask) p = mrow[c] != 0 ? p : 0.0f;
            float dg = p * (drow[c] - d);
            row[c] = p;
            drow[c] = dg * (k / y);
            acc += dg * g2;
        }
    } else {
        const float scale2 = scale * SSA_LOG2E;
        #pragma omp simd
        for (int64_t c = 0; c < cend; ++c) {
            float p = ssa_exp2_le0((row[c] * scale2 - L2) - L2_lo);
            if (has_mask) p = mrow[c] != 0 ? p : 0.0f;
            row[c] = p;
            drow[c] = p * (drow[c] - d) * scale;
        }
    }
    return acc * SSA_LN2;  /* sum(dg * g) */
}

/* Forward tile.  online = 0: m holds a fixed per-row offset (an upper bound of g), l += sum(P).
   online = 1: running maximum; m, l updated, alpha = exp(m_old - m_new) (rescale of the partial output). */
void ssa_blockwise_fwd(float* s, int64_t nh, int64_t rg, int64_t cols, int64_t G, int64_t gh,
                       const float* bvec, const float* nvec, float scale, int64_t causal, int64_t coff,
                       const uint8_t* mask, int64_t mb, int64_t mh, int64_t mg,
                       int64_t online, float* m, float* l, float* alpha, int64_t nthreads) {
    ssa_tile t = {nh, rg, cols, G, gh, rg / G, mask, mb, mh, mg, causal, coff};
    const int ssa = bvec != 0;
    #pragma omp parallel num_threads(nthreads)
    {
    SSA_FOR_EACH_ROW(&t, hr, cur) {
        const uint8_t* mrow;
        int64_t pidx;
        int64_t cend = ssa_row(&t, &cur, &mrow, &pidx);
        float* row = s + hr * cols;
        float b = ssa ? bvec[pidx] : 0.0f, n = ssa ? nvec[pidx] : 0.0f;
        if (!online) {
            l[hr] += ssa_fwd_row_any(row, mrow, cend, cols, scale, ssa, b, n, m[hr]);
            continue;
        }
        float hi, lo;
        if (mrow) ssa_row_range(row, mrow, 1, cend, &lo, &hi);
        else ssa_row_range(row, mrow, 0, cend, &lo, &hi);
        float m_prev = m[hr], m_new = m_prev;
        if (hi != -INFINITY) {
            /* g is monotone in s: its maximum is g at one of the extreme scores */
            float ghi = ssa_g_exact(hi, scale, ssa, b, n), glo = ssa_g_exact(lo, scale, ssa, b, n);
            float mt = ghi > glo ? ghi : glo;
            m_new = mt > m_prev ? mt : m_prev;
        }
        float m_safe = m_new == -INFINITY ? 0.0f : m_new;
        float a = expf(m_prev - m_safe);
        float sum = hi != -INFINITY ? ssa_fwd_row_any(row, mrow, cend, cols, scale, ssa, b, n, m_safe) : 0.0f;
        if (hi == -INFINITY)
            for (int64_t c = 0; c < cols; ++c) row[c] = 0.0f;
        m[hr] = m_new;
        l[hr] = l[hr] * a + sum;
        alpha[hr] = a;
    }
    }
}

/* Backward tile: P = exp(g - lse) written over s; dS = P (dP - delta) dg/ds written over dp;
   dn[row] += sum(P (dP - delta) g) when dn is given (ssa only). */
void ssa_blockwise_bwd(float* s, float* dp, int64_t nh, int64_t rg, int64_t cols, int64_t G, int64_t gh,
                       const float* bvec, const float* nvec, float scale, int64_t causal, int64_t coff,
                       const uint8_t* mask, int64_t mb, int64_t mh, int64_t mg,
                       const float* lse, const float* delta, float* dn, int64_t nthreads) {
    ssa_tile t = {nh, rg, cols, G, gh, rg / G, mask, mb, mh, mg, causal, coff};
    const int ssa = bvec != 0;
    #pragma omp parallel num_threads(nthreads)
    {
    SSA_FOR_EACH_ROW(&t, hr, cur) {
        const uint8_t* mrow;
        int64_t pidx;
        int64_t cend = ssa_row(&t, &cur, &mrow, &pidx);
        float* row = s + hr * cols;
        float* drow = dp + hr * cols;
        const float L = lse[hr], d = delta[hr];
        if (L == INFINITY) cend = 0;  /* a row without any visible key: no weight, no gradient */
        float b = ssa ? bvec[pidx] : 0.0f, n = ssa ? nvec[pidx] : 0.0f;
        float acc = mrow ? ssa_bwd_row(row, drow, mrow, 1, cend, scale, ssa, b, n, L, d)
                         : ssa_bwd_row(row, drow, mrow, 0, cend, scale, ssa, b, n, L, d);
        for (int64_t c = cend; c < cols; ++c) { row[c] = 0.0f; drow[c] = 0.0f; }
        if (dn) dn[hr] += acc;
    }
    }
}

/* Decoding step (one query position): for each of the nh (batch, key/value head) pairs, the G query heads of
   the group against the same Lk cached keys, everything in one pass over K and one over V:
   q [nh, G, D], k [nh, Lk, D], v [nh, Lk, Dv], out [nh, G, Dv], work [nh, G, Lk] (scores, then P), all float32
   contiguous; b, n [gh * G] or NULL (softmax); mask NULL or [mb, mh, 1, mg, Lk] as for the tiles.  Exact online
   maximum; a row without a visible key gives 0; a visible non-finite score makes its row NaN. */
void ssa_blockwise_decode(const float* q, const float* k, const float* v, float* out, float* work,
                          int64_t nh, int64_t G, int64_t gh, int64_t D, int64_t Dv, int64_t Lk,
                          const float* bvec, const float* nvec, float scale,
                          const uint8_t* mask, int64_t mb, int64_t mh, int64_t mg, int64_t nthreads) {
    const int ssa = bvec != 0;
    #pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t i = 0; i < nh; ++i) {
        const float* qi = q + i * G * D;
        const float* ki = k + i * Lk * D;
        const float* vi = v + i * Lk * Dv;
        float* wi = work + i * G * Lk;
        float* oi = out + i * G * Dv;
        int64_t bi = i / gh, hh = i % gh;
        for (int64_t j = 0; j < Lk; ++j) {
            const float* kj = ki + j * D;
            for (int64_t g = 0; g < G; ++g) {
                const float* qg = qi + g * D;
                float dot = 0.0f;
                #pragma omp simd reduction(+:dot)
                for (int64_t d = 0; d < D; ++d) dot += qg[d] * kj[d];
                wi[g * Lk + j] = dot;
            }
        }
        for (int64_t g = 0; g < G; ++g) {
            float* row = wi + g * Lk;
            const uint8_t* mrow = 0;
            if (mask) {
                int64_t mbi = mb > 1 ? bi : 0, mhi = mh > 1 ? hh : 0, mgi = mg > 1 ? g : 0;
                mrow = mask + ((mbi * mh + mhi) * mg + mgi) * Lk;
            }
            int64_t pidx = hh * G + g;
            float b = ssa ? bvec[pidx] : 0.0f, n = ssa ? nvec[pidx] : 0.0f;
            float lo, hi, nonfinite = 0.0f;  /* NaN iff a visible score is inf or NaN */
            if (mrow) {
                ssa_row_range(row, mrow, 1, Lk, &lo, &hi);
                #pragma omp simd reduction(+:nonfinite)
                for (int64_t c = 0; c < Lk; ++c) nonfinite += mrow[c] != 0 ? row[c] * 0.0f : 0.0f;
            } else {
                ssa_row_range(row, mrow, 0, Lk, &lo, &hi);
                #pragma omp simd reduction(+:nonfinite)
                for (int64_t c = 0; c < Lk; ++c) nonfinite += row[c] * 0.0f;
            }
            float l = 0.0f;
            if (nonfinite != 0.0f) {
                l = NAN;
            } else if (hi != -INFINITY) {
                float ghi = ssa_g_exact(hi, scale, ssa, b, n), glo = ssa_g_exact(lo, scale, ssa, b, n);
                float m = ghi > glo ? ghi : glo;
                l = ssa_fwd_row_any(row, mrow, Lk, Lk, scale, ssa, b, n, m);
            } else {
                for (int64_t c = 0; c < Lk; ++c) row[c] = 0.0f;
            }
            /* P is normalised here, so that the value pass below is a plain weighted sum */
            float inv = l > 0.0f ? 1.0f / l : (l == l ? 0.0f : NAN);
            #pragma omp simd
            for (int64_t c = 0; c < Lk; ++c) row[c] *= inv;
        }
        for (int64_t g = 0; g < G * Dv; ++g) oi[g] = 0.0f;
        for (int64_t j = 0; j < Lk; ++j) {
            const float* vj = vi + j * Dv;
            for (int64_t g = 0; g < G; ++g) {
                float p = wi[g * Lk + j];
                float* og = oi + g * Dv;
                #pragma omp simd
                for (int64_t d = 0; d < Dv; ++d) og[d] += p * vj[d];
            }
        }
    }
}
"""

_BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=fast"]
# tried in order: vectorised for this CPU with OpenMP, then without the CPU-specific flags, then serial
_FLAG_SETS = (
    ["-march=native", "-mprefer-vector-width=512", "-fopenmp"],
    ["-march=native", "-fopenmp"],
    ["-fopenmp"],
    [],
)

_LOCK = threading.Lock()
_STATE = {"tiles": None, "tried": False}
# None: follow SSA_HF_BLOCKWISE_NATIVE (default on); True/False: forced
_OVERRIDE = [None]


def set_native_enabled(enabled):
    """Force the native tile kernels on (True) or off (False); None follows ``SSA_HF_BLOCKWISE_NATIVE``."""
    _OVERRIDE[0] = None if enabled is None else bool(enabled)


def native_enabled():
    if _OVERRIDE[0] is not None:
        return _OVERRIDE[0]
    return os.environ.get("SSA_HF_BLOCKWISE_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off", "")


def _cache_dir():
    root = os.environ.get("SSA_HF_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "ssa_hf")
    return os.path.join(root, "native")


def _compilers():
    names = [os.environ["CC"]] if os.environ.get("CC") else []
    names += ["cc", "gcc", "clang"]
    seen = []
    for name in names:
        path = shutil.which(name)
        if path and path not in seen:
            seen.append(path)
    return seen


def _cpu_signature():
    """What -march=native depends on: the CPU's model and feature flags (a cache folder on a shared file system
    must not hand one machine's build to a CPU without its instructions)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith(("model name", "flags", "Features", "CPU part"))]
        return "".join(sorted(set(lines)))
    except OSError:
        return platform.processor()


def _build(directory):
    """Compile NATIVE_SOURCE; returns the path of the shared library (cached) or raises RuntimeError."""
    errors = []
    os.makedirs(directory, exist_ok=True)
    cpu = _cpu_signature()
    for cc in _compilers():
        for extra in _FLAG_SETS:
            flags = _BASE_FLAGS + extra
            key = hashlib.sha256("\n".join([NATIVE_SOURCE, cc, " ".join(flags), platform.machine(), sys.platform,
                                            cpu, torch.__version__]).encode()).hexdigest()[:20]
            target = os.path.join(directory, f"ssa_blockwise_{key}.so")
            if os.path.exists(target):
                return target
            with tempfile.TemporaryDirectory(dir=directory) as tmp:
                src = os.path.join(tmp, "ssa_blockwise.c")
                with open(src, "w") as f:
                    f.write(NATIVE_SOURCE)
                out = os.path.join(tmp, "ssa_blockwise.so")
                cmd = [cc, *flags, src, "-o", out, "-lm"]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0 or not os.path.exists(out):
                    errors.append(f"{' '.join(cmd[:1] + flags)}: {proc.stderr.strip()[:400]}")
                    continue
                os.replace(out, target)  # atomic: concurrent builders write the same file
                return target
    if not errors:
        raise RuntimeError("no C compiler found on PATH (cc, gcc, clang; or set CC)")
    raise RuntimeError(f"no C compiler could build the native tile kernels ({len(errors)} attempts; the first: "
                       f"{errors[0]})")


class NativeTiles:
    """ctypes bindings of the two tile kernels (see NATIVE_SOURCE for the layout)."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        p, i64, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
        self._fwd = lib.ssa_blockwise_fwd
        self._fwd.argtypes = [p, i64, i64, i64, i64, i64, p, p, f32, i64, i64, p, i64, i64, i64, i64, p, p, p, i64]
        self._fwd.restype = None
        self._bwd = lib.ssa_blockwise_bwd
        self._bwd.argtypes = [p, p, i64, i64, i64, i64, i64, p, p, f32, i64, i64, p, i64, i64, i64, p, p, p, i64]
        self._bwd.restype = None
        self._decode = lib.ssa_blockwise_decode
        self._decode.argtypes = [p, p, p, p, p, i64, i64, i64, i64, i64, i64, p, p, f32, p, i64, i64, i64, i64]
        self._decode.restype = None
        self.path = path

    @staticmethod
    def _mask_args(mask):
        """(pointer, mb, mh, mg) of a contiguous bool tile [mb, mh, R, mg, C], or zeros."""
        if mask is None:
            return None, 0, 0, 0
        return mask.data_ptr(), mask.shape[0], mask.shape[1], mask.shape[3]

    def fwd(self, s, gh, G, b, n, scale, causal_offset, mask, online, m, l, alpha):
        """s: [nh, R*G, C] float32 contiguous (overwritten with P); b, n: [gh*G] or None (softmax);
        causal_offset: None or int; mask: None or contiguous bool [mb, mh, R, mg, C]; m, l, alpha: [nh*R*G]."""
        nh, rg, cols = s.shape
        mp, mb, mh, mg = self._mask_args(mask)
        self._fwd(s.data_ptr(), nh, rg, cols, G, gh, None if b is None else b.data_ptr(),
                  None if n is None else n.data_ptr(), scale, causal_offset is not None,
                  0 if causal_offset is None else causal_offset, mp, mb, mh, mg, int(online), m.data_ptr(),
                  l.data_ptr(), None if alpha is None else alpha.data_ptr(), torch.get_num_threads())

    def decode(self, q, k, v, out, work, gh, b, n, scale, mask):
        """q [nh, G, D], k [nh, Lk, D], v [nh, Lk, Dv], out [nh, G, Dv], work [nh, G, Lk]: float32 contiguous;
        b, n: [gh*G] or None; mask: None or contiguous bool [mb, mh, 1, mg, Lk]."""
        nh, G, D = q.shape
        Lk, Dv = k.shape[1], v.shape[2]
        mp, mb, mh, mg = self._mask_args(mask)
        self._decode(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), work.data_ptr(), nh, G, gh, D, Dv, Lk,
                     None if b is None else b.data_ptr(), None if n is None else n.data_ptr(), scale, mp, mb, mh, mg,
                     torch.get_num_threads())

    def bwd(self, s, dp, gh, G, b, n, scale, causal_offset, mask, lse, delta, dn):
        """s, dp: [nh, R*G, C] float32 contiguous (overwritten with P and dS); lse, delta, dn: [nh*R*G]."""
        nh, rg, cols = s.shape
        mp, mb, mh, mg = self._mask_args(mask)
        self._bwd(s.data_ptr(), dp.data_ptr(), nh, rg, cols, G, gh, None if b is None else b.data_ptr(),
                  None if n is None else n.data_ptr(), scale, causal_offset is not None,
                  0 if causal_offset is None else causal_offset, mp, mb, mh, mg, lse.data_ptr(), delta.data_ptr(),
                  None if dn is None else dn.data_ptr(), torch.get_num_threads())


def load_native_tiles():
    """The compiled kernels, or None (disabled, or no working C compiler: then one warning says why)."""
    if not native_enabled():
        return None
    if _STATE["tried"]:
        return _STATE["tiles"]
    with _LOCK:
        if not _STATE["tried"]:
            try:
                try:
                    path = _build(_cache_dir())
                except PermissionError:  # a read-only home or cache folder: build in the temporary folder
                    user = getattr(os, "getuid", lambda: "user")()
                    path = _build(os.path.join(tempfile.gettempdir(), f"ssa_hf-{user}", "native"))
                _STATE["tiles"] = NativeTiles(path)
            except (RuntimeError, OSError) as exc:
                warnings.warn(f"ssa-hf blockwise attention: the native tile kernels are unavailable ({exc}); running "
                              "the same math with torch ops (slower). Install a C compiler (gcc or clang) or set CC.")
            _STATE["tried"] = True
    return _STATE["tiles"]
