"""C++ source of the fused CPU kernel, part 1 of 6: BLAS tile products, the scalar log/exp and SSA's g(s), the
portable per-row passes of forward and backward, the parallel driver.  Part 2
(native_rows.py) holds the vectorised per-row passes, part 3 (native_decode.py) the decoding steps' few-row
products, part 4 (native_tiles.py) the small head dims' and bf16 ukernel products, part 5 (native_kernels.py) the
forward and backward kernels, part 6 (native_ops.py) their entry points and Python bindings; native.py joins the six
(part 1 opens the anonymous namespace that part 5 closes) and builds them.  Part of the remote-code unit (a string, no imports)."""

MATH_SOURCE = r"""
// SSA / softmax attention for CPU: one parallel region per call (torch's intra-op pool), tile products
// through the CPU BLAS (MKL's sgemm_ as linked into torch), scoring, masking and online normalisation fused
// in between.  float32, bfloat16 and float16 inputs (fp32 statistics and accumulation); see blockwise.py for the layouts and the torch oracle.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/native/CPUBlas.h>
#include <torch/csrc/utils/pybind.h>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>  // cpu_multiplies_bf16 (native_tiles.py)
#endif

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
  const void *qx, *kx, *vx;    // [B, H, Lq, D], [B, Hkv, Lk, D], [B, Hkv, Lk, Dv] in the call's dtype (T below)
  at::ScalarType dtype;        // float32, bfloat16 or float16
  int64_t B, H, Hkv, G, Lq, Lk, D, Dv;
  const float *b, *n;          // [H] (ssa) or nullptr (softmax)
  float scale;
  bool causal;                 // top-left: query i sees keys j <= i
  const uint8_t* mask;         // bool, indexable as [B, H, Lq, Lk] with the strides below (0 = broadcast)
  int64_t msb, msh, msi, msj;
  int64_t bq, bk;              // query positions per work item, keys per tile
  float fixed_max;             // largest row bound for which the forward uses it as a fixed row offset
  bool bounded;                // forward: compute row bounds (false: online maximum for every row)

  template <typename T> const T* q() const { return static_cast<const T*>(qx); }
  template <typename T> const T* k() const { return static_cast<const T*>(kx); }
  template <typename T> const T* v() const { return static_cast<const T*>(vx); }

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

// Threads that ran the ukernel release its hardware context (AMX tile configuration) when their work ends.
thread_local bool t_ukernel_used = false;

std::atomic<int64_t> g_regions{0};  // parallel regions opened by the kernels (tests: at most one per call)

// The only parallel region of this source (a test checks): at::parallel_for, counted.
template <typename F>
void parallel(int64_t n, const F& fn) {
  g_regions.fetch_add(1, std::memory_order_relaxed);
  at::parallel_for(0, n, 1, fn);
}

// Calls whose tile products add up to fewer flops than the caller's serial_flops (a decoding step of a small
// model: microseconds of work) run on the calling thread: a parallel region costs more than it saves there, and
// beside busy processes it can cost a scheduler time slice (milliseconds) while the second thread waits.
inline double problem_flops(const Problem& P) {
  const double visible = P.causal ? 0.5 : 1.0;
  return 2.0 * P.B * P.H * P.Lq * P.Lk * (double)(P.D + P.Dv) * visible;
}

// Run fn(item) for item in [0, items): on torch's intra-op pool in one parallel region, items handed out
// dynamically (a thread that the scheduler delays takes fewer items instead of holding up the others), or on the
// calling thread when `serial`.
template <typename F>
void run_items(int64_t items, const F& fn, bool serial) {
  if (items <= 0) return;
  const int64_t nt = serial ? 1 : std::min<int64_t>(at::get_num_threads(), items);
  std::atomic<int64_t> next{0};
  auto worker = [&](int64_t, int64_t) {
    typename F::Scratch scratch(fn);
    const int one = 1;
    const int prev = mkl_set_num_threads_local_ ? mkl_set_num_threads_local_(&one) : 0;
    for (int64_t it = next.fetch_add(1); it < items; it = next.fetch_add(1)) fn(it, scratch);
    if (mkl_set_num_threads_local_) mkl_set_num_threads_local_(&prev);
    if (t_ukernel_used) {
      at::native::cpublas::brgemm_release(true);
      t_ukernel_used = false;
    }
  };
  if (nt == 1) worker(0, 1);
  else parallel(nt, worker);
}
"""
