"""C++ source of the fused CPU kernel, part 1 of 4: BLAS tile products, the vectorised log/exp and SSA's g(s),
the per-row passes of forward and backward, the parallel driver.  Part 2 (native_tiles.py) holds the decoding steps',
small head dims' and bf16 ukernel products, part 3 (native_kernels.py) the forward and backward kernels, part 4 (native_ops.py) their entry points
and Python bindings; native.py joins the four (part 1 opens the anonymous namespace that part 3 closes) and builds
them.  Part of the remote-code unit (a string, no imports)."""

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

// ---- The vectorised row passes (at::vec::Vectorized<float>: 16 lanes on AVX-512, 8 on AVX2) ----
// Built when the build targets AVX2 or AVX-512 (native.py defines CPU_CAPABILITY_* from the CPU it builds on);
// the scalar passes above are the portable path, always built, and forced by set_portable(true) (tests).
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#define SSA_HF_VECTOR 1
using Vec = at::vec::Vectorized<float>;
using VecI = at::vec::Vectorized<int32_t>;
constexpr int64_t kW = Vec::size();

// Where at::vec has no operation for a step (reinterpreting bits, the hardware reciprocal estimate, the
// exponent/mantissa split, a register-table lookup, scaling by 2^k), one intrinsic per capability.
#if defined(CPU_CAPABILITY_AVX512)
inline __attribute__((always_inline)) Vec float_of(VecI x) { return Vec(_mm512_castsi512_ps(x)); }
inline __attribute__((always_inline)) VecI bits_of(Vec x) { return VecI(_mm512_castps_si512(x)); }
inline __attribute__((always_inline)) Vec rcp_estimate(Vec y) { return Vec(_mm512_rcp14_ps(y)); }
#else
inline __attribute__((always_inline)) Vec float_of(VecI x) { return Vec(_mm256_castsi256_ps(x)); }
inline __attribute__((always_inline)) VecI bits_of(Vec x) { return VecI(_mm256_castps_si256(x)); }
inline __attribute__((always_inline)) Vec rcp_estimate(Vec y) { return Vec(_mm256_rcp_ps(y)); }
#endif

// 1 / y for y >= 1 without a division: the hardware estimate (12 or 14 bits) and one Newton step (~1e-7)
inline __attribute__((always_inline)) Vec recip_ge1(Vec y) {
  const Vec r = rcp_estimate(y);
  return r * at::vec::fnmadd(y, r, Vec(2.0f));
}

