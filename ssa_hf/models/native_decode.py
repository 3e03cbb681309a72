"""C++ source of the fused CPU kernel, part 3 of 6: the decoding steps' few-row products (work items of at most
kFewRows query rows: one row per query head of a key/value head), q K^T and P V, as scalar loops (the portable path)
and at::vec loops.  See native_math.py (part 1) for the rest of the layout; native.py joins the parts and builds
them.  Part of the remote-code unit (a string, no imports)."""

DECODE_SOURCE = r"""
// Decoding steps have one query row per head (G per work item): plain dot products and axpys beat a BLAS call on a
// 1-row matrix.  These scalar loops are the portable path; the vectorised ones follow.
constexpr int64_t kFewRows = 4;

template <typename T>
inline void few_rows_scores_portable(const T* q, const T* k, int64_t rows, int64_t C, int64_t D, float* S,
                                     int64_t lds) {
  for (int64_t c = 0; c < C; ++c) {
    const T* kc = k + c * D;
    for (int64_t r = 0; r < rows; ++r) {
      const T* qr = q + r * D;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t d = 0; d < D; ++d) acc += (float)qr[d] * (float)kc[d];
      S[r * lds + c] = acc;
    }
  }
}

template <typename T>
inline void few_rows_values_portable(const float* S, int64_t lds, const T* v, int64_t rows, int64_t C, int64_t Dv,
                                     bool first, float* acc) {
  if (first) std::fill(acc, acc + rows * Dv, 0.0f);
  for (int64_t c = 0; c < C; ++c) {
    const T* vc = v + c * Dv;
    for (int64_t r = 0; r < rows; ++r) {
      const float p = S[r * lds + c];
      float* ar = acc + r * Dv;
#pragma omp simd
      for (int64_t d = 0; d < Dv; ++d) ar[d] += p * (float)vc[d];
    }
  }
}

#ifdef SSA_HF_VECTOR
// The sums of a[0..7]'s lanes, in order, as one vector: a hadd tree over the eight accumulators (each folded to
// 256 bits first on AVX-512), nine operations for eight keys where a reduction per key took three shuffles, three
// adds and a scalar store
inline __attribute__((always_inline)) __m256 sum8(const Vec* a) {
  __m256 h[8];
  for (int i = 0; i < 8; ++i) {
#if defined(CPU_CAPABILITY_AVX512)
    const __m512 x = a[i];
    h[i] = _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
#else
    h[i] = a[i];
#endif
  }
  // hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, x6+x7, y4+y5, y6+y7]: two rounds leave the four keys' sums of
  // each 128-bit half, the halves added last
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(h[4], h[5]), _mm256_hadd_ps(h[6], h[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// S = q K^T for a few query rows: keys eight at a time, one accumulator per key (eight independent FMA chains),
// the eight sums stored as one vector; a key tail of fewer than eight takes one reduction per key.
template <typename T>
inline void vfew_rows_scores(const T* q, const T* k, int64_t rows, int64_t C, int64_t D, float* S, int64_t lds) {
  const int64_t full = D - D % kW, tail = D % kW;
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) {
    const T* kc = k + c * D;
    for (int64_t r = 0; r < rows; ++r) {
      const T* qr = q + r * D;
      Vec acc[8];
      for (int j = 0; j < 8; ++j) acc[j] = Vec(0.0f);
      for (int64_t d = 0; d < full; d += kW) {
        const Vec qd = load_as_float(qr + d, kW);
        for (int j = 0; j < 8; ++j) acc[j] = at::vec::fmadd(qd, load_as_float(kc + j * D + d, kW), acc[j]);
      }
      if (tail) {
        const Vec qd = load_as_float(qr + full, tail);
        for (int j = 0; j < 8; ++j) acc[j] = at::vec::fmadd(qd, load_as_float(kc + j * D + full, tail), acc[j]);
      }
      _mm256_storeu_ps(S + r * lds + c, sum8(acc));
    }
  }
  for (; c < C; ++c)  // the last keys one at a time
    for (int64_t r = 0; r < rows; ++r) S[r * lds + c] = dot_f32(q + r * D, k + c * D, D);
}

// acc += P V over NV vectors of the output from column d (the last one `last` lanes wide) for R rows together:
// the R x NV accumulators stay in registers while the keys stream past, each key's V vectors loaded once for all
// rows.  Where R x NV < 8 the keys go in two interleaved halves with their own accumulators: a core keeps about
// eight FMAs in flight (two ports, four cycles each); the loop before, row by row, ran one to four chains (one per
// 16-lane vector at D = 32).
template <int R, int NV, typename T>
inline void few_rows_values_block(const float* S, int64_t lds, const T* v, int64_t C, int64_t Dv, int64_t d,
                                  int64_t last, bool first, float* acc) {
  constexpr int U = R * NV >= 8 ? 1 : 2;
  Vec a[U][R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) {
      const int64_t cnt = j == NV - 1 ? last : kW;
      a[0][r][j] = first ? Vec(0.0f) : Vec::loadu(acc + r * Dv + d + j * kW, cnt);
      for (int u = 1; u < U; ++u) a[u][r][j] = Vec(0.0f);
    }
  const auto key = [&](int u, int64_t c) __attribute__((always_inline)) {
    const T* vc = v + c * Dv + d;
    Vec x[NV];
    for (int j = 0; j < NV; ++j) x[j] = load_as_float(vc + j * kW, j == NV - 1 ? last : kW);
    for (int r = 0; r < R; ++r) {
      const Vec p(S[r * lds + c]);
      for (int j = 0; j < NV; ++j) a[u][r][j] = at::vec::fmadd(p, x[j], a[u][r][j]);
    }
  };
  int64_t c = 0;
  for (; c + U <= C; c += U)
    for (int u = 0; u < U; ++u) key(u, c + u);
  for (; c < C; ++c) key(0, c);
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) {
      Vec s = a[0][r][j];
      for (int u = 1; u < U; ++u) s = s + a[u][r][j];
      s.store(acc + r * Dv + d + j * kW, j == NV - 1 ? last : kW);
    }
}

template <int R, typename T>
inline void few_rows_values_rows(const float* S, int64_t lds, const T* v, int64_t C, int64_t Dv, bool first,
                                 float* acc) {
  int64_t d = 0;
  for (; d + 4 * kW <= Dv; d += 4 * kW) few_rows_values_block<R, 4>(S, lds, v, C, Dv, d, kW, first, acc);
  const int64_t rest = Dv - d, nv = (rest + kW - 1) / kW, last = rest - (nv - 1) * kW;
  if (nv == 1) few_rows_values_block<R, 1>(S, lds, v, C, Dv, d, last, first, acc);
  else if (nv == 2) few_rows_values_block<R, 2>(S, lds, v, C, Dv, d, last, first, acc);
  else if (nv == 3) few_rows_values_block<R, 3>(S, lds, v, C, Dv, d, last, first, acc);
}

// The rows in blocks whose accumulators fit the registers: 16 vector registers on AVX2 hold 3 rows x 4 vectors
// (and a V vector or two), 32 on AVX-512 hold all four rows.
template <typename T>
inline void vfew_rows_values(const float* S, int64_t lds, const T* v, int64_t rows, int64_t C, int64_t Dv,
                             bool first, float* acc) {
  constexpr int64_t kBlockRows = kW == 16 ? 4 : 3;
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const float* s = S + r0 * lds;
    float* ar = acc + r0 * Dv;
    switch (std::min(kBlockRows, rows - r0)) {
      case 1: few_rows_values_rows<1>(s, lds, v, C, Dv, first, ar); break;
      case 2: few_rows_values_rows<2>(s, lds, v, C, Dv, first, ar); break;
      case 3: few_rows_values_rows<3>(s, lds, v, C, Dv, first, ar); break;
      default: few_rows_values_rows<4>(s, lds, v, C, Dv, first, ar); break;
    }
  }
}
#endif

template <typename T>
inline void few_rows_scores(const T* q, const T* k, int64_t rows, int64_t C, int64_t D, float* S, int64_t lds) {
#ifdef SSA_HF_VECTOR
  if (vector_path()) return vfew_rows_scores(q, k, rows, C, D, S, lds);
#endif
  few_rows_scores_portable(q, k, rows, C, D, S, lds);
}

template <typename T>
inline void few_rows_values(const float* S, int64_t lds, const T* v, int64_t rows, int64_t C, int64_t Dv,
                            bool first, float* acc) {
#ifdef SSA_HF_VECTOR
  if (vector_path()) return vfew_rows_values(S, lds, v, rows, C, Dv, first, acc);
#endif
  few_rows_values_portable(S, lds, v, rows, C, Dv, first, acc);
}
"""
