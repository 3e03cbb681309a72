"""C++ source of the fused CPU kernel, part 2 of 6: the vectorised per-score passes of forward and backward
(at::vec::Vectorized<float>, 16 lanes on AVX-512, 8 on AVX2), the choice between them and part 1's portable
passes, P's rounding to bf16, and the forward's per-item row bounds (the fixed offsets of its pass).  See native_math.py (part 1) for the rest of the layout; native.py joins the parts and builds them.  Part of
the remote-code unit (a string, no imports)."""

ROWS_SOURCE = r"""
// ---- P rounded to bf16 (the bf16 ukernel's P V operand) ----
// round to nearest even, for finite x (what this kernel rounds is finite: the torch path takes NaN/inf calls)
inline uint32_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
inline float bf16_value(uint32_t h) {
  const uint32_t u = h << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// one row x (C values, fp32) rounded to bf16 into h (a zero past C where C is odd); returns the sum of the rounded
// values (the forward's P V divides by it)
inline float round_row_sum(const float* x, int64_t C, at::BFloat16* h) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < C; ++c) {
    const uint32_t a = bf16_bits(x[c]);
    h[c].x = (uint16_t)a;
    sum += bf16_value(a);
  }
  if (C % 2) h[C].x = 0;
  return sum;
}

// ---- The vectorised row passes (at::vec::Vectorized<float>: 16 lanes on AVX-512, 8 on AVX2) ----
// Built when the build targets AVX2 or AVX-512 (native.py defines CPU_CAPABILITY_* from the CPU it builds on);
// the scalar passes above are the portable path, always built, and forced by set_portable(true) (tests).
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#define SSA_HF_VECTOR 1
using Vec = at::vec::Vectorized<float>;
using VecI = at::vec::Vectorized<int32_t>;
constexpr int64_t kW = Vec::size();

// count (<= kW) elements as float lanes, the rest 0
template <typename T>
inline __attribute__((always_inline)) Vec load_as_float(const T* p, int64_t count) {
  if constexpr (std::is_same_v<T, float>) {
    return Vec::loadu(p, count);
  } else {
    Vec out;
    if (count == kW) {
      at::vec::load_to_float<T>(p, out);
      return out;
    }
    // a masked load where the ISA has one, and the vector conversion (element by element, fp16 took longer than a
    // head dim 8's dot product)
    return std::get<0>(at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p, count)));
  }
}

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

#if !defined(CPU_CAPABILITY_AVX512)
// log2(y) = lin + r2 q for finite y >= 1 (AVX2): y = 2^e m, m in [1, 2) (integer split); the top three mantissa
// bits pick c = 1 + (i + 1/2)/8 from an 8-entry table held in one register (permutevar8x32 reads the low three bits
// of each index): log2(m) = log2(c) + log2(1 + r), r = m/c - 1 in [-1/17, 1/17], log2(1 + r) = log2(e) (r + r^2 q0(r)),
// q0 of degree 2 (a near-minimax ln of degree 4, abs. error 2e-8), q = log2(e) q0.  The table
// holds 1/c rounded to float and -log2 of that float, so the product's rounding is the only error of r.  Against
// the degree-9 series over [sqrt(1/2), sqrt(2)) it replaced, the forward pass went from 0.93x to 0.75-0.81x the
// portable pass's time on an AVX2-only Zen 3 (bench_score_pass.py).  Tiny b|x| still sees y's rounding here, as
// on the portable pass.  Left as its parts: the AVX2 pass is bound by the length of its dependent chain, not its
// ports, so callers fold n and the offset in beside r2 q, not after it.
struct Log2Split {
  Vec lin, r2, q;
};
inline __attribute__((always_inline)) Log2Split vlog2_split(Vec y) {
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
  Vec q(-0.250880222f * kLog2e);
  q = at::vec::fmadd(q, r, Vec(0.333936024f * kLog2e));
  q = at::vec::fmadd(q, r, Vec(-0.499998955f * kLog2e));
  return {at::vec::fmadd(r, Vec(kLog2e), e + log2_c), r * r, q};
}
#endif

// log2(y) for y = 1 + u, finite u >= 0 (absolute error < 1e-7, what P = 2^(g - offset) sees).  SMALL_U (AVX-512):
// below y = 1 + 1/16 from u itself (log1p's accuracy for tiny b|x|), where the backward's sum(dg g) needs it: g is
// then tiny, and y's rounding would be an absolute error of up to 6e-8 n in it, as on the portable and AVX2 passes.
// The forward's P takes y's rounding (6e-8 n relative in P, less than float32 g's own rounding elsewhere): the
// select cost it 10% of its time (Xeon, AMX: the compare and both table lookups share one port).
template <bool SMALL_U = true>
inline __attribute__((always_inline)) Vec vlog2_1p(Vec u, Vec y) {
#if defined(CPU_CAPABILITY_AVX512)
  // y = 2^e m, m in [1, 2) (getexp, getmant); the top four mantissa bits pick c = 1 + i/16 from a 16-entry table
  // held in one register (permutexvar reads the low four bits of each index): log2(m) = log2(c) + log2(1 + r),
  // r = m/c - 1 in [0, 1/16), log2(1 + r) = r p(r) with p of degree 3 fitted to it there (absolute error 2.3e-9
  // with its float coefficients; the degree-6 series it replaced cost three more operations a vector)
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
  // absorbed below the 1e-7 target.  SMALL_U: below 1 + 1/16 (c = 1) r is u itself, exact where y's rounding is not
  const __m512 r0 = _mm512_fmsub_ps(m, inv_c, _mm512_set1_ps(1.0f));
  Vec r(r0);
  if constexpr (SMALL_U) r = Vec(_mm512_mask_mov_ps(r0, _mm512_cmp_ps_mask(y, _mm512_set1_ps(1.0625f), _CMP_LT_OQ), u));
  Vec p(-0.32713524f);
  p = at::vec::fmadd(p, r, Vec(0.47962195f));
  p = at::vec::fmadd(p, r, Vec(-0.7213318f));
  p = at::vec::fmadd(p, r, Vec(1.442695f));
  return at::vec::fmadd(p, r, Vec(_mm512_add_ps(e, log2_c)));
#else
  const Log2Split parts = vlog2_split(y);
  (void)u;
  return at::vec::fmadd(parts.r2, parts.q, parts.lin);
#endif
}

// 2^(t - lo) for finite t <= ~0 and |lo| <= ~1e-5, lo the low part of an offset held as two floats
// (relative error ~1e-7): t - lo = k + f, |f| <= 1/2, a degree-5 polynomial in f times 2^k.  two_neg_lo = 2^-lo
// rounded to float (AVX2: its 6e-8 relative rounding buys lo's subtraction off the dependent chain).
inline __attribute__((always_inline)) Vec vexp2_le0(Vec t, Vec lo, Vec two_neg_lo) {
#if defined(CPU_CAPABILITY_AVX512)
  (void)two_neg_lo;
  t = t - lo;
  const __m512 kf = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const Vec f(_mm512_sub_ps(t, kf));
  // near-minimax of degree 5 (relative error 9e-8), Horner: AVX-512 runs this pass bound by its FMA ports
  Vec q(0.00132646988f);
  q = at::vec::fmadd(q, f, Vec(0.00967150882f));
  q = at::vec::fmadd(q, f, Vec(0.0555073378f));
  q = at::vec::fmadd(q, f, Vec(0.240222421f));
  q = at::vec::fmadd(q, f, Vec(0.693146978f));
  const Vec r = at::vec::fmadd(f, q, Vec(1.0f));
  return Vec(_mm512_scalef_ps(r, kf));  // 2^k r, gradually to 0 below 2^-126 (no select)
#else
  (void)lo;
  const Vec kf(_mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const Vec f = t - kf;
  // the same polynomial as (1 + c1 f) + f^2 ((c2 + c3 f) + f^2 (c4 + c5 f)): one multiply more than Horner's five
  // FMAs, a dependent chain of three after f instead of five (the AVX2 pass is bound by its chain's length)
  const Vec f2 = f * f;
  const Vec lo1 = at::vec::fmadd(f, Vec(0.693146978f), Vec(1.0f));
  const Vec mid = at::vec::fmadd(f, Vec(0.0555073378f), Vec(0.240222421f));
  const Vec hi = at::vec::fmadd(f, Vec(0.00132646988f), Vec(0.00967150882f));
  const Vec r = at::vec::fmadd(f2, at::vec::fmadd(f2, hi, mid), lo1);
  // 2^k 2^-lo formed from k beside the polynomial; 0 below 2^-126 as exp2_le0 (the select after the product, so
  // that the NaN polynomial of t = -inf gives 0 too)
  const Vec sc = float_of((VecI(_mm256_cvtps_epi32(kf)) << VecI(23)) + VecI(0x3f800000)) * two_neg_lo;
  return (r * sc) & (t >= Vec(-126.0f));
#endif
}

// 2^-lo for the low part |lo| <= ~1e-5 of an offset held as two floats: 1 - lo ln2 (the next term, (lo ln2)^2 / 2,
// is below 1e-10, past float's precision), not a libm exp2 per row (1% of a decoding call built for AVX2)
inline float two_pow_neg_small(float lo) { return (float)(1.0 - (double)lo * 0.6931471805599453); }

// n sgn(x) log2(y) - o2 for y = 1 + u (the exponent of P = 2^(g2 - o2)); the log2 to *lg if asked.  AVX2 folds
// n and the offset into log2's linear part beside its r2 q term (one FMA off the dependent chain); the rounding
// of that partial sum is that of the result's own size, as for the one FMA the AVX-512 path uses.
template <bool SMALL_U>
inline __attribute__((always_inline)) Vec vsigned_log2_minus(Vec signed_n, Vec u, Vec y, Vec neg_o2,
                                                             Vec* lg = nullptr) {
#if defined(CPU_CAPABILITY_AVX512)
  const Vec l = vlog2_1p<SMALL_U>(u, y);
  if (lg) *lg = l;
  return at::vec::fmadd(signed_n, l, neg_o2);
#else
  (void)u;
  const Log2Split parts = vlog2_split(y);
  if (lg) *lg = at::vec::fmadd(parts.r2, parts.q, parts.lin);
  return at::vec::fmadd(signed_n * parts.r2, parts.q, at::vec::fmadd(signed_n, parts.lin, neg_o2));
#endif
}

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
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_reduce_add_ps(v);
#endif
  alignas(64) float tmp[kW];
  v.store(tmp);
  float s = 0.0f;
  for (int64_t c = 0; c < kW; ++c) s += tmp[c];
  return s;
}

// The forward's per-score pass on one vector of raw scores (the first `cnt` lanes real): P = 2^(g2 - offset).
// x = scale v is never formed: b|x| = |v| (b |scale|), sgn(x) = sgn(v) xor sgn(scale), and the sign goes onto n
// (its sign bit flipped, not set: a learned `raw` n may be negative),
// so that n sgn(x) log2(1 + b|x|) - offset is one fused multiply-add (two multiplies fewer per vector).
template <bool SSA, bool MASK>
struct FwdLanes {
  // b |scale|, the sign bit of scale, n, scale log2(e), -offset2 (high part), its low part and 2^-low
  Vec bs, scale_sign, n, scale2, neg_o2, o2lo, two_neg_o2lo;
  // the exponent t = g2 - offset2 (high part) of a raw score vector
  inline __attribute__((always_inline)) Vec exponent(Vec v) const {
    if constexpr (SSA) {
      const Vec u = v.abs() * bs;
      const Vec signed_n = n ^ ((v & Vec(-0.0f)) ^ scale_sign);  // n sgn(x), n of either sign (learned raw)
      return vsigned_log2_minus<false>(signed_n, u, u + Vec(1.0f), neg_o2);
    }
    return at::vec::fmadd(v, scale2, neg_o2);
  }
  // P from the exponent, 0 where the mask hides a key
  inline __attribute__((always_inline)) Vec weight(Vec t, const uint8_t* mrow, int64_t cnt) const {
    Vec e = vexp2_le0(t, o2lo, two_neg_o2lo);
    if constexpr (MASK) e = e & vvisible(mrow, cnt);
    return e;
  }
};

// SSA: the row's exponents in one loop (written over the row), then their exp2, mask and sum in a second.  One
// loop's chain of log2 -> exponent -> exp2 per vector is longer than the out-of-order window overlaps at the
// loop's port-bound rate (unrolling it changed nothing on a Zen 3); each of two loops holds half of it, and the row
// stays in L1 between them.  bench_score_pass.py on a Zen 4: 0.67 -> 0.51 ns/score built for AVX2, 0.40 -> 0.35
// with AVX-512 (docs/performance.md).

#if defined(CPU_CAPABILITY_AVX512)
#define SSA_HF_FUSED_ROUNDING 1
// e rounded to bf16 (to nearest even, as bf16_bits) into h's first cnt lanes; returns the rounded values as float
inline __attribute__((always_inline)) Vec round_store_bf16(Vec e, at::BFloat16* h, int64_t cnt) {
  const __m512i u = _mm512_castps_si512(e);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i hi = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  if (cnt == kW) _mm256_storeu_si256(reinterpret_cast<__m256i*>(h), _mm512_cvtepi32_epi16(hi));
  else _mm512_mask_cvtepi32_storeu_epi16(h, (__mmask16)((1u << cnt) - 1u), hi);
  return Vec(_mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
}
// two vectors at once (32 weights, h's 64 bytes): one conversion where the CPU has AVX512-BF16 (vcvtne2ps2bf16,
// which rounds to nearest even as bf16_bits, denormals to zero), and the rounded values summed by a bf16 dot product
// with ones (vdpbf16ps: exact products, fp32 sums) into racc
inline __attribute__((always_inline)) Vec round_store_bf16_pair(Vec e0, Vec e1, at::BFloat16* h, Vec racc) {
#if defined(__AVX512BF16__)
  const __m512bh pair = _mm512_cvtne2ps_pbh(e1, e0);
  _mm512_storeu_si512(h, (__m512i)pair);
  return Vec(_mm512_dpbf16_ps(racc, pair, (__m512bh)_mm512_set1_epi16(0x3F80)));
#else
  return racc + round_store_bf16(e0, h, kW) + round_store_bf16(e1, h + kW, kW);
#endif
}
#endif

// ROUND (AVX-512 builds): P goes to h rounded to bf16 instead of over the row (round_row_sum's result, without the
// second pass over the row), the rounded weights' sum to *rsum; without EXACT the exact sum is not formed (0 is
// returned: a forward without a row logsumexp divides by the rounded sum alone)
template <bool SSA, bool MASK, bool ROUND = false, bool EXACT = true>
inline float vfwd_row(float* __restrict row, const uint8_t* __restrict mrow, int64_t cend, int64_t cols,
                      float scale, float b, float n, float off, at::BFloat16* h = nullptr, float* rsum = nullptr) {
  const float o2 = (float)((double)off * kLog2eD), o2lo = (float)((double)off * kLog2eD - o2);
  const FwdLanes<SSA, MASK> lanes{Vec(b * std::fabs(scale)), Vec(std::signbit(scale) ? -0.0f : 0.0f), Vec(n),
                                  Vec(scale * kLog2e), Vec(-o2), Vec(o2lo), Vec(two_pow_neg_small(o2lo))};
  Vec acc(0.0f), racc(0.0f);
  int64_t c = 0;
  if constexpr (SSA) {  // the exponent loop (above)
    for (; c + kW <= cend; c += kW) lanes.exponent(Vec::loadu(row + c)).store(row + c);
    if (c < cend) lanes.exponent(Vec::loadu(row + c, cend - c)).store(row + c, cend - c);
    c = 0;
  }
  // P from what the row holds: SSA's exponents (the loop above), softmax's raw scores
  const auto step = [&](Vec x, const uint8_t* m, int64_t cnt) __attribute__((always_inline)) {
    return lanes.weight(SSA ? x : lanes.exponent(x), m, cnt);
  };
#ifdef SSA_HF_FUSED_ROUNDING
  if constexpr (ROUND) {
    for (; c + 2 * kW <= cend; c += 2 * kW) {
      const Vec e0 = step(Vec::loadu(row + c), MASK ? mrow + c : nullptr, kW);
      const Vec e1 = step(Vec::loadu(row + c + kW), MASK ? mrow + c + kW : nullptr, kW);
      racc = round_store_bf16_pair(e0, e1, h + c, racc);
      if constexpr (EXACT) acc = acc + (e0 + e1);
    }
  }
#endif
  for (; c + kW <= cend; c += kW) {
    const Vec e = step(Vec::loadu(row + c), MASK ? mrow + c : nullptr, kW);
#ifdef SSA_HF_FUSED_ROUNDING
    if constexpr (ROUND) racc = racc + round_store_bf16(e, h + c, kW);
    else
#endif
      e.store(row + c);
    if constexpr (EXACT) acc = acc + e;
  }
  if (c < cend) {  // the tail: masked load and store, lanes past it zeroed for the sum
    const int64_t cnt = cend - c;
    const Vec e = Vec::set(Vec(0.0f), step(Vec::loadu(row + c, cnt), MASK ? mrow + c : nullptr, cnt), cnt);
#ifdef SSA_HF_FUSED_ROUNDING
    if constexpr (ROUND) racc = racc + round_store_bf16(e, h + c, cnt);
    else
#endif
      e.store(row + c, cnt);
    if constexpr (EXACT) acc = acc + e;
  }
  if constexpr (ROUND) {
    if (cols + (cols % 2) > cend) std::memset(h + cend, 0, sizeof(at::BFloat16) * (cols + (cols % 2) - cend));
    *rsum = vsum(racc);
  } else {
    if (cols > cend) std::memset(row + cend, 0, sizeof(float) * (cols - cend));
  }
  return EXACT ? vsum(acc) : 0.0f;
}

// The backward's pass on one vector: P from the saved row logsumexp, dS = P (dP - delta) g'(x) scale, and the
// terms of sum(dg g) for dL/dn.  P is formed exactly as the forward formed it (FwdLanes: b|x| from |v| b|scale|,
// the sign on n, one FMA for g2 - L2): with g2 ~ 100 a float's rounding is ~1e-5 of P, and a backward that
// rounds differently from the forward sees rows that no longer sum to the forward's delta (dn, db off by ~1%).
// (Only its log2 of tiny b|x| differs, vlog2_1p's SMALL_U: by up to 6e-8 n in g where |g| < 0.09 n.)
template <bool SSA, bool MASK>
struct BwdLanes {
  Vec bs, scale_sign, n, neg_L2, L2lo, two_neg_L2lo, d, kk, scale2;  // b |scale|, scale's sign bit, n, -L2, ...
  // SSA's first loop: from raw scores v, the exponent t of P = 2^t (returned), n sgn(x) log2(1 + b|x|) and
  // 1 / (1 + b|x|)
  inline __attribute__((always_inline)) Vec exponent(Vec v, Vec* signed_lg, Vec* recip_y) const {
    const Vec u = v.abs() * bs;
    const Vec y = u + Vec(1.0f);
    const Vec signed_n = n ^ ((v & Vec(-0.0f)) ^ scale_sign);  // n sgn(x), n of either sign (learned raw)
    Vec lg;
    const Vec t = vsigned_log2_minus<true>(signed_n, u, y, neg_L2, &lg);
    *signed_lg = signed_n * lg;
    *recip_y = recip_ge1(y);
    return t;
  }
  // the second: P, dS = P (dP - delta) g'(x) scale and the terms of sum(dg g) from the first loop's values
  inline __attribute__((always_inline)) void weights(Vec t, Vec signed_lg, Vec recip_y, Vec dp, const uint8_t* mrow,
                                                     int64_t cnt, Vec* p_out, Vec* ds_out, Vec* dgg) const {
    Vec p = vexp2_le0(t, L2lo, two_neg_L2lo);
    if constexpr (MASK) p = p & vvisible(mrow, cnt);
    const Vec dg = p * (dp - d);
    *p_out = p;
    *ds_out = dg * kk * recip_y;
    *dgg = dg * signed_lg;
  }
  // softmax: one loop
  inline __attribute__((always_inline)) void operator()(Vec v, Vec dp, const uint8_t* mrow, int64_t cnt, Vec* p_out,
                                                        Vec* ds_out) const {
    Vec p = vexp2_le0(at::vec::fmadd(v, scale2, neg_L2), L2lo, two_neg_L2lo);
    if constexpr (MASK) p = p & vvisible(mrow, cnt);
    *p_out = p;
    *ds_out = p * (dp - d) * kk;
  }
};

// SSA's backward runs two loops per chunk of a row, for the forward's reason: the exponents (over the
// row), signed logs and reciprocals (a chunk-sized scratch on the stack), then P, dS and the dg g terms from them
// (bench_score_pass.py on a Zen 4: 0.89 -> 0.72 ns/score built for AVX2, 0.57-0.60 -> 0.51-0.54 with AVX-512)
template <bool SSA, bool MASK>
inline float vbwd_row(float* __restrict row, float* __restrict drow, const uint8_t* __restrict mrow,
                      int64_t cend, float scale, float b, float n, float L, float d) {
  const float L2 = (float)((double)L * kLog2eD), L2lo = (float)((double)L * kLog2eD - L2);
  const BwdLanes<SSA, MASK> lanes{Vec(b * std::fabs(scale)), Vec(std::signbit(scale) ? -0.0f : 0.0f), Vec(n),
                                  Vec(-L2), Vec(L2lo), Vec(two_pow_neg_small(L2lo)), Vec(d), Vec(SSA ? n * b * scale : scale),
                                  Vec(scale * kLog2e)};
  Vec p, ds;
  if constexpr (!SSA) {
    int64_t c = 0;
    for (; c + kW <= cend; c += kW) {
      lanes(Vec::loadu(row + c), Vec::loadu(drow + c), MASK ? mrow + c : nullptr, kW, &p, &ds);
      p.store(row + c);
      ds.store(drow + c);
    }
    if (c < cend) {
      const int64_t cnt = cend - c;
      lanes(Vec::loadu(row + c, cnt), Vec::loadu(drow + c, cnt), MASK ? mrow + c : nullptr, cnt, &p, &ds);
      p.store(row + c, cnt);
      ds.store(drow + c, cnt);
    }
    return 0.0f;
  } else {
    constexpr int64_t kChunk = 32 * kW;  // a multiple of the lanes: only a row's last chunk has a tail
    alignas(64) float signed_lg[kChunk], recip_y[kChunk];
    Vec acc(0.0f), dgg, sl, ry;
    for (int64_t c0 = 0; c0 < cend; c0 += kChunk) {
      const int64_t c1 = std::min(cend, c0 + kChunk);
      int64_t c = c0;
      for (; c < c1; c += kW) {  // the scratch has room for a whole last vector: its lanes past c1 go unread
        const int64_t cnt = std::min(kW, c1 - c);
        lanes.exponent(Vec::loadu(row + c, cnt), &sl, &ry).store(row + c, cnt);  // at::vec: full vectors unmasked
        sl.store(signed_lg + (c - c0));
        ry.store(recip_y + (c - c0));
      }
      for (c = c0; c + kW <= c1; c += kW) {
        lanes.weights(Vec::loadu(row + c), Vec::loadu(signed_lg + (c - c0)), Vec::loadu(recip_y + (c - c0)),
                      Vec::loadu(drow + c), MASK ? mrow + c : nullptr, kW, &p, &ds, &dgg);
        p.store(row + c);
        ds.store(drow + c);
        acc = acc + dgg;
      }
      if (c < c1) {
        const int64_t cnt = c1 - c;
        lanes.weights(Vec::loadu(row + c, cnt), Vec::loadu(signed_lg + (c - c0)), Vec::loadu(recip_y + (c - c0)),
                      Vec::loadu(drow + c, cnt), MASK ? mrow + c : nullptr, cnt, &p, &ds, &dgg);
        p.store(row + c, cnt);
        ds.store(drow + c, cnt);
        acc = acc + Vec::set(Vec(0.0f), dgg, cnt);
      }
    }
    return vsum(acc) * kLn2;
  }
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

// sum of a[d] b[d] over d < n in fp32: the head dim's dot products (q and k norms, delta, q . dq).  Vector lanes
// and one log-depth horizontal sum; under `#pragma omp simd reduction` GCC summed its 32-64 lane partials one by
// one on every call, which at head dim 8 cost more than the products (a third of a bf16 backward's own time).
template <typename A, typename B>
inline float dot_f32(const A* a, const B* b, int64_t n) {
#ifdef SSA_HF_VECTOR
  if (vector_path()) {
    Vec acc(0.0f);
    for (int64_t d = 0; d < n; d += kW) {
      const int64_t count = std::min<int64_t>(kW, n - d);
      acc = at::vec::fmadd(load_as_float(a + d, count), load_as_float(b + d, count), acc);
    }
    return at::vec::vec_reduce_all<float>([](Vec x, Vec y) { return x + y; }, acc);
  }
#endif
  float acc = 0.0f;
  for (int64_t d = 0; d < n; ++d) acc += (float)a[d] * (float)b[d];
  return acc;
}

// The lanes of the vectorised passes in this build (0: only the portable passes were built).
inline int64_t vector_lanes() {
#ifdef SSA_HF_VECTOR
  return kW;
#else
  return 0;
#endif
}

// with h: P also rounded to bf16 into h (a zero past cols where cols is odd), the rounded weights' sum to *rsum;
// the float row then holds P only where the pass is not fused (portable and AVX2 builds), and where it is fused
// the exact sum is returned only if `exact` (else 0)
template <bool SSA, bool MASK>
inline float fwd_row_path(float* row, const uint8_t* mrow, int64_t cend, int64_t cols, float scale, float b,
                          float n, float off, at::BFloat16* h = nullptr, float* rsum = nullptr, bool exact = true) {
#ifdef SSA_HF_FUSED_ROUNDING
  if (h && vector_path())
    return exact ? vfwd_row<SSA, MASK, true>(row, mrow, cend, cols, scale, b, n, off, h, rsum)
                 : vfwd_row<SSA, MASK, true, false>(row, mrow, cend, cols, scale, b, n, off, h, rsum);
#endif
#ifdef SSA_HF_VECTOR
  const float l = vector_path() ? vfwd_row<SSA, MASK>(row, mrow, cend, cols, scale, b, n, off)
                                : fwd_row<SSA, MASK>(row, mrow, cend, cols, scale, b, n, off);
#else
  const float l = fwd_row<SSA, MASK>(row, mrow, cend, cols, scale, b, n, off);
#endif
  if (h) *rsum = round_row_sum(row, cols, h);  // the rounding as a second pass over the row
  return l;
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
                         float off, at::BFloat16* h = nullptr, float* rsum = nullptr, bool exact = true) {
  if (ssa) return r.mask ? fwd_row_path<true, true>(row, r.mask, r.cend, cols, scale, b, n, off, h, rsum, exact)
                         : fwd_row_path<true, false>(row, r.mask, r.cend, cols, scale, b, n, off, h, rsum, exact);
  return r.mask ? fwd_row_path<false, true>(row, r.mask, r.cend, cols, scale, b, n, off, h, rsum, exact)
                : fwd_row_path<false, false>(row, r.mask, r.cend, cols, scale, b, n, off, h, rsum, exact);
}

// The running maximum of one (batch, kv head)'s squared key norms over keys [0, j], for item_bounds' max|k|: a
// worker keeps it across its items of that head (items are handed out head by head), so each key's norm is computed
// once a call per worker, not once per query block.  NaN from the first key whose norm is not finite.
struct KeyNorms {
  int64_t head = -1, count = 0;
  std::vector<float> prefix_max;
  // max |k_j|^2 over j < kend of head `hd` (k: its keys, D wide)
  template <typename T>
  float upto(const T* k, int64_t D, int64_t hd, int64_t kend) {
    if (kend <= 0) return 0.0f;
    if (hd != head) {
      head = hd;
      count = 0;
    }
    if ((int64_t)prefix_max.size() < kend) prefix_max.resize(kend);
    float run = count > 0 ? prefix_max[count - 1] : 0.0f;
    for (int64_t j = count; j < kend; ++j) {
      const float acc = dot_f32(k + j * D, k + j * D, D);
      run = std::isfinite(acc) && !std::isnan(run) ? std::max(run, acc) : std::numeric_limits<float>::quiet_NaN();
      prefix_max[j] = run;
    }
    count = std::max(count, kend);
    return prefix_max[kend - 1];
  }
};

// |g| bound of each row of a work item (Cauchy-Schwarz): |g| <= |n| log(1 + b |scale| |q| max|k|), max|k|^2 =
// kmax2 over the keys the item can see (KeyNorms).  Written to m[rows]; returns false if a q or k element it reads
// is not finite (the caller then runs the torch path, which propagates inf/NaN as eager attention does).
template <typename T>
inline bool item_bounds(const Problem& P, const T* q, int64_t rows, int64_t R, float kmax2, int64_t hk, float* m) {
  bool ok = std::isfinite(kmax2);
  const float km = std::sqrt(kmax2) * std::fabs(P.scale);
  for (int64_t rr = 0; rr < rows; ++rr) {
    const T* qq = q + rr * P.D;
    const float x = std::sqrt(dot_f32(qq, qq, P.D)) * km;
    ok = ok && std::isfinite(x);
    m[rr] = P.b ? P.b[hk * P.G + rr / R] * x : x;
  }
  if (P.b && ok) {  // |n| log(1 + b x): glibc's log1pf per row took 1-2% of a small head dim's call
    int64_t rr = 0;
#ifdef SSA_HF_VECTOR
    if (vector_path())
      for (; rr + kW <= rows; rr += kW) {
        const Vec u = Vec::loadu(m + rr);
        (vlog2_1p(u, u + Vec(1.0f)) * Vec(kLn2)).store(m + rr);
      }
#endif
    for (; rr < rows; ++rr) m[rr] = std::log1p(m[rr]);
    for (rr = 0; rr < rows; ++rr) m[rr] *= std::fabs(P.n[hk * P.G + rr / R]);
  }
  return ok;
}
"""