// log2(y) for y = 1 + u, finite u >= 0 (absolute error < 1e-7, what P = 2^(g - offset) sees)
inline __attribute__((always_inline)) Vec vlog2_1p(Vec u, Vec y) {
#if defined(CPU_CAPABILITY_AVX512)
  // y = 2^e m, m in [1, 2) (getexp, getmant); the top four mantissa bits pick c = 1 + i/16 from a 16-entry table
  // held in one register (permutexvar reads the low four bits of each index): log2(m) = log2(c) + log2(1 + r),
  // r = m/c - 1 in [0, 1/16), a degree-6 series in r
  const __m512 e = _mm512_getexp_ps(y);
  const __m512 m = _mm512_getmant_ps(y, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero);
  const __m512i idx = _mm512_srli_epi32(_mm512_castps_si512(y), 19);
  const __m512 inv_c = _mm512_permutexvar_ps(idx, _mm512_setr_ps(
      1.0f, 16.0f / 17, 16.0f / 18, 16.0f / 19, 16.0f / 20, 16.0f / 21, 16.0f / 22, 16.0f / 23, 16.0f / 24, 16.0f / 25,
      16.0f / 26, 16.0f / 27, 16.0f / 28, 16.0f / 29, 16.0f / 30, 16.0f / 31));
  const __m512 log2_c = _mm512_permutexvar_ps(idx, _mm512_setr_ps(
      0.0f, 0.087462841f, 0.169925001f, 0.247927513f, 0.321928095f, 0.392317423f, 0.459431619f, 0.523561956f,
      0.584962501f, 0.643856190f, 0.700439718f, 0.754887502f, 0.807354922f, 0.857980995f, 0.906890596f,
      0.954196310f));
  // r from m * (1/c) rounded to float: the table's 1/c is rounded too, so r carries ~6e-8 relative error of m/c,
  // absorbed below the 1e-7 target.  Below 1 + 1/16 (c = 1) r is u itself, exact where y's rounding is not
  // (log1p's accuracy for tiny b|x|)
  const __m512 r0 = _mm512_fmsub_ps(m, inv_c, _mm512_set1_ps(1.0f));
  const Vec r(_mm512_mask_mov_ps(r0, _mm512_cmp_ps_mask(y, _mm512_set1_ps(1.0625f), _CMP_LT_OQ), u));
  Vec p(-1.0f / 6);
  p = at::vec::fmadd(p, r, Vec(1.0f / 5));
  p = at::vec::fmadd(p, r, Vec(-1.0f / 4));
  p = at::vec::fmadd(p, r, Vec(1.0f / 3));
  p = at::vec::fmadd(p, r, Vec(-1.0f / 2));
  p = at::vec::fmadd(p, r, Vec(1.0f));
  return at::vec::fmadd(p * r, Vec(kLog2e), Vec(_mm512_add_ps(e, log2_c)));
#else
  // y = 2^e m, m in [1, 2) (integer split: y >= 1); the top three mantissa bits pick c = 1 + (i + 1/2)/8 from an
  // 8-entry table held in one register (permutevar8x32 reads the low three bits of each index): log2(m) =
  // log2(c) + log2(1 + r), r = m/c - 1 in [-1/17, 1/17], a degree-4 near-minimax polynomial (abs. error 2e-8 in
  // ln).  The table holds 1/c rounded to float and -log2 of that float, so the product's rounding is the only error
  // of r.  Against the degree-9 series over [sqrt(1/2), sqrt(2)) it replaces, the forward pass went from 0.93x to
  // 0.75-0.81x the portable pass's time on an AVX2-only Zen 3 (bench_score_pass.py).  Tiny b|x| still sees y's
  // rounding here, as on the portable pass.
  (void)u;
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i idx = _mm256_srli_epi32(bits, 20);
  const Vec inv_c(_mm256_permutevar8x32_ps(_mm256_setr_ps(
      0.941176474f, 0.842105269f, 0.761904776f, 0.695652187f, 0.639999986f, 0.592592597f, 0.551724136f,
      0.516129017f), idx));
  const Vec log2_c(_mm256_permutevar8x32_ps(_mm256_setr_ps(
      0.0874628359f, 0.247927503f, 0.392317396f, 0.523561929f, 0.643856222f, 0.754887491f, 0.857981001f,
      0.954196353f), idx));
  const Vec m = float_of((VecI(bits) & VecI(0x007fffff)) | VecI(0x3f800000));
  const Vec e = at::vec::convert_to_fp_of_same_size<float>((VecI(bits) >> VecI(23)) - VecI(127));
  const Vec r = at::vec::fmsub(m, inv_c, Vec(1.0f));
  Vec q(-0.250880222f);
  q = at::vec::fmadd(q, r, Vec(0.333936024f));
  q = at::vec::fmadd(q, r, Vec(-0.499998955f));
  const Vec ln = at::vec::fmadd(r * r, q, r);
  return at::vec::fmadd(ln, Vec(kLog2e), e + log2_c);
#endif
}

// 2^t for finite t <= ~0 (relative error ~1e-7): t = k + f, |f| <= 1/2, a degree-6 polynomial in f times 2^k
inline __attribute__((always_inline)) Vec vexp2_le0(Vec t) {
#if defined(CPU_CAPABILITY_AVX512)
  const __m512 kf = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const Vec f(_mm512_sub_ps(t, kf));
#else
  const Vec big = t + Vec(12582912.0f);  // 1.5 * 2^23: the low mantissa bits hold round(t)
  const Vec f = t - (big - Vec(12582912.0f));
#endif
#if defined(CPU_CAPABILITY_AVX512)
  Vec q(0.0001546144746f);
  q = at::vec::fmadd(q, f, Vec(0.001339086735f));
  q = at::vec::fmadd(q, f, Vec(0.00961805667f));
  q = at::vec::fmadd(q, f, Vec(0.05550357104f));
  q = at::vec::fmadd(q, f, Vec(0.2402265092f));
  q = at::vec::fmadd(q, f, Vec(0.693147188f));
#else
  // one degree less on AVX2 (near-minimax, relative error 9e-8): the pass is bound by its FMA ports there
  Vec q(0.00132646988f);
  q = at::vec::fmadd(q, f, Vec(0.00967150882f));
  q = at::vec::fmadd(q, f, Vec(0.0555073378f));
  q = at::vec::fmadd(q, f, Vec(0.240222421f));
  q = at::vec::fmadd(q, f, Vec(0.693146978f));
#endif
  const Vec r = at::vec::fmadd(f, q, Vec(1.0f));
#if defined(CPU_CAPABILITY_AVX512)
  return Vec(_mm512_scalef_ps(r, kf));  // 2^k r, gradually to 0 below 2^-126 (no select)
#else
  const Vec sc = float_of((bits_of(big) << VecI(23)) + VecI(0x3f800000));
  return (r * sc) & (t >= Vec(-126.0f));  // 0 below 2^-126, as exp2_le0
#endif
}

