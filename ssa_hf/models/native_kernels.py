"""C++ source of the fused CPU kernel, part 5 of 6: the forward and backward kernels over (batch, key/value head,
block) work items (part 5 closes the anonymous namespace part 1 opens).  native_math.py is part 1, native_rows.py
part 2 (the vectorised per-score passes), native_decode.py part 3 (the decoding steps' few-row products),
native_tiles.py part 4 (the small-head-dim and bf16 ukernel tile products), native_ops.py part 6 (the entry points
and the Python bindings); native.py joins and builds them.  Part of the remote-code unit (a string, no imports)."""

KERNEL_SOURCE = r"""
// Products of bf16 tiles through the ukernel need even head dims (VNNI pairs along D read q, k rows as they are);
// at the widths of native_tiles.py's small-head-dim loops those stay (fp32 on converted tiles).
constexpr int64_t kUkernelMinDim = 16;
// The forward's P V takes P rounded to bf16 once and divides each row by the sum of the rounded weights (the lse
// stays exact), so rounding only perturbs the weights' ratios.  Divided by the exact sum (SDPA's way; its largest
// weight, exp(0) = 1, is exact, which this kernel's fixed offset does not give), the output's error was 1.9-2.2x
// SDPA's.  The backward's dV += P^T dO takes P as bf16 hi + lo parts: rounded once, dV's error was 1.7x SDPA's.
constexpr bool kSplitP = true;

// The bf16 ukernel forward's rows per work item (block_q is an upper bound): at 128 rather than 256 the call
// measured 0.93-1.02x the time at the main, 114M and GQA shapes and 0.3 MB less peak memory at B=4 H=8 L=2048
// D=64 on a Zen 4 (docs/performance.md); the float32 and converted-tile forwards measured no gain (fp16 lost).
constexpr int64_t kUkernelForwardRows = 128;

// The causal backward's tiles: at most this many query positions and keys (block_q, block_k are upper bounds).
// The diagonal tiles, half of whose scores are hidden, halve in size: against 256 x 256 the backward took 0.94-1.0x
// the time at the main, 114M and GQA shapes in every dtype and 0.81-0.89x at the tiny presets'; without a causal
// mask (nothing to skip) 0.99-1.05x, so it keeps its tiles (docs/performance.md).
constexpr int64_t kCausalBackwardTile = 128;

inline bool bf16_ukernel(const Problem& P) {
  return P.dtype == at::kBFloat16 && P.D % 2 == 0 && P.Dv % 2 == 0 && std::min(P.D, P.Dv) >= kUkernelMinDim &&
         bf16_brgemm();
}

// float32 tile products through the ukernel (f32_brgemm) at every head dim: at 1 x 4 x 1024 it measured 0.87-1.01x
// the small-head-dim loops' time at D = 4, 0.83-0.92x at D = 8, 0.30-0.42x sgemm's at D = 5 (those loops and
// sgemm run where the ukernel does not).  The same for bf16 and fp16 tiles converted to float32 (every reduced
// dtype call the bf16 ukernel does not take).
inline bool f32_ukernel(const Problem& P) {
  return (P.dtype == at::kFloat || (P.dtype != at::kDouble && !bf16_ukernel(P))) && f32_brgemm();
}

// T: the element type of q, k, v and out: float; at::BFloat16 (tile products bf16 x bf16 -> fp32 through the
// ukernel where bf16_brgemm(), else as at::Half); or at::Half (the item's query rows and each key tile converted
// to fp32 for sgemm: CPUs without AVX512-FP16 or AMX-FP16 have no fp16 dot product, and brgemm's fp16 fallback
// measured half sgemm's speed here).  Statistics and accumulation are fp32; P V without the ukernel is an fp32
// product from a float copy of the value tile (the tile copy costs 1/rows of its product).
template <typename T>
struct Forward {
  static constexpr bool kBf16 = std::is_same_v<T, at::BFloat16>;
  static constexpr bool kHalf = std::is_same_v<T, at::Half>;
  static constexpr bool kReduced = kBf16 || kHalf;
  const Problem& P;
  T* out;       // [B, H, Lq, Dv]
  float* lse;   // [B, H, Lq] or nullptr
  int8_t* res;  // bf16 with lse: out's residual (write_residual), [B, H, Lq, Dv]; else nullptr
  int64_t nqb;
  std::atomic<bool>* nonfinite;  // set when a q or k element (bounded rows) or a visible score is not finite

  struct Scratch {
    std::vector<T> q;
    std::vector<float> s, acc, m, l, lr, alpha;  // lr: sums of P's rounded weights (the ukernel's P V)
    std::vector<float> vt;         // bf16, fp16 without the ukernel: a value tile as float ([bk x Dv])
    std::vector<float> qf, kf;     // the same: the item's query rows and a key tile as float
    std::vector<float> vtt;        // a value tile transposed ([Dv x bk]) where P V reads it so (small_nn_form)
    PackedHead packed;             // the ukernel: K^T and V tiles of the worker's current (batch, kv head)
    std::vector<at::BFloat16> ph;  // the ukernel: P's rows in bf16
    KeyNorms norms;                // the bounds' max |k| of the worker's current (batch, kv head)
    std::vector<float> kTf;            // the fp32 ukernel: a key tile transposed ([D x bk])
    const bool uk, ukf;  // the worker's kind of products, fixed with the sizes here (a mode may change meanwhile)
    explicit Scratch(const Forward& f) : uk(f.ukernel()), ukf(f32_ukernel(f.P)) {
      if (ukf) kTf.resize(f.P.D * f.P.bk);
      if (small_nn_form(f.P.Dv) == 1) vtt.resize(f.P.Dv * f.P.bk);
      const int64_t rows = f.P.G * f.P.bq;
      q.resize(rows * f.P.D); s.resize(rows * f.P.bk); acc.resize(rows * f.P.Dv);
      m.resize(rows); l.resize(rows); lr.resize(rows); alpha.resize(rows);
      if (uk) {
        packed.size(f.P.D, f.P.Dv, f.P.bk);
        ph.resize(rows * even(f.P.bk));
      } else if (kReduced) {
        vt.resize(f.P.bk * f.P.Dv); qf.resize(rows * f.P.D); kf.resize(f.P.bk * f.P.D);
      }
    }
  };

  bool ukernel() const { return kBf16 && bf16_ukernel(P); }

  const T* qp() const { return P.q<T>(); }
  const T* kp() const { return P.k<T>(); }
  const T* vp() const { return P.v<T>(); }

  void operator()(int64_t item, Scratch& w) const {
    // head by head (a worker's K, V tiles and key norms serve its next items of the same head), heavy items first
    // within a head: the last query blocks see the most keys under a causal mask
    const int64_t bhk = item / nqb, qb = nqb - 1 - item % nqb;
    const int64_t bi = bhk / P.Hkv, hk = bhk % P.Hkv;
    const int64_t i0 = qb * P.bq, R = std::min(P.bq, P.Lq - i0), rows = P.G * R;
    const T* kb = kp() + bhk * P.Lk * P.D;
    const T* vb = vp() + bhk * P.Lk * P.Dv;
    const int64_t kend = P.causal ? std::min(P.Lk, i0 + R) : P.Lk;
    // rows ordered (group head g, position r): the G query heads that share this key/value head go through
    // each key tile together
    for (int64_t g = 0; g < P.G; ++g) {
      const int64_t h = hk * P.G + g;
      std::memcpy(w.q.data() + g * R * P.D, qp() + ((bi * P.H + h) * P.Lq + i0) * P.D, sizeof(T) * R * P.D);
    }
    const bool uk = w.uk, uk_pv = uk && rows > kFewRows, ukf = w.ukf;
    if (kReduced && !uk) at::vec::convert(w.q.data(), w.qf.data(), rows * P.D);
    // Rows whose bound is small enough use it as a fixed offset (no running maximum); computed here, inside the
    // call's one parallel region, since every barrier costs a scheduler slice on a busy machine
    bool fixed = P.bounded;
    if (fixed) {
      if (!item_bounds(P, w.q.data(), rows, R, w.norms.upto(kb, P.D, bhk, kend), hk, w.m.data())) {
        *nonfinite = true;
        return;
      }
      for (int64_t rr = 0; rr < rows; ++rr) fixed = fixed && w.m[rr] <= P.fixed_max;
    }
    if (!fixed) std::fill(w.m.begin(), w.m.begin() + rows, -kInf);
    std::fill(w.l.begin(), w.l.begin() + rows, 0.0f);
    std::fill(w.lr.begin(), w.lr.begin() + rows, 0.0f);
    bool first = true;
    for (int64_t j0 = 0; j0 < kend; j0 += P.bk) {
      const int64_t C = std::min(P.bk, kend - j0);
      float* S = w.s.data();
      PackedHead::Tiles tiles{};
      if (rows <= kFewRows) {
        few_rows_scores(w.q.data(), kb + j0 * P.D, rows, C, P.D, S, P.bk);
      } else if (uk) {
        if constexpr (kBf16) {
          tiles = w.packed.tiles(kb, vb, P.Lk, bhk, j0, C);
          gemm_vnni(rows, C, P.D, w.q.data(), P.D, tiles.kT, false, S, P.bk, tiles.kT_cols);
        }
      } else {  // float32 products (bf16 and fp16 on the converted query rows and key tile)
        const float *qf, *kf;
        if constexpr (kReduced) {
          at::vec::convert(kb + j0 * P.D, w.kf.data(), C * P.D);
          qf = w.qf.data();
          kf = w.kf.data();
        } else {
          qf = w.q.data();
          kf = kb + j0 * P.D;
        }
        if (ukf) {
          transpose_f32(kf, C, P.D, P.D, w.kTf.data(), P.bk);
          gemm_f32_brgemm(rows, C, P.D, qf, P.D, w.kTf.data(), P.bk, false, S, P.bk);
        } else {
          gemm(false, true, rows, C, P.D, 1.0f, qf, P.D, kf, P.D, 0.0f, S, P.bk);
        }
      }
      bool rescale = false;
      for (int64_t rr = 0; rr < rows; ++rr) {
        const int64_t g = rr / R, r = rr % R, h = hk * P.G + g;
        const Row rw = P.row(bi, h, i0 + r, j0, C);
        float* srow = S + rr * P.bk;
        at::BFloat16* ph_row = uk_pv ? w.ph.data() + rr * even(C) : nullptr;
        const float b = P.b ? P.b[h] : 0.0f, n = P.b ? P.n[h] : 0.0f;
        if (fixed) {
          // with the ukernel's P V, P rounded to bf16 (its A operand) goes to ph
          float rounded = 0.0f;
          w.l[rr] += fwd_row_any(srow, rw, C, P.scale, P.b != nullptr, b, n, w.m[rr], ph_row, &rounded,
                                 lse != nullptr);
          w.lr[rr] += rounded;
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
        float sum = 0.0f, rounded = 0.0f;
        if (hi != -kInf) {
          sum = fwd_row_any(srow, rw, C, P.scale, P.b != nullptr, b, n, m_safe, ph_row, &rounded, lse != nullptr);
        } else {
          std::fill(srow, srow + C, 0.0f);
          if (ph_row) std::fill(ph_row, ph_row + even(C), at::BFloat16(0.0f));
        }
        w.m[rr] = m_new;
        w.l[rr] = w.l[rr] * a + sum;
        w.alpha[rr] = a;
        rescale = rescale || a != 1.0f;
        if (uk_pv) w.lr[rr] = w.lr[rr] * a + rounded;
      }
      if (!first && rescale)
        for (int64_t rr = 0; rr < rows; ++rr) {
          float* arow = w.acc.data() + rr * P.Dv;
          const float a = w.alpha[rr];
          for (int64_t d = 0; d < P.Dv; ++d) arow[d] *= a;
        }
      if (rows <= kFewRows) {
        few_rows_values(S, P.bk, vb + j0 * P.Dv, rows, C, P.Dv, first, w.acc.data());
      } else if (uk) {
        if constexpr (kBf16) {
          // P's rows were rounded into ph by the row loop
          gemm_vnni(rows, P.Dv, C, w.ph.data(), even(C), tiles.v, !first, w.acc.data(), P.Dv, P.Dv, tiles.v_keys);
        }
      } else {
        const float* vt;
        if constexpr (kReduced) {
          at::vec::convert(vb + j0 * P.Dv, w.vt.data(), C * P.Dv);
          vt = w.vt.data();
        } else {
          vt = vb + j0 * P.Dv;
        }
        if (ukf) {
          gemm_f32_brgemm(rows, P.Dv, C, S, P.bk, vt, P.Dv, !first, w.acc.data(), P.Dv);
        } else {
          const float* vtt = nullptr;
          if (small_nn_form(P.Dv) == 1) {
            transpose_f32(vt, C, P.Dv, P.Dv, w.vtt.data(), P.bk);
            vtt = w.vtt.data();
          }
          product_nn(rows, C, P.Dv, S, P.bk, vt, vtt, P.bk, !first, w.acc.data(), P.Dv);
        }
      }
      first = false;
    }
    for (int64_t rr = 0; rr < rows; ++rr) {
      const int64_t g = rr / R, r = rr % R, h = hk * P.G + g;
      const int64_t orow = (bi * P.H + h) * P.Lq + i0 + r;
      T* o = out + orow * P.Dv;
      // l: the exact sum (0 where P V's rounded sum lr alone was formed: no lse wanted)
      const float l = w.l[rr];
      if (first || (uk_pv ? w.lr[rr] : l) == 0.0f) {  // no visible key: output 0, lse +inf (no weight, no gradient)
        std::fill(o, o + P.Dv, T(0.0f));
        if (lse) lse[orow] = kInf;
        if (res) std::fill(res + orow * P.Dv, res + (orow + 1) * P.Dv, int8_t(0));
        continue;
      }
      const float inv = 1.0f / (uk_pv && w.lr[rr] > 0.0f ? w.lr[rr] : l);  // P V's rounded weights' sum (kSplitP)
      const float* arow = w.acc.data() + rr * P.Dv;
      for (int64_t d = 0; d < P.Dv; ++d) o[d] = T(arow[d] * inv);
      if constexpr (kBf16) if (res) write_residual(arow, inv, o, P.Dv, res + orow * P.Dv);
      if (lse) lse[orow] = (w.m[rr] == -kInf ? 0.0f : w.m[rr]) + std::log(l);
    }
  }
};

// T: the element type of q, k, v, out and dout, and of the gradients returned.  float: every tile product reads
// the inputs in place and dq, dk, dv accumulate in the outputs.  bfloat16 / float16: each tile is converted to fp32
// as a product reads it (a key/value tile once per key block, a query/dout block once per (key block, head, query
// block): 1/C of the products' work), or bf16 goes through the ukernel (ukernel() below); dk, dv (the item's key
// rows) and dq accumulate in fp32 scratch, written in T when complete, so nothing of the size of an input is ever
// held in fp32.
template <typename T>
struct Backward {
  static constexpr bool kReduced = !std::is_same_v<T, float>;
  const Problem& P;
  const T *dout, *out;             // [B, H, Lq, Dv], [B, H, Lq, Dv]
  const int8_t* res;               // bf16: out's residual from the forward ([B, H, Lq, Dv]) or nullptr
  const float* lse;                // [B, H, Lq]
  float* dqp;                      // [chunks, B, H, Lq, D]: each chunk's partial sums (float with chunks == 1: the
                                   // result; reduced with chunks == 1: unused, the item's scratch holds them)
  T* dq;                           // [B, H, Lq, D] (float with chunks == 1: dqp itself)
  T *dk, *dv;                      // [B, Hkv, Lk, D], [B, Hkv, Lk, Dv]
  double* dn;                      // [chunks, B, H] sum(dg * g), or nullptr
  double* qdq;                     // [B, H] sum(q . dq), or nullptr
  int64_t nkb, chunks;
  std::atomic<int32_t>* done;      // [B * Hkv] chunks finished: the last one sums dq and q . dq
  std::atomic<bool>* nonfinite;    // set when a q or k element the call reads is not finite

  int64_t per() const { return (nkb + chunks - 1) / chunks; }  // key blocks per chunk

  // n elements as float32: the input itself (float), else converted into scratch
  static const float* as_float(const T* src, float* scratch, int64_t n) {
    if constexpr (kReduced) {
      at::vec::convert(src, scratch, n);
      return scratch;
    } else {
      return src;
    }
  }

  struct Scratch {
    std::vector<float> s, dp, delta;
    // reduced dtypes: fp32 copies of the tiles being multiplied, and fp32 sums of the item's dk, dv rows and (one
    // chunk per (batch, kv head)) of its heads' dq
    std::vector<float> qf, dof, kf, vf, dka, dva, dqa, row;
    std::vector<float> kt;  // a key tile transposed, [D x bk], where dQ's product reads it so (small_nn_form)
    // the ukernel: K^T, V^T and K of a key tile, P (hi, lo) and dS of a query block, packed; Q^T, dO^T and dS rows
    // in bf16; the tile's dK^T and dV^T sums
    std::vector<uint32_t> kT, vT, kN, pph, ppl, dsp;
    std::vector<at::BFloat16> qT, doT, ds16;
    std::vector<float> dkT, dvT;
    std::vector<float> kTf, vTf, qTf, doTf;  // the fp32 ukernel: K^T, V^T of a key tile, Q^T, dO^T of a query block
    const bool uk, ukf;  // the worker's kind of products, fixed with the sizes here (a mode may change meanwhile)
    explicit Scratch(const Backward& f) : uk(f.ukernel()), ukf(f32_ukernel(f.P)) {
      const int64_t D = f.P.D, Dv = f.P.Dv, bq = f.P.bq, bk = f.P.bk;
      if (ukf) {
        kTf.resize(D * bk); vTf.resize(Dv * bk); qTf.resize(D * bq); doTf.resize(Dv * bq);
        dkT.resize(D * bk); dvT.resize(Dv * bk);
      }
      if (uk) {
        kT.resize(vnni_words(D, bk)); vT.resize(vnni_words(Dv, bk)); kN.resize(vnni_words(bk, D));
        pph.resize(vnni_words(bq, bk)); if (kSplitP) ppl.resize(vnni_words(bq, bk)); dsp.resize(vnni_words(bq, bk));
        qT.resize(D * even(bq)); doT.resize(Dv * even(bq)); ds16.resize(bq * even(bk));
        dkT.resize(D * bk); dvT.resize(Dv * bk);
      }
      s.resize(f.P.bq * f.P.bk); dp.resize(f.P.bq * f.P.bk); delta.resize(f.P.G * f.P.Lq);
      if (small_nn_form(f.P.D) == 1) kt.resize(f.P.D * f.P.bk);
      if constexpr (kReduced) {
        const int64_t keys = std::min(f.P.Lk, f.per() * f.P.bk);
        if (!uk) {
          qf.resize(f.P.bq * f.P.D); dof.resize(f.P.bq * f.P.Dv); kf.resize(f.P.bk * f.P.D); vf.resize(f.P.bk * f.P.Dv);
        }
        dka.resize(keys * f.P.D); dva.resize(keys * f.P.Dv); row.resize(f.P.D);
        if (f.chunks == 1) dqa.resize(f.P.G * f.P.Lq * f.P.D);
      }
    }
  };

  // A key block range's rows of K are finite and, with the item's query rows, give finite scale |q| |k|
  // products; rows of delta = rowsum(out * dout) from istart on (row_delta).  Everything here is per item, inside
  // the call's one parallel region (every barrier costs a scheduler slice on a busy machine).
  bool prepare(int64_t bi, int64_t hk, int64_t j0, int64_t j1, int64_t istart, float* delta) const {
    const T* kb = P.k<T>() + (bi * P.Hkv + hk) * P.Lk * P.D;
    float kmax = 0.0f, qmax = 0.0f;
    bool ok = true;
    for (int64_t j = j0; j < j1; ++j) {
      const float acc = dot_f32(kb + j * P.D, kb + j * P.D, P.D);
      ok = ok && std::isfinite(acc);
      kmax = std::max(kmax, acc);
    }
    for (int64_t g = 0; g < P.G; ++g) {
      const int64_t bh = bi * P.H + hk * P.G + g;
      for (int64_t i = istart; i < P.Lq; ++i) {
        const T* qq = P.q<T>() + (bh * P.Lq + i) * P.D;
        const T* o = out + (bh * P.Lq + i) * P.Dv;
        const T* dd = dout + (bh * P.Lq + i) * P.Dv;
        const float sq = dot_f32(qq, qq, P.D);
        const float acc = row_delta(o, res ? res + (bh * P.Lq + i) * P.Dv : nullptr, dd, P.Dv);
        ok = ok && std::isfinite(sq);
        qmax = std::max(qmax, sq);
        delta[g * P.Lq + i] = acc;
      }
    }
    return ok && std::isfinite(std::sqrt(qmax) * std::sqrt(kmax) * std::fabs(P.scale));
  }

  void operator()(int64_t item, Scratch& w) const {
    const int64_t c = item % chunks, bhk = item / chunks;
    const int64_t bi = bhk / P.Hkv, hk = bhk % P.Hkv;
    const int64_t jb0 = std::min(nkb, c * per()), jb1 = std::min(nkb, (c + 1) * per());
    const int64_t j0k = std::min(P.Lk, jb0 * P.bk), j1k = std::min(P.Lk, jb1 * P.bk);
    const int64_t istart0 = P.causal ? std::min(P.Lq, (j0k / P.bq) * P.bq) : 0;
    // this item owns dk, dv rows [j0k, j1k) and its chunk's partial dq of the G heads: zero them here
    float* dkr;
    float* dvr;
    float* dqc;  // the partial dq of this item's G heads, [G, Lq, D]
    if constexpr (kReduced) {
      dkr = w.dka.data(); dvr = w.dva.data();
      dqc = chunks == 1 ? w.dqa.data() : dqp + (c * P.B * P.H + bi * P.H + hk * P.G) * P.Lq * P.D;
      std::fill(dkr, dkr + (j1k - j0k) * P.D, 0.0f);
      std::fill(dvr, dvr + (j1k - j0k) * P.Dv, 0.0f);
    } else {
      dkr = dk + (bhk * P.Lk + j0k) * P.D; dvr = dv + (bhk * P.Lk + j0k) * P.Dv;
      dqc = dqp + (c * P.B * P.H + bi * P.H + hk * P.G) * P.Lq * P.D;
      std::fill(dkr, dkr + (j1k - j0k) * P.D, 0.0f);
      std::fill(dvr, dvr + (j1k - j0k) * P.Dv, 0.0f);
    }
    std::fill(dqc, dqc + P.G * P.Lq * P.D, 0.0f);
    // a chunk past the last key block (chunks * per > nkb) only zeroes and counts
    if (jb0 < jb1) {
      if (prepare(bi, hk, j0k, j1k, istart0, w.delta.data())) run(c, bi, hk, jb0, jb1, j0k, dkr, dvr, dqc, w);
      else *nonfinite = true;
    }
    if constexpr (kReduced) {
      if (!nonfinite->load()) {
        at::vec::convert(dkr, dk + (bhk * P.Lk + j0k) * P.D, (j1k - j0k) * P.D);
        at::vec::convert(dvr, dv + (bhk * P.Lk + j0k) * P.Dv, (j1k - j0k) * P.Dv);
      }
    }
    // the last chunk of this (batch, kv head) to finish sums the partial dq and q . dq (acq_rel: it sees the
    // others' writes)
    if (done[bhk].fetch_add(1, std::memory_order_acq_rel) + 1 == chunks && !nonfinite->load()) finish(bi, hk, dqc, w);
  }

  // bf16 through the ukernel (bf16_ukernel): all five tile products bf16 x bf16 -> fp32, dS rounded to bf16 as
  // SDPA's bf16 backward does, P as hi + lo parts (kSplitP); dK and dV as dK^T += Q^T dS and dV^T += dO^T P, so
  // that what is packed along the query rows is dS and P (converted as they are packed) and what is transposed is
  // the narrower Q and dO blocks
  bool ukernel() const { return std::is_same_v<T, at::BFloat16> && bf16_ukernel(P); }

  // P over S and dS over dP for the rows [i0, i0 + R) of head h against the key tile [j0, j0 + C); adds the rows'
  // sum(dg g) to dn_acc; false when no row sees a key of the tile
  bool row_pass(int64_t bi, int64_t h, int64_t bh, int64_t i0, int64_t R, int64_t j0, int64_t C, float b, float n,
                const float* delta, float* S, float* dP, double* dn_acc) const {
    bool any = false;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t i = i0 + r;
      Row rw = P.row(bi, h, i, j0, C);
      const float L = lse[bh * P.Lq + i], d = delta[i];
      if (L == kInf) rw.cend = 0;
      float* srow = S + r * P.bk;
      float* drow = dP + r * P.bk;
      float acc;
      if (P.b) acc = rw.mask ? bwd_row_path<true, true>(srow, drow, rw.mask, rw.cend, P.scale, b, n, L, d)
                             : bwd_row_path<true, false>(srow, drow, nullptr, rw.cend, P.scale, b, n, L, d);
      else acc = rw.mask ? bwd_row_path<false, true>(srow, drow, rw.mask, rw.cend, P.scale, b, n, L, d)
                         : bwd_row_path<false, false>(srow, drow, nullptr, rw.cend, P.scale, b, n, L, d);
      for (int64_t cc = rw.cend; cc < C; ++cc) { srow[cc] = 0.0f; drow[cc] = 0.0f; }
      *dn_acc += acc;
      any = any || rw.cend > 0;
    }
    return any;
  }

  // the ukernel: row_pass over pairs of rows, each pair packed while in L1: P (hi, lo) and dS along the query
  // rows (B operands of dV^T and dK^T), dS rows rounded (A operand of dQ)
  bool pass_and_pack(int64_t bi, int64_t h, int64_t bh, int64_t i0, int64_t R, int64_t j0, int64_t C, float b,
                     float n, const float* delta, double* dn_acc, Scratch& w) const {
    const int64_t Re = even(R), Ce = even(C);
    bool any = false;
    for (int64_t r = 0; r < R; r += 2) {
      float* S = w.s.data() + r * P.bk;
      float* dP = w.dp.data() + r * P.bk;
      const bool two = r + 1 < R;
      any = row_pass(bi, h, bh, i0 + r, two ? 2 : 1, j0, C, b, n, delta, S, dP, dn_acc) || any;
      vnni_pack_f32_pair<kSplitP>(S, two ? S + P.bk : nullptr, C, Re, r / 2, w.pph.data(), w.ppl.data());
      vnni_pack_f32_pair<false>(dP, two ? dP + P.bk : nullptr, C, Re, r / 2, w.dsp.data(), nullptr);
      round_rows(dP, two ? 2 : 1, C, P.bk, w.ds16.data() + r * Ce, Ce);
    }
    return any;
  }

  // the ukernel's gradient products for a query block of R rows (bf16 rows qb, dob; P, dS packed)
  void grads_ukernel(int64_t R, int64_t C, const T* qb, const T* dob, float* dqt, Scratch& w) const {
    if constexpr (std::is_same_v<T, at::BFloat16>) {
      const int64_t Re = even(R), Ce = even(C);
      transpose_rows_bf16(dob, R, P.Dv, P.Dv, w.doT.data(), Re);
      gemm_vnni(P.Dv, C, R, w.doT.data(), Re, w.pph.data(), true, w.dvT.data(), P.bk);
      if (kSplitP) gemm_vnni(P.Dv, C, R, w.doT.data(), Re, w.ppl.data(), true, w.dvT.data(), P.bk);
      transpose_rows_bf16(qb, R, P.D, P.D, w.qT.data(), Re);
      gemm_vnni(P.D, C, R, w.qT.data(), Re, w.dsp.data(), true, w.dkT.data(), P.bk);
      gemm_vnni(R, P.D, C, w.ds16.data(), Ce, w.kN.data(), true, dqt, P.D);
    }
  }

  // the fp32 ukernel's gradient products for a query block of R rows (qt, dot: its q, dout rows; kt: the key
  // tile; P and dS in the scratch's s, dp), as the bf16 ones: dV^T += dO^T P, dK^T += Q^T dS, dQ += dS K
  void grads_f32_ukernel(int64_t R, int64_t C, const float* qt, const float* dot, const float* kt, float* dqt,
                         Scratch& w) const {
    transpose_f32(dot, R, P.Dv, P.Dv, w.doTf.data(), P.bq);
    gemm_f32_brgemm(P.Dv, C, R, w.doTf.data(), P.bq, w.s.data(), P.bk, true, w.dvT.data(), P.bk);
    transpose_f32(qt, R, P.D, P.D, w.qTf.data(), P.bq);
    gemm_f32_brgemm(P.D, C, R, w.qTf.data(), P.bq, w.dp.data(), P.bk, true, w.dkT.data(), P.bk);
    gemm_f32_brgemm(R, P.D, C, w.dp.data(), P.bk, kt, P.D, true, dqt, P.D);
  }

  // the key blocks [jb0, jb1) of (batch bi, kv head hk): dk, dv rows from j0k on in dkr, dvr; the G heads' dq in dqg
  void run(int64_t c, int64_t bi, int64_t hk, int64_t jb0, int64_t jb1, int64_t j0k, float* dkr, float* dvr,
           float* dqg, Scratch& w) const {
    const int64_t bhk = bi * P.Hkv + hk;
    const T* kb = P.k<T>() + bhk * P.Lk * P.D;
    const T* vb = P.v<T>() + bhk * P.Lk * P.Dv;
    float* S = w.s.data();
    float* dP = w.dp.data();
    const bool uk = w.uk, ukf = w.ukf;
    for (int64_t jb = jb0; jb < jb1; ++jb) {
      const int64_t j0 = jb * P.bk, C = std::min(P.bk, P.Lk - j0);
      const float *kt = nullptr, *vt = nullptr, *ktt = nullptr;
      if (uk) {  // K^T and V^T (the B operands of Q K^T and dO V^T) and K (of dS K)
        if constexpr (std::is_same_v<T, at::BFloat16>) {
          vnni_pack_t(kb + j0 * P.D, C, P.D, P.D, w.kT.data());
          vnni_pack_t(vb + j0 * P.Dv, C, P.Dv, P.Dv, w.vT.data());
          vnni_pack(kb + j0 * P.D, C, P.D, P.D, w.kN.data());
          std::fill(w.dkT.begin(), w.dkT.end(), 0.0f);
          std::fill(w.dvT.begin(), w.dvT.end(), 0.0f);
        }
      } else {
        kt = as_float(kb + j0 * P.D, w.kf.data(), C * P.D);
        vt = as_float(vb + j0 * P.Dv, w.vf.data(), C * P.Dv);
        if (ukf) {  // K^T, V^T as the B operands of Q K^T and dO V^T
          transpose_f32(kt, C, P.D, P.D, w.kTf.data(), P.bk);
          transpose_f32(vt, C, P.Dv, P.Dv, w.vTf.data(), P.bk);
          std::fill(w.dkT.begin(), w.dkT.end(), 0.0f);
          std::fill(w.dvT.begin(), w.dvT.end(), 0.0f);
        } else if (small_nn_form(P.D) == 1) {
          transpose_f32(kt, C, P.D, P.D, w.kt.data(), P.bk);
          ktt = w.kt.data();
        }
      }
      float* dkt = dkr + (j0 - j0k) * P.D;
      float* dvt = dvr + (j0 - j0k) * P.Dv;
      for (int64_t g = 0; g < P.G; ++g) {
        const int64_t h = hk * P.G + g, bh = bi * P.H + h;
        const float b = P.b ? P.b[h] : 0.0f, n = P.b ? P.n[h] : 0.0f;
        const T* qh = P.q<T>() + bh * P.Lq * P.D;
        const T* doh = dout + bh * P.Lq * P.Dv;
        float* dqh = dqg + g * P.Lq * P.D;
        double dn_acc = 0.0;
        const int64_t istart = P.causal ? (j0 / P.bq) * P.bq : 0;
        for (int64_t i0 = istart; i0 < P.Lq; i0 += P.bq) {
          const int64_t R = std::min(P.bq, P.Lq - i0);
          const T *qb = qh + i0 * P.D, *dob = doh + i0 * P.Dv;
          const float *qt = nullptr, *dot = nullptr;
          if (uk) {
            gemm_vnni(R, C, P.D, qb, P.D, w.kT.data(), false, S, P.bk);
            gemm_vnni(R, C, P.Dv, dob, P.Dv, w.vT.data(), false, dP, P.bk);
          } else {
            qt = as_float(qb, w.qf.data(), R * P.D);
            dot = as_float(dob, w.dof.data(), R * P.Dv);
            if (ukf) {
              gemm_f32_brgemm(R, C, P.D, qt, P.D, w.kTf.data(), P.bk, false, S, P.bk);
              gemm_f32_brgemm(R, C, P.Dv, dot, P.Dv, w.vTf.data(), P.bk, false, dP, P.bk);
            } else {
              gemm(false, true, R, C, P.D, 1.0f, qt, P.D, kt, P.D, 0.0f, S, P.bk);
              gemm(false, true, R, C, P.Dv, 1.0f, dot, P.Dv, vt, P.Dv, 0.0f, dP, P.bk);
            }
          }
          if (uk) {
            if (pass_and_pack(bi, h, bh, i0, R, j0, C, b, n, w.delta.data() + g * P.Lq, &dn_acc, w))
              grads_ukernel(R, C, qb, dob, dqh + i0 * P.D, w);
            continue;
          }
          if (!row_pass(bi, h, bh, i0, R, j0, C, b, n, w.delta.data() + g * P.Lq, S, dP, &dn_acc)) continue;
          if (ukf) {
            grads_f32_ukernel(R, C, qt, dot, kt, dqh + i0 * P.D, w);
            continue;
          }
          product_tn_add(R, C, P.Dv, S, P.bk, dot, dvt);
          product_tn_add(R, C, P.D, dP, P.bk, qt, dkt);
          product_nn(R, C, P.D, dP, P.bk, kt, ktt, P.bk, true, dqh + i0 * P.D, P.D);
        }
        if (dn) dn[c * P.B * P.H + bh] += dn_acc;
      }
      if (uk || ukf)  // the tile's dK^T, dV^T sums into its rows of dk, dv
        for (int64_t cc = 0; cc < C; ++cc) {
          for (int64_t d = 0; d < P.D; ++d) dkt[cc * P.D + d] += w.dkT[d * P.bk + cc];
          for (int64_t d = 0; d < P.Dv; ++d) dvt[cc * P.Dv + d] += w.dvT[d * P.bk + cc];
        }
    }
  }

  // dq of the G heads = the sum of the chunks' partials (dqc: this item's, the whole sum when chunks == 1);
  // qdq = sum over rows of q . dq (for dL/db)
  void finish(int64_t bi, int64_t hk, const float* dqc, Scratch& w) const {
    const int64_t n = P.Lq * P.D;
    for (int64_t g = 0; g < P.G; ++g) {
      const int64_t bh = bi * P.H + hk * P.G + g;
      const T* qq = P.q<T>() + bh * n;
      double acc = 0.0;
      if constexpr (kReduced) {
        float* sum = w.row.data();
        for (int64_t i = 0; i < P.Lq; ++i) {
          const float* res = dqc + g * n + i * P.D;  // one chunk: read in place (a copy's fresh stores stalled the
          if (chunks > 1) {                           // vector loads of the dot product below)
            std::fill(sum, sum + P.D, 0.0f);
            for (int64_t c = 0; c < chunks; ++c) {
              const float* part = dqp + (c * P.B * P.H + bh) * n + i * P.D;
#pragma omp simd
              for (int64_t x = 0; x < P.D; ++x) sum[x] += part[x];
            }
            res = sum;
          }
          acc += dot_f32(qq + i * P.D, res, P.D);
          at::vec::convert(res, dq + bh * n + i * P.D, P.D);
        }
      } else {
        float* res = dqp + bh * n;
        if (chunks > 1) {
          res = dq + bh * n;
          std::memcpy(res, dqp + bh * n, sizeof(float) * n);
          for (int64_t c = 1; c < chunks; ++c) {
            const float* part = dqp + (c * P.B * P.H + bh) * n;
#pragma omp simd
            for (int64_t x = 0; x < n; ++x) res[x] += part[x];
          }
        }
        if (!qdq) continue;
        for (int64_t i = 0; i < P.Lq; ++i) {
          acc += dot_f32(qq + i * P.D, res + i * P.D, P.D);
        }
      }
      if (qdq) qdq[bh] = acc;
    }
  }
};

}  // namespace
"""
