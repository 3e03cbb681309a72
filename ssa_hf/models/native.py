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
- builds are serialised by a file lock: concurrent first uses in several processes make one build;
- the key of a build hashes the source, compiler flags, torch and Python versions and the CPU's model and
  features (the build uses -march=native).
``SSA_HF_BLOCKWISE_NATIVE=0`` (or ``set_native_enabled(False)``) turns the native kernel off: the torch path
runs, with one warning saying so.  The build needs a C++ compiler (``$CXX`` or c++) and ninja (a dependency).

Part of the remote-code unit: imports only torch, the standard library and filelock (a transformers dependency).
"""

import hashlib
import os
import platform
import shutil
import stat
import sys
import threading
import warnings

import torch

__all__ = ["load_kernels", "native_enabled", "set_native_enabled", "cache_root", "load_library", "NATIVE_SOURCE"]

NATIVE_SOURCE = r"""
// SSA / softmax attention for CPU: one parallel region per call (torch's intra-op pool), tile products
// through the CPU BLAS (MKL's sgemm_ as linked into torch), scoring, masking and online normalisation fused
// in between.  float32 only; see blockwise.py for the layouts and the torch oracle.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

// MKL (torch's BLAS on x86) runs nested teams inside a parallel region unless told otherwise (torch turns its
// dynamic adjustment off): each worker asks for a sequential sgemm.  Weak, so that builds without MKL load too.
extern "C" int mkl_set_num_threads_local_(const int*) __attribute__((weak));
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr double kLog2eD = 1.4426950408889634;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Row-major C[m x n] = alpha op(A)[m x k] op(B)[k x n] + beta C, through the column-major BLAS
// (C^T = op(B)^T op(A)^T).  A is [m x k] (ta false) or [k x m] (ta true) with row stride lda; B likewise.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const char fa = tb ? 'T' : 'N', fb = ta ? 'T' : 'N';
  const int M = (int)n, N = (int)m, K = (int)k, LA = (int)ldb, LB = (int)lda, LC = (int)ldc;
  sgemm_(&fa, &fb, &M, &N, &K, &alpha, B, &LA, A, &LB, &beta, C, &LC);
}

union Bits { float f; int32_t i; };

// log2(y) for finite y >= 1: exponent/mantissa split, ln(m) = x - x^2/2 + x^3 P(x) (max error 7e-8)
inline __attribute__((always_inline)) float log2_ge1(float y) {
  Bits u, mm;
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
  return (x - 0.5f * z + z * x * p) * kLog2e + (float)e;
}

// 2^t for finite t <= ~0 (relative error 5e-9); exactly 0 below -126
inline __attribute__((always_inline)) float exp2_le0(float t) {
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
  Bits sc;
  sc.i = ((int32_t)kf + 127) << 23;
  r = r * sc.f;
  return t < -126.0f ? 0.0f : r;
}

// g(s) log2(e) of a raw score: n sgn(x) log2(1 + b|x|) (ssa) or x log2(e) (softmax), x = scale * s
template <bool SSA>
inline __attribute__((always_inline)) float g2(float v, float scale, float b, float n) {
  float x = v * scale;
  if constexpr (!SSA) return x * kLog2e;
  float a = n * log2_ge1(1.0f + b * std::fabs(x));
  return x < 0.0f ? -a : a;
}

// g(s) with libm, once per row (online maximum)
inline float g_exact(float v, float scale, bool ssa, float b, float n) {
  float x = v * scale;
  if (!ssa) return x;
  float a = n * std::log1p(b * std::fabs(x));
  return x < 0.0f ? -a : a;
}

// a mask row: nullptr = every key in [0, cend) visible; else one byte per key
struct Row {
  int64_t cend;
  const uint8_t* mask;
};

struct Problem {
  const float *q, *k, *v;      // [B, H, Lq, D], [B, Hkv, Lk, D], [B, Hkv, Lk, Dv]
  int64_t B, H, Hkv, G, Lq, Lk, D, Dv;
  const float *b, *n;          // [H] (ssa) or nullptr (softmax)
  float scale;
  bool causal;                 // top-left: query i sees keys j <= i
  const uint8_t* mask;         // bool, indexable as [B, H, Lq, Lk] with the strides below (0 = broadcast)
  int64_t msb, msh, msi, msj;
  int64_t bq, bk;              // query positions per work item, keys per tile
  float fixed_max;             // largest row bound for which the forward uses it as a fixed row offset