// sgn(x) |a| for a >= 0: the sign bit of x on a
inline __attribute__((always_inline)) Vec with_sign_of(Vec a, Vec x) { return a | (x & Vec(-0.0f)); }

// visible lanes of a mask row (one byte per key) from c, as an all-ones/zero float mask; reads count bytes
inline __attribute__((always_inline)) Vec vvisible(const uint8_t* m, int64_t count) {
  if (count == kW) {
#if defined(CPU_CAPABILITY_AVX512)
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(m)));
#else
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m)));
#endif
    return at::vec::convert_to_fp_of_same_size<float>(VecI(b)) != Vec(0.0f);
  }
  alignas(64) float tmp[kW];
  for (int64_t c = 0; c < kW; ++c) tmp[c] = (c < count && m[c] != 0) ? 1.0f : 0.0f;
  return Vec::loadu(tmp) != Vec(0.0f);
}

inline float vsum(Vec v) {
  alignas(64) float tmp[kW];
  v.store(tmp);
  float s = 0.0f;
  for (int64_t c = 0; c < kW; ++c) s += tmp[c];
  return s;
}

// The forward's per-score pass on one vector of raw scores (the first `cnt` lanes real): P = 2^(g2 - offset).
// x = scale v is never formed: b|x| = |v| (b |scale|), sgn(x) = sgn(v) xor sgn(scale), and the sign goes onto n,
// so that n sgn(x) log2(1 + b|x|) - offset is one fused multiply-add (two multiplies fewer per vector: the pass is
// bound by its multiply/FMA ports on AVX2).
template <bool SSA, bool MASK>
struct FwdLanes {
  Vec bs, scale_sign, n, scale2, neg_o2, o2lo;  // b |scale|, the sign bit of scale, n, scale log2(e), -offset2
  inline __attribute__((always_inline)) Vec operator()(Vec v, const uint8_t* mrow, int64_t cnt) const {
    Vec t;
    if constexpr (SSA) {
      const Vec u = v.abs() * bs;
      const Vec signed_n = n | ((v & Vec(-0.0f)) ^ scale_sign);
      t = at::vec::fmadd(signed_n, vlog2_1p(u, u + Vec(1.0f)), neg_o2);
    } else {
      t = at::vec::fmadd(v, scale2, neg_o2);
    }
    Vec e = vexp2_le0(t - o2lo);
    if constexpr (MASK) e = e & vvisible(mrow, cnt);
    return e;
  }
};

template <bool SSA, bool MASK>
inline float vfwd_row(float* __restrict row, const uint8_t* __restrict mrow, int64_t cend, int64_t cols,
                      float scale, float b, float n, float off) {
  const float o2 = (float)((double)off * kLog2eD), o2lo = (float)((double)off * kLog2eD - o2);
  const FwdLanes<SSA, MASK> lanes{Vec(b * std::fabs(scale)), Vec(std::signbit(scale) ? -0.0f : 0.0f), Vec(n),
                                  Vec(scale * kLog2e), Vec(-o2), Vec(o2lo)};
  Vec acc(0.0f);
  int64_t c = 0;
  for (; c + kW <= cend; c += kW) {
    const Vec e = lanes(Vec::loadu(row + c), MASK ? mrow + c : nullptr, kW);
    e.store(row + c);
    acc = acc + e;
  }
  if (c < cend) {  // the tail: masked load and store, lanes past it zeroed for the sum
    const int64_t cnt = cend - c;
    const Vec e = Vec::set(Vec(0.0f), lanes(Vec::loadu(row + c, cnt), MASK ? mrow + c : nullptr, cnt), cnt);
    e.store(row + c, cnt);
    acc = acc + e;
  }
  for (int64_t j = cend; j < cols; ++j) row[j] = 0.0f;
  return vsum(acc);
}

