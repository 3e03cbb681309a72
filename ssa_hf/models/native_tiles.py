"""C++ source of the fused CPU kernel, part 4 of 6: tile products other than fp32 sgemm.  The small products sgemm
is slow at, as the kernel's own at::vec loops (scalar loops or sgemm on the portable path): the tile products for
head dims of 4, 8 and 16 with the dispatch between them and sgemm.  bf16 products through oneDNN's brgemm ukernel:
the VNNI packing of their operands, the call, and the probe that decides whether torch's brgemm takes them.
native_math.py is part 1 (it opens the anonymous namespace these live in), native_rows.py part 2, native_decode.py
part 3, native_kernels.py part 5, native_ops.py part 6; native.py joins and builds them.  Part of the remote-code
unit (a string, no imports)."""

TILES_SOURCE = r"""
// ---- Tile products for head dims of at most 16 (tiny models' 8-wide heads) ----
// MKL's sgemm is tuned for wide operands: with 8 output columns, the products that sum over the query rows
// (dV += P^T dO, dK += dS^T Q) or over the keys (dQ += dS K, the forward's P V) ran at 1/3 to 1/9 of these loops'
// speed (256 x 256 tile, D = 8, 1 thread, AVX-512 EPYC: 85 / 78 us against 9 / 23).  From D = 32 on sgemm is as
// fast or faster, and D = 16 gains less: only 4, 8 and 16 take these paths on AVX-512 (fwd+bwd 0.37, 0.45 and
// 0.85x the sgemm kernel's time), 4 and 8 on AVX2 (0.46, 0.50; at D = 16, 1.03: sgemm kept there).
#ifdef SSA_HF_VECTOR
// out[c][d] += sum_r a[r][c] b[r][d]: a [R x C] (stride lda), b [R x ND] (ldb), out [C x ND] (ldo).  Keys along the
// vector, one accumulator per output column (the block transposed in registers), added into out once per kW keys.
template <int ND>
inline void small_tn_add(int64_t R, int64_t C, const float* a, int64_t lda, const float* b, int64_t ldb, float* out,
                         int64_t ldo) {
  for (int64_t c0 = 0; c0 < C; c0 += kW) {
    const int64_t cnt = std::min<int64_t>(kW, C - c0);
    Vec acc[ND];
#pragma GCC unroll 16
    for (int d = 0; d < ND; ++d) acc[d] = Vec(0.0f);
    for (int64_t r = 0; r < R; ++r) {
      const Vec x = cnt == kW ? Vec::loadu(a + r * lda + c0) : Vec::loadu(a + r * lda + c0, cnt);
      const float* br = b + r * ldb;
#pragma GCC unroll 16
      for (int d = 0; d < ND; ++d) acc[d] = at::vec::fmadd(x, Vec(br[d]), acc[d]);
    }
    alignas(64) float t[ND * kW];
#pragma GCC unroll 16
    for (int d = 0; d < ND; ++d) acc[d].store(t + d * kW);
    for (int64_t l = 0; l < cnt; ++l) {
      float* o = out + (c0 + l) * ldo;
#pragma GCC unroll 16
      for (int d = 0; d < ND; ++d) o[d] += t[d * kW + l];
    }
  }
}

// out[r][d] (+)= sum_c a[r][c] bt[d][c]: a [R x C] (lda), bt [ND x C] (ldt) the tile transposed, out [R x ND] (ldo).
// For ND < kW: dot products along the keys, RB rows at a time sharing each load of bt, one reduction per output.
template <int ND>
inline void small_nn_dot(int64_t R, int64_t C, const float* a, int64_t lda, const float* bt, int64_t ldt, bool add,
                         float* out, int64_t ldo) {
  constexpr int RB = ND >= 8 ? 2 : 4;
  const auto plus = [](Vec x, Vec y) { return x + y; };
  int64_t r0 = 0;
  const auto rows = [&](auto nrows) {
    constexpr int NR = decltype(nrows)::value;
    Vec acc[NR][ND];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 16
      for (int d = 0; d < ND; ++d) acc[i][d] = Vec(0.0f);
    for (int64_t c0 = 0; c0 < C; c0 += kW) {
      const int64_t cnt = std::min<int64_t>(kW, C - c0);
      Vec x[NR];
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i)
        x[i] = cnt == kW ? Vec::loadu(a + (r0 + i) * lda + c0) : Vec::loadu(a + (r0 + i) * lda + c0, cnt);
#pragma GCC unroll 16
      for (int d = 0; d < ND; ++d) {
        const Vec y = cnt == kW ? Vec::loadu(bt + d * ldt + c0) : Vec::loadu(bt + d * ldt + c0, cnt);
#pragma GCC unroll 16
        for (int i = 0; i < NR; ++i) acc[i][d] = at::vec::fmadd(x[i], y, acc[i][d]);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) {
      float* o = out + (r0 + i) * ldo;
#pragma GCC unroll 16
      for (int d = 0; d < ND; ++d) {
        const float s = at::vec::vec_reduce_all<float>(plus, acc[i][d]);
        o[d] = add ? o[d] + s : s;
      }
    }
  };
  for (; r0 + RB <= R; r0 += RB) rows(std::integral_constant<int, RB>{});
  for (; r0 < R; ++r0) rows(std::integral_constant<int, 1>{});
}

// The same product for ND = kW: each output row is one vector; four rows at a time share each load of b, the tile
// itself ([C x ND], ldb), and a[r][c] is broadcast.
inline void small_nn_rows(int64_t R, int64_t C, const float* a, int64_t lda, const float* b, int64_t ldb, bool add,
                          float* out, int64_t ldo) {
  int64_t r0 = 0;
  const auto rows = [&](auto nrows) {
    constexpr int NR = decltype(nrows)::value;
    Vec acc[NR];
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) acc[i] = add ? Vec::loadu(out + (r0 + i) * ldo) : Vec(0.0f);
    for (int64_t c = 0; c < C; ++c) {
      const Vec y = Vec::loadu(b + c * ldb);
#pragma GCC unroll 16
      for (int i = 0; i < NR; ++i) acc[i] = at::vec::fmadd(Vec(a[(r0 + i) * lda + c]), y, acc[i]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < NR; ++i) acc[i].store(out + (r0 + i) * ldo);
  };
  for (; r0 + 4 <= R; r0 += 4) rows(std::integral_constant<int, 4>{});
  for (; r0 < R; ++r0) rows(std::integral_constant<int, 1>{});
}
#endif

// Which form the product out = a b takes for ND output columns: 0 sgemm, 1 dot products on the transposed tile
// (small_nn_dot), 2 broadcast rows on the tile itself (small_nn_rows).  The caller transposes the tile for form 1,
// once per tile rather than once per product.
inline int small_nn_form(int64_t ND) {
#ifdef SSA_HF_VECTOR
  if (!vector_path()) return 0;
  if (ND == kW) return 2;
  if (ND == 4 || ND == 8) return 1;
#endif
  (void)ND;
  return 0;
}


// out[R x ND] (+)= a[R x C] b[C x ND] (b [C x ND] contiguous; bt its transpose, stride ldt, where the form needs it)
inline void product_nn(int64_t R, int64_t C, int64_t ND, const float* a, int64_t lda, const float* b,
                       const float* bt, int64_t ldt, bool add, float* out, int64_t ldo) {
#ifdef SSA_HF_VECTOR
  switch (small_nn_form(ND)) {
    case 1:
      if (ND == 4) return small_nn_dot<4>(R, C, a, lda, bt, ldt, add, out, ldo);
      return small_nn_dot<8>(R, C, a, lda, bt, ldt, add, out, ldo);
    case 2:
      return small_nn_rows(R, C, a, lda, b, ND, add, out, ldo);
    default:
      break;
  }
#endif
  (void)bt; (void)ldt;
  gemm(false, false, R, ND, C, 1.0f, a, lda, b, ND, add ? 1.0f : 0.0f, out, ldo);
}

// out[C x ND] += a[R x C]^T b[R x ND] (b and out contiguous rows of ND)
inline void product_tn_add(int64_t R, int64_t C, int64_t ND, const float* a, int64_t lda, const float* b,
                           float* out) {
#ifdef SSA_HF_VECTOR
  if (vector_path()) {
    if (ND == 4) return small_tn_add<4>(R, C, a, lda, b, ND, out, ND);
    if (ND == 8) return small_tn_add<8>(R, C, a, lda, b, ND, out, ND);
    if (ND == 16 && kW == 16) return small_tn_add<16>(R, C, a, lda, b, ND, out, ND);  // not AVX2 (16 registers)
  }
#endif
  gemm(true, false, C, ND, R, 1.0f, a, lda, b, ND, 1.0f, out, ND);
}


// ---- bf16 tile products through oneDNN's brgemm ukernel ----
// at::native::cpublas::brgemm with is_vnni runs oneDNN's brgemm ukernel (AMX tiles where the CPU has them,
// AVX512-BF16 dot products elsewhere), bf16 x bf16 -> fp32, on a B operand in VNNI pairs: per block of up to 64
// columns, [K/2][w][2] with w the block's width rounded up to 16 and K rounded up to even with zeros.  (Without
// is_vnni torch falls back to its bf16 gemm, MKL's, which packs both operands on every call: 60-86 GFLOP/s on the
// tile shapes against the ukernel's 175-217 at 1 thread on a Zen 4.)  Packed operands are uint32 words, one VNNI
// pair each; A operands are rows of bf16 bits (uint16) or the bf16 inputs themselves, K even.
constexpr int64_t kVnniBlock = 64;
inline int64_t even(int64_t k) { return (k + 1) & ~int64_t(1); }
inline int64_t vnni_width(int64_t n) { return (n + 15) / 16 * 16; }
inline int64_t vnni_words(int64_t K, int64_t N) { return even(K) / 2 * vnni_width(N); }  // of a packed [K x N]

// The output's residual: what rounding a bf16 output element's fp32 value dropped, in 1/256ths of the element's bf16
// ulp, as int8 (8 more bits of mantissa, one byte per element).  The ulp is read from the bf16 bits alone (exponent
// field e: 2^(max(e, 8) - 134); below 2^-119 it is coarser than the true ulp), so the backward recovers it exactly.
// Branch-free on the bits, so that the loops over a row below vectorise: scalar, with a division an element, writing
// the residual took a quarter of a head-dim-8 forward's own code (outside the tile products and the row passes).
inline float float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float bf16_ulp(uint16_t h) {
  return float_of_bits((std::max<uint32_t>((h >> 7) & 0xFFu, 8u) - 7u) << 23);
}
// the residuals of the row x * scale written to bf16 as o (clamped to [-128, 127]; a NaN difference: 127)
inline void write_residual(const float* x, float scale, const at::BFloat16* o, int64_t n, int8_t* res) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) {
    const uint16_t h = o[d].x;
    const float r = (x[d] * scale - float_of_bits((uint32_t)h << 16)) * 256.0f / bf16_ulp(h);
    res[d] = (int8_t)std::nearbyint(std::max(-128.0f, std::min(127.0f, r)));
  }
}
inline float bf16_refined(uint16_t h, int8_t residual) {
  return float_of_bits((uint32_t)h << 16) + (float)residual * (bf16_ulp(h) * (1.0f / 256.0f));
}

// One row's delta = rowsum(out * dout), out refined by its residual where the forward kept one (bf16): from the
// bf16 output alone, the error of delta, which SSA's g' multiplies by up to n b, took dq's largest error to 1.8x
// SDPA's own
template <typename T>
inline float row_delta(const T* o, const int8_t* res, const T* dd, int64_t Dv) {
  if constexpr (std::is_same_v<T, at::BFloat16>) {
    if (res) {  // in order, one element at a time: through a buffer, the vector loads stalled on its fresh stores
      float acc = 0.0f;
      for (int64_t d = 0; d < Dv; ++d) acc += bf16_refined(o[d].x, res[d]) * (float)dd[d];
      return acc;
    }
  }
  return dot_f32(o, dd, Dv);
}

// B [K x N] bf16 rows (stride ldb), packed: pairs along K
inline void vnni_pack(const at::BFloat16* B, int64_t K, int64_t N, int64_t ldb, uint32_t* dst) {
  const int64_t Ke = even(K);
  for (int64_t n0 = 0; n0 < N; n0 += kVnniBlock) {
    const int64_t nn = std::min(kVnniBlock, N - n0), w = vnni_width(nn);
    for (int64_t k = 0; k < Ke; k += 2) {
      uint32_t* o = dst + n0 * Ke / 2 + (k / 2) * w;
      const at::BFloat16* r0 = B + k * ldb + n0;
      if (k + 1 < K) {
        const at::BFloat16* r1 = r0 + ldb;
#pragma omp simd
        for (int64_t c = 0; c < nn; ++c) o[c] = (uint32_t)r0[c].x | ((uint32_t)r1[c].x << 16);
      } else {
#pragma omp simd
        for (int64_t c = 0; c < nn; ++c) o[c] = (uint32_t)r0[c].x;
      }
      std::fill(o + nn, o + w, 0u);
    }
  }
}

// B = S^T for S [N x K] bf16 rows (stride lds), K even, packed: each pair is one 32-bit word of a row of S, so the
// packing is a transpose of 32-bit words (at::vec's float transpose moves them bit for bit)
inline void vnni_pack_t(const at::BFloat16* S, int64_t N, int64_t K, int64_t lds, uint32_t* dst) {
  const int64_t P2 = K / 2;
  for (int64_t n0 = 0; n0 < N; n0 += kVnniBlock) {
    const int64_t nn = std::min(kVnniBlock, N - n0), w = vnni_width(nn);
    uint32_t* blk = dst + n0 * P2;
    at::vec::transpose_mxn<float>(reinterpret_cast<const float*>(S + n0 * lds), lds / 2,
                                  reinterpret_cast<float*>(blk), w, (int)nn, (int)P2);
    if (nn < w)
      for (int64_t p = 0; p < P2; ++p) std::fill(blk + p * w + nn, blk + p * w + w, 0u);
  }
}

// The forward's K^T and V tiles of one (batch, kv head) for the ukernel, packed once for a worker's items of that
// head (items come head by head) instead of once per query block: tile t (keys [t bk, t bk + bk)) packed whole when
// first needed, at t * kwords, t * vwords.  A V tile read to an odd C short of the tile is packed again to C keys
// (the products read even widths; the next key's value must not meet P's zero pad).
struct PackedHead {
  struct Tiles {
    const uint32_t *kT, *v;
    int64_t kT_cols, v_keys;  // the widths they were packed to (gemm_vnni's Np, Kp)
  };
  std::vector<uint32_t> kT, vN, vN1;
  int64_t D = 0, Dv = 0, bk = 0, kwords = 0, vwords = 0, head = -1, packed = 0;  // packed: keys from key 0

  void size(int64_t d, int64_t dv, int64_t block) {
    D = d, Dv = dv, bk = block, kwords = vnni_words(D, bk), vwords = vnni_words(bk, Dv);
    vN1.resize(vwords);
  }
  // keys [j0, j0 + C) of head hd, whose keys and values start at k and v (Lk of them)
  Tiles tiles(const at::BFloat16* k, const at::BFloat16* v, int64_t Lk, int64_t hd, int64_t j0, int64_t C) {
    const int64_t t = j0 / bk, full = std::min(bk, Lk - j0);
    if (hd != head) head = hd, packed = 0;
    if (packed < j0 + C) {
      if ((int64_t)kT.size() < (t + 1) * kwords) kT.resize((t + 1) * kwords), vN.resize((t + 1) * vwords);
      vnni_pack_t(k + j0 * D, full, D, D, kT.data() + t * kwords);
      vnni_pack(v + j0 * Dv, full, Dv, Dv, vN.data() + t * vwords);
      packed = j0 + full;
    }
    if (C % 2 && C < full) {
      vnni_pack(v + j0 * Dv, C, Dv, Dv, vN1.data());
      return {kT.data() + t * kwords, vN1.data(), full, C};
    }
    return {kT.data() + t * kwords, vN.data() + t * vwords, full, full};
  }
};

// fp32 rows r0 and r1 (zeros for r1 = nullptr) rounded to bf16 as pair p of a packed [Ke x N] operand hi; with
// LO the rounding remainders (x - hi, rounded) as the same pair of lo, so that hi + lo carries 16 bits of x's
// mantissa.  Called right after the rows' pass, while they are in L1.
template <bool LO>
inline void vnni_pack_f32_pair(const float* r0, const float* r1, int64_t N, int64_t Ke, int64_t p, uint32_t* hi,
                               uint32_t* lo) {
  const float* r1s = r1 ? r1 : r0;
  const uint32_t keep = r1 ? 0xFFFFu : 0u;
  for (int64_t n0 = 0; n0 < N; n0 += kVnniBlock) {
    const int64_t nn = std::min(kVnniBlock, N - n0), w = vnni_width(nn);
    const int64_t off = n0 * Ke / 2 + p * w;
    uint32_t* h = hi + off;
    uint32_t* l = LO ? lo + off : nullptr;
    const float *x0 = r0 + n0, *x1 = r1s + n0;
#pragma omp simd
    for (int64_t c = 0; c < nn; ++c) {
      const uint32_t a = bf16_bits(x0[c]), b = bf16_bits(x1[c]) & keep;
      h[c] = a | (b << 16);
      if constexpr (LO) {
        const uint32_t la = bf16_bits(x0[c] - bf16_value(a)), lb = bf16_bits(x1[c] - bf16_value(b)) & keep;
        l[c] = la | (lb << 16);
      }
    }
    std::fill(h + nn, h + w, 0u);
    if constexpr (LO) std::fill(l + nn, l + w, 0u);
  }
}


// rows of X [M x K] fp32 (stride ldx) rounded to bf16 [M x even(K)] (stride ld, a zero column where K is odd)
inline void round_rows(const float* X, int64_t M, int64_t K, int64_t ldx, at::BFloat16* hi, int64_t ld) {
  for (int64_t m = 0; m < M; ++m) round_row_sum(X + m * ldx, K, hi + m * ld);
}

// dst [D x even(R)] (stride ldd) = src [R x D]^T (bf16 rows, stride lds), a zero column where R is odd: at::vec's
// 32 x 32 block transposes (AVX-512 shuffles; a scalar loop elsewhere)
inline void transpose_rows_bf16(const at::BFloat16* src, int64_t R, int64_t D, int64_t lds, at::BFloat16* dst,
                                int64_t ldd) {
  for (int64_t r0 = 0; r0 < R; r0 += 32)
    for (int64_t d0 = 0; d0 < D; d0 += 32)
      at::vec::transpose_mxn<at::BFloat16>(src + r0 * lds + d0, lds, dst + d0 * ldd + r0, ldd,
                                           (int)std::min<int64_t>(32, R - r0), (int)std::min<int64_t>(32, D - d0));
  if (R % 2)
    for (int64_t d = 0; d < D; ++d) dst[d * ldd + R].x = 0;
}

// C[M x N] (+)= A[M x K] B for A bf16 rows (stride lda, even(K) wide, zero past K) and B packed by the above as
// [Kp x Np] (0: as K, N), of which the products read the first K rows and N columns (K even where K < Kp)
inline void gemm_vnni(int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const uint32_t* B, bool add,
                      float* C, int64_t ldc, int64_t Np = 0, int64_t Kp = 0) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!add)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  const int64_t Ke = even(K), Kpe = even(Kp ? Kp : K), Npk = Np ? Np : N;
  const auto* a = static_cast<const at::BFloat16*>(A);
  for (int64_t n0 = 0; n0 < N; n0 += kVnniBlock) {
    const int64_t nn = std::min(kVnniBlock, N - n0);
    at::native::cpublas::brgemm(M, nn, Ke, lda, vnni_width(std::min(kVnniBlock, Npk - n0)), ldc, add, a,
                                reinterpret_cast<const at::BFloat16*>(B + n0 * Kpe / 2), C + n0, /*is_vnni=*/true);
  }
  t_ukernel_used = true;
}

// fp32 C[M x N] (+)= A[M x K] B[K x N], all row-major with strides, through torch's brgemm (the ukernel where it
// runs, its sgemm elsewhere: f32_brgemm)
inline void gemm_f32_brgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                            int64_t ldb, bool add, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!add)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  at::native::cpublas::brgemm(M, N, K, lda, ldb, ldc, add, A, B, C, /*is_vnni=*/false);
  t_ukernel_used = true;
}

// dst [N x M] (stride ldd) = src [M x N]^T (stride lds)
inline void transpose_f32(const float* src, int64_t M, int64_t N, int64_t lds, float* dst, int64_t ldd) {
  at::vec::transpose_mxn<float>(src, lds, dst, ldd, (int)M, (int)N);
}

// One probe product C = A B, then C += A B, against the exact values (small integers: exact in bf16 and fp32).
inline bool vnni_probe_product(int64_t M, int64_t N, int64_t K) {
  std::vector<at::BFloat16> A(M * K), B(K * N);
  for (int64_t i = 0; i < M * K; ++i) A[i] = at::BFloat16((float)(i % 5) - 2.0f);
  for (int64_t i = 0; i < K * N; ++i) B[i] = at::BFloat16((float)(i % 7) - 3.0f);
  std::vector<uint32_t> packed(vnni_words(K, N));
  vnni_pack(B.data(), K, N, N, packed.data());
  std::vector<float> C(M * N, 7.0f);
  gemm_vnni(M, N, K, A.data(), even(K), packed.data(), false, C.data(), N);
  gemm_vnni(M, N, K, A.data(), even(K), packed.data(), true, C.data(), N);
  bool ok = true;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float want = 0.0f;
      for (int64_t k = 0; k < K; ++k) want += (float)A[i * K + k] * (float)B[k * N + j];
      ok = ok && C[i * N + j] == 2.0f * want;
    }
  return ok;
}

// Whether this torch's brgemm takes the packing above here: products with a full and a 6-wide tail column block
// (operand stride 16), a 40-wide block (stride 48), odd row counts and reduction lengths of 6 and 14, once (false
// without torch's ukernel or AVX-512, or if a oneDNN changed the layout; then the fp32 products run).  Asked again
// while torch's oneDNN is off.
bool vnni_ukernel_works() {
  static std::atomic<int> state{-1};
  const int known = state.load(std::memory_order_relaxed);
  if (known >= 0) return known == 1;
  if (!at::globalContext().userEnabledMkldnn()) return false;
  bool ok;
  try {
    ok = vnni_probe_product(3, 70, 6) && vnni_probe_product(17, 40, 14);
    at::native::cpublas::brgemm_release(true);
    t_ukernel_used = false;
  } catch (...) {
    ok = false;
  }
  state.store(ok ? 1 : 0);
  return ok;
}

// How bf16 tile products run: 1 through oneDNN's brgemm ukernel on VNNI-packed operands (native_tiles.py,
// `gemm_vnni`; AMX tiles where the CPU has them, AVX512-BF16 dot products elsewhere), 0 as fp32 sgemm on
// converted tiles.  -1 (default): the ukernel where the CPU multiplies bf16 natively (AVX512-BF16 or AMX-BF16, by
// cpuid), torch's oneDNN is enabled and the probe passes; forcing 1 still needs the last two (tests run both).
std::atomic<int> g_bf16_brgemm{-1};

inline bool cpu_multiplies_bf16() {
#if defined(__GNUC__) && defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool avx512_bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
  const bool amx_bf16 = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
  return avx512_bf16 || amx_bf16;
#else
  return false;
#endif
}

inline bool bf16_brgemm() {
  const int mode = g_bf16_brgemm.load(std::memory_order_relaxed);
  // torch.backends.mkldnn.enabled = False turns torch's ukernel off, and brgemm would then refuse VNNI operands
  if (mode == 0 || !at::globalContext().userEnabledMkldnn() || !vnni_ukernel_works()) return false;
  static const bool native_bf16 = cpu_multiplies_bf16();
  return mode == 1 || native_bf16;
}

// Whether oneDNN's JIT may use AVX-512 here: the CPU has avx512f/bw/vl/dq (oneDNN's avx512_core) and
// ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), if set, does not cap it below (benchmarks emulate AVX2 machines so)
inline bool onednn_avx512() {
#if defined(__GNUC__) && defined(__x86_64__)
  const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!cap) cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (!cap || !*cap) return cpu;
  std::string c(cap);
  for (auto& ch : c) ch = (char)std::toupper((unsigned char)ch);
  return cpu && (c == "ALL" || c.find("AVX512") != std::string::npos || c.find("AMX") != std::string::npos);
#else
  return false;
#endif
}

// fp32 tile products: 1 through torch's cpublas::brgemm on float (oneDNN's brgemm ukernel on x86 with AVX2 while
// torch's oneDNN is on, else its sgemm: correct either way), 0 MKL's sgemm and the small-head-dim loops.  At 1
// thread on a Zen 4 the AVX-512 ukernel measured 107-112 GFLOP/s on the tile shapes, sgemm 77-82; with oneDNN
// capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, MKL at AVX2 too) forward and fwd+bwd were 1.05-1.22x slower through it
// than through sgemm.  -1 (default): the ukernel where oneDNN runs AVX-512 (tests run both).
std::atomic<int> g_f32_brgemm{-1};

inline bool f32_brgemm() {
  const int mode = g_f32_brgemm.load(std::memory_order_relaxed);
  if (mode == 0 || !at::globalContext().userEnabledMkldnn()) return false;
  static const bool avx512 = onednn_avx512();
  return mode == 1 || avx512;
}
"""