  // visible keys of query position i in the key tile [j0, j0 + C) of (batch bi, head h)
  inline Row row(int64_t bi, int64_t h, int64_t i, int64_t j0, int64_t C) const {
    Row r{C, nullptr};
    if (causal) r.cend = std::max<int64_t>(0, std::min<int64_t>(C, i - j0 + 1));
    if (mask) {
      const uint8_t* base = mask + bi * msb + h * msh + i * msi;
      if (msj == 0) {
        if (!base[0]) r.cend = 0;
      } else {
        r.mask = base + j0;
      }
    }
    return r;
  }
};

// P = 2^(g2 - off2) over visible keys (0 elsewhere) written over the row; returns the row sum.  The offset in
// base 2 is a float pair (hi + lo): its rounding would otherwise scale a whole row of P by up to
// 1 + 1e-7 |offset|, which the backward's dn sums amplify.
template <bool SSA, bool MASK>
inline float fwd_row(float* __restrict row, const uint8_t* __restrict mrow, int64_t cend, int64_t cols,
                     float scale, float b, float n, float off) {
  const float o2 = (float)((double)off * kLog2eD), o2lo = (float)((double)off * kLog2eD - o2);
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t c = 0; c < cend; ++c) {
    float e = exp2_le0((g2<SSA>(row[c], scale, b, n) - o2) - o2lo);
    if constexpr (MASK) e = mrow[c] != 0 ? e : 0.0f;
    row[c] = e;
    acc += e;
  }
  for (int64_t c = cend; c < cols; ++c) row[c] = 0.0f;
  return acc;
}

inline float fwd_row_any(float* row, const Row& r, int64_t cols, float scale, bool ssa, float b, float n,
                         float off) {
  if (ssa) return r.mask ? fwd_row<true, true>(row, r.mask, r.cend, cols, scale, b, n, off)
                         : fwd_row<true, false>(row, r.mask, r.cend, cols, scale, b, n, off);
  return r.mask ? fwd_row<false, true>(row, r.mask, r.cend, cols, scale, b, n, off)
                : fwd_row<false, false>(row, r.mask, r.cend, cols, scale, b, n, off);
}

// smallest and largest visible raw score of a row
// (also: false when a visible score is inf or NaN)
template <bool MASK>
inline bool row_range(const float* __restrict row, const uint8_t* __restrict mrow, int64_t cend, float* lo,
                      float* hi) {
  float h = -kInf, l = kInf, check = 0.0f;  // check: 0 * score, NaN iff a visible score is not finite
#pragma omp simd reduction(max : h) reduction(min : l) reduction(+ : check)
  for (int64_t c = 0; c < cend; ++c) {
    float v = row[c];
    float vh = v, vl = v, z = v * 0.0f;
    if constexpr (MASK) {
      vh = mrow[c] != 0 ? v : -kInf;
      vl = mrow[c] != 0 ? v : kInf;
      z = mrow[c] != 0 ? z : 0.0f;
    }
    h = vh > h ? vh : h;
    l = vl < l ? vl : l;
    check += z;
  }
  *lo = l;
  *hi = h;
  return check == 0.0f;
}

// P, dS (over dp) and sum(dg * g) of one backward row
template <bool SSA, bool MASK>
inline float bwd_row(float* __restrict row, float* __restrict drow, const uint8_t* __restrict mrow, int64_t cend,
                     float scale, float b, float n, float L, float d) {
  const float L2 = (float)((double)L * kLog2eD), L2lo = (float)((double)L * kLog2eD - L2);
  float acc = 0.0f;
  if constexpr (SSA) {
    const float kk = n * b * scale;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < cend; ++c) {
      float x = row[c] * scale;
      float y = 1.0f + b * std::fabs(x);
      float a = n * log2_ge1(y);
      float gg = x < 0.0f ? -a : a;
      float p = exp2_le0((gg - L2) - L2lo);
      if constexpr (MASK) p = mrow[c] != 0 ? p : 0.0f;
      float dg = p * (drow[c] - d);
      row[c] = p;
      drow[c] = dg * (kk / y);
      acc += dg * gg;
    }
  } else {
    const float s2 = scale * kLog2e;
#pragma omp simd
    for (int64_t c = 0; c < cend; ++c) {
      float p = exp2_le0((row[c] * s2 - L2) - L2lo);
      if constexpr (MASK) p = mrow[c] != 0 ? p : 0.0f;
      row[c] = p;
      drow[c] = p * (drow[c] - d) * scale;
    }
  }
  return acc * kLn2;
}