// The backward's pass on one vector: P from the saved row logsumexp, dS = P (dP - delta) g'(x) scale, and the
// terms of sum(dg g) for dL/dn.  P is formed exactly as the forward formed it (FwdLanes: b|x| from |v| b|scale|,
// the sign on n, one FMA for g2 - L2): with g2 ~ 100 a float's rounding is ~1e-5 of P, and a backward that
// rounds differently from the forward sees rows that no longer sum to the forward's delta (dn, db off by ~1%).
template <bool SSA, bool MASK>
struct BwdLanes {
  Vec bs, scale_sign, n, neg_L2, L2lo, d, kk, scale2;  // b |scale|, scale's sign bit, n, -L2, L2's low part, ...
  inline __attribute__((always_inline)) void operator()(Vec v, Vec dp, const uint8_t* mrow, int64_t cnt, Vec* p_out,
                                                        Vec* ds_out, Vec* dgg) const {
    if constexpr (SSA) {
      const Vec u = v.abs() * bs;
      const Vec y = u + Vec(1.0f);
      const Vec lg = vlog2_1p(u, y);
      const Vec signed_n = n | ((v & Vec(-0.0f)) ^ scale_sign);
      Vec p = vexp2_le0(at::vec::fmadd(signed_n, lg, neg_L2) - L2lo);
      if constexpr (MASK) p = p & vvisible(mrow, cnt);
      const Vec dg = p * (dp - d);
      *p_out = p;
      *ds_out = dg * kk * recip_ge1(y);
      *dgg = dg * (signed_n * lg);
    } else {
      Vec p = vexp2_le0(at::vec::fmadd(v, scale2, neg_L2) - L2lo);
      if constexpr (MASK) p = p & vvisible(mrow, cnt);
      *p_out = p;
      *ds_out = p * (dp - d) * kk;
    }
  }
};

template <bool SSA, bool MASK>
inline float vbwd_row(float* __restrict row, float* __restrict drow, const uint8_t* __restrict mrow,
                      int64_t cend, float scale, float b, float n, float L, float d) {
  const float L2 = (float)((double)L * kLog2eD), L2lo = (float)((double)L * kLog2eD - L2);
  const BwdLanes<SSA, MASK> lanes{Vec(b * std::fabs(scale)), Vec(std::signbit(scale) ? -0.0f : 0.0f), Vec(n),
                                  Vec(-L2), Vec(L2lo), Vec(d), Vec(SSA ? n * b * scale : scale), Vec(scale * kLog2e)};
  Vec acc(0.0f), p, ds, dgg(0.0f);
  int64_t c = 0;
  for (; c + kW <= cend; c += kW) {
    lanes(Vec::loadu(row + c), Vec::loadu(drow + c), MASK ? mrow + c : nullptr, kW, &p, &ds, &dgg);
    p.store(row + c);
    ds.store(drow + c);
    acc = acc + dgg;
  }
  if (c < cend) {
    const int64_t cnt = cend - c;
    lanes(Vec::loadu(row + c, cnt), Vec::loadu(drow + c, cnt), MASK ? mrow + c : nullptr, cnt, &p, &ds, &dgg);
    p.store(row + c, cnt);
    ds.store(drow + c, cnt);
    acc = acc + Vec::set(Vec(0.0f), dgg, cnt);
  }
  if constexpr (!SSA) return 0.0f;
  return vsum(acc) * kLn2;
}
#endif

// true: the scalar passes even where the vectorised ones are built (tests compare the two paths)
std::atomic<bool> g_portable{false};

inline bool vector_path() {
#ifdef SSA_HF_VECTOR
  return !g_portable.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// Threads that ran the ukernel release its hardware context (AMX tile configuration) when their work ends.
thread_local bool t_ukernel_used = false;

// The lanes of the vectorised passes in this build (0: only the portable passes were built).
inline int64_t vector_lanes() {
#ifdef SSA_HF_VECTOR
  return kW;
#else
  return 0;
#endif
}

template <bool SSA, bool MASK>
inline float fwd_row_path(float* row, const uint8_t* mrow, int64_t cend, int64_t cols, float scale, float b,
                          float n, float off) {
#ifdef SSA_HF_VECTOR
  if (vector_path()) return vfwd_row<SSA, MASK>(row, mrow, cend, cols, scale, b, n, off);
#endif
  return fwd_row<SSA, MASK>(row, mrow, cend, cols, scale, b, n, off);
}

template <bool SSA, bool MASK>
inline float bwd_row_path(float* row, float* drow, const uint8_t* mrow, int64_t cend, float scale, float b,
                          float n, float L, float d) {
#ifdef SSA_HF_VECTOR
  if (vector_path()) return vbwd_row<SSA, MASK>(row, drow, mrow, cend, scale, b, n, L, d);
#endif
  return bwd_row<SSA, MASK>(row, drow, mrow, cend, scale, b, n, L, d);
}

inline float fwd_row_any(float* row, const Row& r, int64_t cols, float scale, bool ssa, float b, float n,
                         float off) {
  if (ssa) return r.mask ? fwd_row_path<true, true>(row, r.mask, r.cend, cols, scale, b, n, off)
                         : fwd_row_path<true, false>(row, r.mask, r.cend, cols, scale, b, n, off);
  return r.mask ? fwd_row_path<false, true>(row, r.mask, r.cend, cols, scale, b, n, off)
                : fwd_row_path<false, false>(row, r.mask, r.cend, cols, scale, b, n, off);
}

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