// Run fn(item) for item in [0, items) on torch's intra-op pool, one parallel region, items handed out
// dynamically (a thread that the scheduler delays takes fewer items instead of holding up the others).
template <typename F>
void run_items(int64_t items, const F& fn) {
  if (items <= 0) return;
  const int64_t nt = std::min<int64_t>(at::get_num_threads(), items);
  std::atomic<int64_t> next{0};
  at::parallel_for(0, nt, 1, [&](int64_t, int64_t) {
    typename F::Scratch scratch(fn);
    const int one = 1;
    const int prev = mkl_set_num_threads_local_ ? mkl_set_num_threads_local_(&one) : 0;
    for (int64_t it = next.fetch_add(1); it < items; it = next.fetch_add(1)) fn(it, scratch);
    if (mkl_set_num_threads_local_) mkl_set_num_threads_local_(&prev);
  });
}

// |g| bound per query row (Cauchy-Schwarz): |g| <= |n| log(1 + b scale |q| max|k|); false if any q or k
// element is not finite (the caller then runs the torch path, which propagates inf/NaN as eager does)
bool row_bounds(const Problem& P, float* bound) {
  std::vector<float> kmax(P.B * P.Hkv);
  std::atomic<bool> finite{true};
  at::parallel_for(0, P.B * P.Hkv, 1, [&](int64_t s, int64_t e) {
    for (int64_t bh = s; bh < e; ++bh) {
      const float* kk = P.k + bh * P.Lk * P.D;
      float mx = 0.0f;
      for (int64_t j = 0; j < P.Lk; ++j) {
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < P.D; ++d) acc += kk[j * P.D + d] * kk[j * P.D + d];
        if (!std::isfinite(acc)) finite = false;
        mx = std::max(mx, acc);
      }
      kmax[bh] = std::sqrt(mx);
    }
  });
  at::parallel_for(0, P.B * P.H, 1, [&](int64_t s, int64_t e) {
    for (int64_t bh = s; bh < e; ++bh) {
      const int64_t h = bh % P.H, bi = bh / P.H;
      const float km = kmax[bi * P.Hkv + h / P.G] * std::fabs(P.scale);
      for (int64_t i = 0; i < P.Lq; ++i) {
        const float* qq = P.q + (bh * P.Lq + i) * P.D;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < P.D; ++d) acc += qq[d] * qq[d];
        float x = std::sqrt(acc) * km;
        if (!std::isfinite(x)) finite = false;
        bound[bh * P.Lq + i] = P.b ? std::fabs(P.n[h]) * std::log1p(P.b[h] * x) : x;
      }
    }
  });
  return finite.load();
}

// Decoding steps have one query row per head (G per work item): plain vectorised dot products and axpys beat a
// BLAS call on a 1-row matrix.
constexpr int64_t kFewRows = 4;

inline void few_rows_scores(const float* q, const float* k, int64_t rows, int64_t C, int64_t D, float* S,
                            int64_t lds) {
  for (int64_t c = 0; c < C; ++c) {
    const float* kc = k + c * D;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * D;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t d = 0; d < D; ++d) acc += qr[d] * kc[d];
      S[r * lds + c] = acc;
    }
  }
}

inline void few_rows_values(const float* S, int64_t lds, const float* v, int64_t rows, int64_t C, int64_t Dv,
                            bool first, float* acc) {
  if (first) std::fill(acc, acc + rows * Dv, 0.0f);
  for (int64_t c = 0; c < C; ++c) {
    const float* vc = v + c * Dv;
    for (int64_t r = 0; r < rows; ++r) {
      const float p = S[r * lds + c];
      float* ar = acc + r * Dv;
#pragma omp simd
      for (int64_t d = 0; d < Dv; ++d) ar[d] += p * vc[d];
    }
  }
}

struct Forward {
  const Problem& P;
  const float* bound;
  float* out;   // [B, H, Lq, Dv]
  float* lse;   // [B, H, Lq] or nullptr
  int64_t nqb;
  std::atomic<bool>* nonfinite;  // set when a visible score is not finite (online rows check their scores)

  struct Scratch {
    std::vector<float> q, s, acc, m, l, alpha;
    explicit Scratch(const Forward& f) {
      const int64_t rows = f.P.G * f.P.bq;
      q.resize(rows * f.P.D); s.resize(rows * f.P.bk); acc.resize(rows * f.P.Dv);
      m.resize(rows); l.resize(rows); alpha.resize(rows);
    }
  };

  void operator()(int64_t item, Scratch& w) const {
    // heavy items first: the last query blocks see the most keys under a causal mask
    const int64_t qb = nqb - 1 - item / (P.B * P.Hkv), bhk = item % (P.B * P.Hkv);
    const int64_t bi = bhk / P.Hkv, hk = bhk % P.Hkv;
    const int64_t i0 = qb * P.bq, R = std::min(P.bq, P.Lq - i0), rows = P.G * R;
    const float* kb = P.k + bhk * P.Lk * P.D;
    const float* vb = P.v + bhk * P.Lk * P.Dv;
    // rows ordered (group head g, position r): the G query heads that share this key/value head go through
    // each key tile together
    bool fixed = true;
    for (int64_t g = 0; g < P.G; ++g) {
      const int64_t h = hk * P.G + g;
      std::memcpy(w.q.data() + g * R * P.D, P.q + ((bi * P.H + h) * P.Lq + i0) * P.D, sizeof(float) * R * P.D);
      for (int64_t r = 0; r < R; ++r) {
        float bnd = bound[(bi * P.H + h) * P.Lq + i0 + r];
        w.m[g * R + r] = bnd;
        fixed = fixed && bnd <= P.fixed_max;
      }
    }
    if (!fixed) std::fill(w.m.begin(), w.m.begin() + rows, -kInf);
    std::fill(w.l.begin(), w.l.begin() + rows, 0.0f);
    const int64_t kend = P.causal ? std::min(P.Lk, i0 + R) : P.Lk;
    bool first = true;
    for (int64_t j0 = 0; j0 < kend; j0 += P.bk) {
      const int64_t C = std::min(P.bk, kend - j0);
      float* S = w.s.data();
      if (rows <= kFewRows) few_rows_scores(w.q.data(), kb + j0 * P.D, rows, C, P.D, S, P.bk);
      else gemm(false, true, rows, C, P.D, 1.0f, w.q.data(), P.D, kb + j0 * P.D, P.D, 0.0f, S, P.bk);
      bool rescale = false;
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t g = rr / R, r = rr % R, h = hk * P.G + g;
        const Row rw = P.row(bi, h, i0 + r, j0, C);
        float* srow = S + rr * P.bk;
        const float b = P.b ? P.b[h] : 0.0f, n = P.b ? P.n[h] : 0.0f;
        if (fixed) {
          w.l[rr] += fwd_row_any(srow, rw, C, P.scale, P.b != nullptr, b, n, w.m[rr]);
          continue;
        }
        float lo, hi;
        const bool finite = rw.mask ? row_range<true>(srow, rw.mask, rw.cend, &lo, &hi)
                                    : row_range<false>(srow, nullptr, rw.cend, &lo, &hi);
        if (!finite) {  // the torch path redoes the call (NaN/inf propagate there as in eager attention)
          *nonfinite = true;
          return;
        }
        const float m_prev = w.m[rr];
        float m_new = m_prev;
        if (hi != -kInf) {  // g is monotone in s: its maximum is g at one of the extreme scores
          float ghi = g_exact(hi, P.scale, P.b != nullptr, b, n), glo = g_exact(lo, P.scale, P.b != nullptr, b, n);
          m_new = std::max(m_prev, std::max(ghi, glo));
        }
        const float m_safe = m_new == -kInf ? 0.0f : m_new;
        const float a = std::exp(m_prev - m_safe);
        float sum = 0.0f;
        if (hi != -kInf) sum = fwd_row_any(srow, rw, C, P.scale, P.b != nullptr, b, n, m_safe);
        else std::fill(srow, srow + C, 0.0f);
        w.m[rr] = m_new;
        w.l[rr] = w.l[rr] * a + sum;
        w.alpha[rr] = a;
        rescale = rescale || a != 1.0f;
      }
      if (!first && rescale)
        for (int64_t rr = 0; rr < rows; ++rr) {
          float* arow = w.acc.data() + rr * P.Dv;
          const float a = w.alpha[rr];
          for (int64_t d = 0; d < P.Dv; ++d) arow[d] *= a;
        }
      if (rows <= kFewRows) few_rows_values(S, P.bk, vb + j0 * P.Dv, rows, C, P.Dv, first, w.acc.data());
      else gemm(false, false, rows, P.Dv, C, 1.0f, S, P.bk, vb + j0 * P.Dv, P.Dv, first ? 0.0f : 1.0f, w.acc.data(),
                P.Dv);
      first = false;
    }
    for (int64_t rr = 0; rr < rows; ++rr) {
      const int64_t g = rr / R, r = rr % R, h = hk * P.G + g;
      const int64_t orow = (bi * P.H + h) * P.Lq + i0 + r;
      float* o = out + orow * P.Dv;
      const float l = w.l[rr];
      if (first || l == 0.0f) {  // no visible key: output 0, lse +inf (no weight, no gradient)
        std::fill(o, o + P.Dv, 0.0f);
        if (lse) lse[orow] = kInf;
        continue;
      }
      const float inv = 1.0f / l;
      const float* arow = w.acc.data() + rr * P.Dv;
      for (int64_t d = 0; d < P.Dv; ++d) o[d] = arow[d] * inv;
      if (lse) lse[orow] = (w.m[rr] == -kInf ? 0.0f : w.m[rr]) + std::log(l);
    }
  }
};

struct Backward {
  const Problem& P;
  const float *dout, *lse, *delta;  // [B, H, Lq, Dv], [B, H, Lq], [B, H, Lq]
  float* dq;                        // [chunks, B, H, Lq, D] (partial sums when chunks > 1)
  float *dk, *dv;                   // [B, Hkv, Lk, D], [B, Hkv, Lk, Dv], zero on entry
  double* dn;                       // [chunks, B, H] sum(dg * g) or nullptr
  int64_t nkb, chunks;

  struct Scratch {
    std::vector<float> s, dp;
    explicit Scratch(const Backward& f) { s.resize(f.P.bq * f.P.bk); dp.resize(f.P.bq * f.P.bk); }
  };

  void operator()(int64_t item, Scratch& w) const {
    const int64_t c = item % chunks, bhk = item / chunks;
    const int64_t bi = bhk / P.Hkv, hk = bhk % P.Hkv;
    const int64_t per = (nkb + chunks - 1) / chunks;
    const float* kb = P.k + bhk * P.Lk * P.D;
    const float* vb = P.v + bhk * P.Lk * P.Dv;
    float* dkb = dk + bhk * P.Lk * P.D;
    float* dvb = dv + bhk * P.Lk * P.Dv;
    float* S = w.s.data();
    float* dP = w.dp.data();
    for (int64_t jb = c * per; jb < std::min(nkb, (c + 1) * per); ++jb) {
      const int64_t j0 = jb * P.bk, C = std::min(P.bk, P.Lk - j0);
      for (int64_t g = 0; g < P.G; ++g) {
        const int64_t h = hk * P.G + g, bh = bi * P.H + h;
        const float b = P.b ? P.b[h] : 0.0f, n = P.b ? P.n[h] : 0.0f;
        const float* qh = P.q + bh * P.Lq * P.D;
        const float* doh = dout + bh * P.Lq * P.Dv;
        float* dqh = dq + (c * P.B * P.H + bh) * P.Lq * P.D;
        double dn_acc = 0.0;
        const int64_t istart = P.causal ? (j0 / P.bq) * P.bq : 0;
        for (int64_t i0 = istart; i0 < P.Lq; i0 += P.bq) {
          const int64_t R = std::min(P.bq, P.Lq - i0);
          gemm(false, true, R, C, P.D, 1.0f, qh + i0 * P.D, P.D, kb + j0 * P.D, P.D, 0.0f, S, P.bk);
          gemm(false, true, R, C, P.Dv, 1.0f, doh + i0 * P.Dv, P.Dv, vb + j0 * P.Dv, P.Dv, 0.0f, dP, P.bk);
          bool any = false;
          for (int64_t r = 0; r < R; ++r) {
            const int64_t i = i0 + r;
            Row rw = P.row(bi, h, i, j0, C);
            const float L = lse[bh * P.Lq + i], d = delta[bh * P.Lq + i];
            if (L == kInf) rw.cend = 0;
            float* srow = S + r * P.bk;
            float* drow = dP + r * P.bk;
            float acc;
            if (P.b) acc = rw.mask ? bwd_row<true, true>(srow, drow, rw.mask, rw.cend, P.scale, b, n, L, d)
                                   : bwd_row<true, false>(srow, drow, nullptr, rw.cend, P.scale, b, n, L, d);
            else acc = rw.mask ? bwd_row<false, true>(srow, drow, rw.mask, rw.cend, P.scale, b, n, L, d)
                               : bwd_row<false, false>(srow, drow, nullptr, rw.cend, P.scale, b, n, L, d);
            for (int64_t cc = rw.cend; cc < C; ++cc) { srow[cc] = 0.0f; drow[cc] = 0.0f; }
            dn_acc += acc;
            any = any || rw.cend > 0;
          }
          if (!any) continue;
          gemm(true, false, C, P.Dv, R, 1.0f, S, P.bk, doh + i0 * P.Dv, P.Dv, 1.0f, dvb + j0 * P.Dv, P.Dv);
          gemm(true, false, C, P.D, R, 1.0f, dP, P.bk, qh + i0 * P.D, P.D, 1.0f, dkb + j0 * P.D, P.D);
          gemm(false, false, R, P.D, C, 1.0f, dP, P.bk, kb + j0 * P.D, P.D, 1.0f, dqh + i0 * P.D, P.D);
        }
        if (dn) dn[c * P.B * P.H + bh] += dn_acc;
      }
    }
  }
};

Problem make_problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& b,
                     const at::Tensor& n, const c10::optional<at::Tensor>& mask, bool causal, double scale,
                     int64_t bq, int64_t bk) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "ssa_hf fused kernel: float32 inputs expected");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "ssa_hf fused kernel: contiguous inputs expected");
  Problem P{};
  P.q = q.data_ptr<float>(); P.k = k.data_ptr<float>(); P.v = v.data_ptr<float>();
  P.B = q.size(0); P.H = q.size(1); P.Lq = q.size(2); P.D = q.size(3);
  P.Hkv = k.size(1); P.Lk = k.size(2); P.Dv = v.size(3); P.G = P.H / P.Hkv;
  const bool ssa = b.numel() > 0;
  P.b = ssa ? b.data_ptr<float>() : nullptr;
  P.n = ssa ? n.data_ptr<float>() : nullptr;
  P.scale = (float)scale;
  P.causal = causal;
  if (mask.has_value()) {
    const at::Tensor& m = *mask;
    TORCH_CHECK(m.scalar_type() == at::kBool && m.dim() == 4, "ssa_hf fused kernel: 4-D bool mask expected");
    TORCH_CHECK(m.stride(3) == 0 || m.stride(3) == 1, "ssa_hf fused kernel: mask rows must be contiguous");
    P.mask = reinterpret_cast<const uint8_t*>(m.data_ptr<bool>());
    P.msb = m.size(0) == 1 ? 0 : m.stride(0);
    P.msh = m.size(1) == 1 ? 0 : m.stride(1);
    P.msi = m.size(2) == 1 ? 0 : m.stride(2);
    P.msj = m.size(3) == 1 ? 0 : m.stride(3);
  }
  P.bq = std::max<int64_t>(1, std::min(bq, P.Lq));
  P.bk = std::max<int64_t>(1, std::min(bk, P.Lk));
  return P;
}

}  // namespace

// Forward: returns {out [B, H, Lq, Dv], lse [B, H, Lq]}, or {} when a query or key element is not finite.
// Rows whose |g| bound (Cauchy-Schwarz) is at most fixed_max use it as a fixed offset: one pass per tile, no
// running maximum, no rescaling of the partial output (40 keeps exp(g - bound) >= exp(-80), a normal float32).
std::vector<at::Tensor> ssa_fused_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const at::Tensor& b, const at::Tensor& n,
                                          const c10::optional<at::Tensor>& mask, bool causal, double scale,
                                          int64_t bq, int64_t bk, bool need_lse, double fixed_max) {
  Problem P = make_problem(q, k, v, b, n, mask, causal, scale, bq, bk);
  P.fixed_max = (float)fixed_max;
  at::Tensor bound = at::empty({P.B, P.H, P.Lq}, q.options());
  at::Tensor out = at::empty({P.B, P.H, P.Lq, P.Dv}, q.options());
  at::Tensor lse = at::empty({need_lse ? P.B : 0, P.H, P.Lq}, q.options());
  if (P.Lq == 0) return {out, lse};
  if (P.Lk == 0) {
    out.zero_();
    if (need_lse) lse.fill_(kInf);
    return {out, lse};
  }
  // Short query blocks (decoding steps): the bound would read all of K once more for a handful of rows; run the
  // online maximum, which checks the scores it sees for inf/NaN instead.
  if (P.Lq * P.G < 16) bound.fill_(kInf);
  else if (!row_bounds(P, bound.data_ptr<float>())) return {};
  P.bq = std::max<int64_t>(1, P.bq / P.G);  // block_q counts the rows of a work item, over its G query heads
  // enough work items for every thread (short sequences, many cores): smaller query blocks
  const int64_t want = 4 * (int64_t)at::get_num_threads();
  while (P.bq > 16 && P.B * P.Hkv * ((P.Lq + P.bq - 1) / P.bq) < want) P.bq /= 2;
  const int64_t nqb = (P.Lq + P.bq - 1) / P.bq;
  std::atomic<bool> nonfinite{false};
  Forward f{P, bound.data_ptr<float>(), out.data_ptr<float>(), need_lse ? lse.data_ptr<float>() : nullptr, nqb,
            &nonfinite};
  run_items(nqb * P.B * P.Hkv, f);
  if (nonfinite.load()) return {};
  return {out, lse};
}

// Backward: returns {dq, dk, dv, dn_sum [H] float64, db_sum [H] float64}; dn_sum = sum over rows of
// sum(dL/dg * g) (dL/dn = dn_sum / n), db_sum = sum over rows of q . dq (dL/db = db_sum / b); both empty for
// softmax or when need_bn is false.
std::vector<at::Tensor> ssa_fused_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                           const at::Tensor& b, const at::Tensor& n,
                                           const c10::optional<at::Tensor>& mask, bool causal, double scale,
                                           int64_t bq, int64_t bk, bool need_bn) {
  Problem P = make_problem(q, k, v, b, n, mask, causal, scale, bq, bk);
  TORCH_CHECK(dout.is_contiguous() && out.is_contiguous() && lse.is_contiguous(), "ssa_hf fused kernel: contiguous tensors expected");
  const bool bn = need_bn && P.b != nullptr;
  if (P.Lq == 0) return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::zeros({bn ? P.H : 0}, q.options().dtype(at::kDouble)), at::zeros({bn ? P.H : 0}, q.options().dtype(at::kDouble))};
  {
    at::Tensor bound = at::empty({P.B, P.H, P.Lq}, q.options());
    if (!row_bounds(P, bound.data_ptr<float>())) return {};
  }
  at::Tensor delta = at::empty({P.B, P.H, P.Lq}, q.options());
  {
    const float* o = out.data_ptr<float>();
    const float* d = dout.data_ptr<float>();
    float* de = delta.data_ptr<float>();
    const int64_t Dv = P.Dv;
    at::parallel_for(0, P.B * P.H * P.Lq, 256, [&](int64_t s, int64_t e) {
      for (int64_t r = s; r < e; ++r) {
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t x = 0; x < Dv; ++x) acc += o[r * Dv + x] * d[r * Dv + x];
        de[r] = acc;
      }
    });
  }
  const int64_t nkb = P.Lk == 0 ? 0 : (P.Lk + P.bk - 1) / P.bk;
  // enough items for every thread: split the key blocks of a (batch, kv head) when there are few of those
  const int64_t want = 4 * (int64_t)at::get_num_threads();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(nkb, (want + P.B * P.Hkv - 1) / (P.B * P.Hkv)));
  at::Tensor dqp = at::zeros({chunks, P.B, P.H, P.Lq, P.D}, q.options());
  at::Tensor dk = at::zeros_like(k);
  at::Tensor dv = at::zeros_like(v);
  at::Tensor dnp = bn ? at::zeros({chunks, P.B, P.H}, q.options().dtype(at::kDouble)) : at::Tensor();
  Backward f{P, dout.data_ptr<float>(), lse.data_ptr<float>(), delta.data_ptr<float>(), dqp.data_ptr<float>(),
             dk.data_ptr<float>(), dv.data_ptr<float>(), bn ? dnp.data_ptr<double>() : nullptr, nkb, chunks};
  run_items(P.B * P.Hkv * chunks, f);
  at::Tensor dq = chunks == 1 ? dqp[0] : dqp.sum(0);
  at::Tensor dn_sum, db_sum;
  if (bn) {
    dn_sum = dnp.sum({0, 1});
    at::Tensor qdq = at::empty({P.B, P.H}, q.options().dtype(at::kDouble));
    const float* qp = P.q;
    const float* dqq = dq.data_ptr<float>();
    double* out_p = qdq.data_ptr<double>();
    const int64_t L = P.Lq, D = P.D;
    at::parallel_for(0, P.B * P.H, 1, [&](int64_t s, int64_t e) {
      for (int64_t bh = s; bh < e; ++bh) {
        double acc = 0.0;
        for (int64_t i = 0; i < L; ++i) {
          float row = 0.0f;
          const float* a = qp + (bh * L + i) * D;
          const float* c = dqq + (bh * L + i) * D;
#pragma omp simd reduction(+ : row)
          for (int64_t x = 0; x < D; ++x) row += a[x] * c[x];
          acc += row;
        }
        out_p[bh] = acc;
      }
    });
    db_sum = qdq.sum(0);
  } else {
    dn_sum = at::empty({0}, q.options().dtype(at::kDouble));
    db_sum = at::empty({0}, q.options().dtype(at::kDouble));
  }
  return {dq, dk, dv, dn_sum, db_sum};
}

// The number of threads that ran a parallel region of n items (tests: the kernel really runs on torch's pool).
int64_t ssa_parallel_width(int64_t n) {
  std::atomic<int64_t> width{0};
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) {
    const int64_t t = at::get_thread_num() + 1;
    int64_t w = width.load();
    while (t > w && !width.compare_exchange_weak(w, t)) {
    }
  });
  return width.load();
}

TORCH_LIBRARY(SSA_HF_NS, m) {
  m.def("parallel_width", &ssa_parallel_width);
  m.def("forward", &ssa_fused_forward);
  m.def("backward", &ssa_fused_backward);
}
"""

# -fno-trapping-math lets the compiler if-convert the selects in the tile loops and vectorise them (8x faster
# here); results are the same, only floating-point exception flags may differ
# -fopenmp: at::parallel_for is a template in ATen's headers whose OpenMP region is compiled into this library;
# without the flag it silently becomes a serial loop (one core whatever torch.set_num_threads says).  Nothing is
# linked for it: the GOMP symbols resolve to the OpenMP runtime torch has loaded, so there is one thread pool.
FLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast"]
FLAGS_PORTABLE = ["-O3", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast"]

_LOCK = threading.Lock()
_STATE = {"ops": None, "tried": False, "off_warned": False}
# None: follow SSA_HF_BLOCKWISE_NATIVE (default on); True/False: forced
_OVERRIDE = [None]


class UnsafeCacheError(RuntimeError):
    """The cache folder cannot be trusted and cannot be made private."""


def set_native_enabled(enabled):
    """Force the native kernel on (True) or off (False); None follows ``SSA_HF_BLOCKWISE_NATIVE``."""
    _OVERRIDE[0] = None if enabled is None else bool(enabled)


def native_enabled():
    if _OVERRIDE[0] is not None:
        return _OVERRIDE[0]
    return os.environ.get("SSA_HF_BLOCKWISE_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off", "")


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


def _is_private(st):
    return st.st_uid == os.getuid() and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _private_folder(path):
    """Create `path` with mode 0700, or check that it is a folder of this user that nobody else can write.  One
    of ours that others could write is emptied (others may have put anything there) and closed."""
    os.makedirs(path, mode=0o700, exist_ok=True)
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


def load_library(name, source, flags, root=None):
    """Build `source` (C++ registering ops with TORCH_LIBRARY) with torch.utils.cpp_extension into the private
    cache and load it; returns the library's path.  Raises RuntimeError (or UnsafeCacheError) with the reason."""
    from filelock import FileLock
    from torch.utils import cpp_extension

    root = root or cache_root()
    _private_folder(root)
    folder = os.path.join(root, name)
    library = os.path.join(folder, name + ".so")
    with FileLock(os.path.join(root, name + ".lock")):
        if os.path.exists(library) and _verified(folder, library):
            torch.ops.load_library(library)
            return library
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
        try:
            cpp_extension.load_inline(name, cpp_sources=[source], extra_cflags=flags, build_directory=folder,
                                      is_python_module=False, no_implicit_headers=True, verbose=False)
        except Exception as exc:  # the compiler's message is in the exception text
            text = str(exc).strip().splitlines()
            raise RuntimeError(f"the C++ build failed with {compiler}: {' | '.join(text[-6:])[:800]}") from None
        tmp = library + ".sha256.tmp"
        with open(tmp, "w") as f:
            f.write(_sha256(library))
        os.replace(tmp, library + ".sha256")
        return library


def _build_key(flags):
    parts = [NATIVE_SOURCE, " ".join(flags), torch.__version__, sys.version, platform.machine(), _cpu_signature(),
             os.environ.get("CXX", "c++")]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _load():
    errors = []
    for flags in (FLAGS, FLAGS_PORTABLE):
        key = _build_key(flags)
        namespace = f"ssa_hf_native_{key}"
        try:
            load_library(namespace, NATIVE_SOURCE, flags + [f"-DSSA_HF_NS={namespace}"])
            return getattr(torch.ops, namespace)
        except UnsafeCacheError:
            raise
        except RuntimeError as exc:
            errors.append(str(exc))
            if "no C++ compiler" in str(exc) or "Ninja" in str(exc):
                break
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
