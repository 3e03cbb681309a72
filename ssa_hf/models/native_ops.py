"""C++ source of the fused CPU kernel, part 6 of 6: the entry points (forward, backward and the helpers the tests
and benchmarks call) and their Python bindings.  See native_math.py (part 1), native_rows.py (part 2),
native_decode.py (part 3), native_tiles.py (part 4), native_kernels.py (part 5) and native.py (the build).  Part of the remote-code unit (a string, no imports)."""

OPS_SOURCE = r"""
// The kernels' view of a call's tensors (checked here; the entry points below made them contiguous)
Problem make_problem(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& b,
                     const at::Tensor& n, const c10::optional<at::Tensor>& mask, bool causal, double scale,
                     int64_t bq, int64_t bk) {
  const auto dt = q.scalar_type();
  TORCH_CHECK((dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf) && k.scalar_type() == dt &&
              v.scalar_type() == dt, "ssa_hf fused kernel: q, k, v of one dtype, float32, bfloat16 or float16");
  TORCH_CHECK(b.numel() == 0 || (b.scalar_type() == at::kFloat && n.scalar_type() == at::kFloat),
              "ssa_hf fused kernel: float32 b and n expected");
  TORCH_CHECK(q.dim() == 4 && b.numel() == n.numel() && (b.numel() == 0 || b.numel() == q.size(1)),
              "ssa_hf fused kernel: b and n hold one value per query head, or none (softmax)");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "ssa_hf fused kernel: contiguous inputs expected");
  Problem P{};
  P.qx = q.data_ptr(); P.kx = k.data_ptr(); P.vx = v.data_ptr();
  P.dtype = dt;
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

// Forward: returns {out [B, H, Lq, Dv], lse [B, H, Lq], res} with need_lse, else {out}; {} when a query or key
// element is not finite.  res: for bf16, out's residual (int8 [B, H, Lq, Dv], write_residual: what rounding out to
// bf16 dropped, which the backward's delta reads); else empty.
// Rows whose |g| bound (Cauchy-Schwarz) is at most fixed_max use it as a fixed offset: one pass per tile, no
// running maximum, no rescaling of the partial output (40 keeps exp(g - bound) >= exp(-80), a normal float32).
// The inputs are taken as they come and made what the kernel reads here (contiguous; k and v in q's dtype; b and n
// float32): each is a no-op for a decoding step's tensors, and the same checks in Python cost microseconds a call.
std::vector<at::Tensor> ssa_fused_forward(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                          const at::Tensor& b_in, const at::Tensor& n_in,
                                          const c10::optional<at::Tensor>& mask, bool causal, double scale,
                                          int64_t bq, int64_t bk, bool need_lse, double fixed_max,
                                          double serial_flops) {
  // (each conversion a no-op for a decoding step's tensors, but a dispatched call of its own: skipped then)
  const at::Tensor q = q_in.contiguous();
  const auto dt = q.scalar_type();
  const at::Tensor k = (k_in.scalar_type() == dt ? k_in : k_in.to(dt)).contiguous();
  const at::Tensor v = (v_in.scalar_type() == dt ? v_in : v_in.to(dt)).contiguous();
  const at::Tensor b = (b_in.scalar_type() == at::kFloat ? b_in : b_in.to(at::kFloat)).contiguous();
  const at::Tensor n = (n_in.scalar_type() == at::kFloat ? n_in : n_in.to(at::kFloat)).contiguous();
  Problem P = make_problem(q, k, v, b, n, mask, causal, scale, bq, bk);
  P.fixed_max = (float)fixed_max;
  at::Tensor out = at::empty({P.B, P.H, P.Lq, P.Dv}, q.options());
  // without need_lse the result is {out} alone (two empty tensors cost a decoding call a microsecond)
  at::Tensor lse = need_lse ? at::empty({P.B, P.H, P.Lq}, q.options().dtype(at::kFloat)) : at::Tensor();
  const bool need_res = need_lse && P.dtype == at::kBFloat16;
  at::Tensor res = need_res ? at::empty({P.B, P.H, P.Lq, P.Dv}, q.options().dtype(at::kChar))
                            : (need_lse ? at::empty({0}, q.options().dtype(at::kChar)) : at::Tensor());
  const auto result = [&]() -> std::vector<at::Tensor> {
    if (need_lse) return {out, lse, res};
    return {out};
  };
  if (P.Lq == 0) return result();
  if (P.Lk == 0) {
    out.zero_();
    if (need_res) res.zero_();
    if (need_lse) lse.fill_(kInf);
    return result();
  }
  // Short query blocks (decoding steps): the bound would read all of K once more for a handful of rows; run the
  // online maximum, which checks the scores it sees for inf/NaN instead.
  P.bounded = P.Lq * P.G >= 16;
  // bf16 through the ukernel: at most kUkernelForwardRows rows an item (the score tile and bf16 P halve)
  if (bf16_ukernel(P)) P.bq = std::min<int64_t>(P.bq, kUkernelForwardRows);
  P.bq = std::max<int64_t>(1, P.bq / P.G);  // block_q counts the rows of a work item, over its G query heads
  // a work item holds no more rows, nor a tile more keys, than there are: its scratch (zero-filled, rows x keys)
  // stays small for a decoding step (G rows), where a 256 x 256 one cost more than the step's tile products
  P.bq = std::min<int64_t>(P.bq, P.Lq);
  P.bk = std::min<int64_t>(P.bk, P.Lk);
  // enough work items for every thread (short sequences, many cores): smaller query blocks
  const int64_t want = 4 * (int64_t)at::get_num_threads();
  while (P.bq > 16 && P.B * P.Hkv * ((P.Lq + P.bq - 1) / P.bq) < want) P.bq /= 2;
  const int64_t nqb = (P.Lq + P.bq - 1) / P.bq;
  std::atomic<bool> nonfinite{false};
  float* lsep = need_lse ? lse.data_ptr<float>() : nullptr;
  if (P.dtype == at::kBFloat16) {
    Forward<at::BFloat16> f{P, out.data_ptr<at::BFloat16>(), lsep, need_res ? res.data_ptr<int8_t>() : nullptr, nqb,
                            &nonfinite};
    run_items(nqb * P.B * P.Hkv, f, problem_flops(P) < serial_flops);
  } else if (P.dtype == at::kHalf) {
    Forward<at::Half> f{P, out.data_ptr<at::Half>(), lsep, nullptr, nqb, &nonfinite};
    run_items(nqb * P.B * P.Hkv, f, problem_flops(P) < serial_flops);
  } else {
    Forward<float> f{P, out.data_ptr<float>(), lsep, nullptr, nqb, &nonfinite};
    run_items(nqb * P.B * P.Hkv, f, problem_flops(P) < serial_flops);
  }
  if (nonfinite.load()) return {};
  return result();
}

// Backward (res: the forward's residual of out, or empty): returns {dq, dk, dv, dn [H], db [H]} (dn, db in the
// dtype of n and b); summed in float64 over rows:
// dL/dn = sum(dL/dg * g) / n, dL/db = sum(q . dq) / b; both empty for softmax or when need_bn is false.
// The inputs are made what the kernel reads here, as in the forward (contiguous; dout, k, v, out in q's dtype; lse,
// b, n float32).
std::vector<at::Tensor> ssa_fused_backward(const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in,
                                           const at::Tensor& v_in, const at::Tensor& out_in, const at::Tensor& lse_in,
                                           const at::Tensor& res_in, const at::Tensor& b_in, const at::Tensor& n_in,
                                           const c10::optional<at::Tensor>& mask, bool causal, double scale,
                                           int64_t bq, int64_t bk, bool need_bn, double serial_flops) {
  const at::Tensor q = q_in.contiguous();
  const auto dt = q.scalar_type();
  const at::Tensor k = k_in.to(dt).contiguous(), v = v_in.to(dt).contiguous();
  const at::Tensor dout = dout_in.to(dt).contiguous(), out = out_in.to(dt).contiguous();
  const at::Tensor lse = lse_in.to(at::kFloat).contiguous();
  const at::Tensor b = b_in.to(at::kFloat).contiguous(), n = n_in.to(at::kFloat).contiguous();
  Problem P = make_problem(q, k, v, b, n, mask, causal, scale, bq, bk);
  if (causal) P.bq = std::min(P.bq, kCausalBackwardTile), P.bk = std::min(P.bk, kCausalBackwardTile);
  // out's residual from the forward (bf16; empty: delta from out alone)
  const bool has_res = res_in.numel() > 0;
  TORCH_CHECK(!has_res || (dt == at::kBFloat16 && res_in.scalar_type() == at::kChar && res_in.sizes() == out.sizes()),
              "ssa_hf fused kernel: the output's residual is int8 of the output's shape, for bf16 only");
  const at::Tensor res = has_res ? res_in.contiguous() : res_in;
  const bool bn = need_bn && P.b != nullptr;
  const bool reduced = P.dtype != at::kFloat;
  if (P.Lq == 0) return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::zeros({bn ? P.H : 0}, q.options().dtype(at::kFloat)), at::zeros({bn ? P.H : 0}, q.options().dtype(at::kFloat))};
  const int64_t nkb = P.Lk == 0 ? 0 : (P.Lk + P.bk - 1) / P.bk;
  // enough items for every thread: split the key blocks of a (batch, kv head) when there are few of those
  const int64_t want = 4 * (int64_t)at::get_num_threads();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(nkb, (want + P.B * P.Hkv - 1) / (P.B * P.Hkv)));
  // uninitialised: every item zeroes what it owns (a zero-fill here would be one more parallel region).  The fp32
  // partial dq: float32 calls with one chunk write the result there; bf16/fp16 calls with one chunk keep it in
  // each item's scratch (none here)
  const auto f32 = q.options().dtype(at::kFloat);
  at::Tensor dqp = (reduced && chunks == 1) ? at::empty({0}, f32) : at::empty({chunks, P.B, P.H, P.Lq, P.D}, f32);
  at::Tensor dq = (!reduced && chunks == 1) ? dqp[0] : at::empty_like(q);
  at::Tensor dk = at::empty_like(k);
  at::Tensor dv = at::empty_like(v);
  // the b, n sums in double: plain arrays, summed per head below (ATen ops on these few values cost ~20 us a call)
  std::vector<double> dnp(bn ? chunks * P.B * P.H : 0, 0.0), qdq(bn ? P.B * P.H : 0, 0.0);
  if (nkb == 0) {  // no keys: no gradient anywhere
    dq.zero_(); dk.zero_(); dv.zero_();
  } else {
    std::unique_ptr<std::atomic<int32_t>[]> done(new std::atomic<int32_t>[P.B * P.Hkv]);
    for (int64_t x = 0; x < P.B * P.Hkv; ++x) done[x] = 0;
    std::atomic<bool> nonfinite{false};
    double* dnpp = bn ? dnp.data() : nullptr;
    double* qdqp = bn ? qdq.data() : nullptr;
    const bool serial = problem_flops(P) < serial_flops;
    auto launch = [&](auto zero) {
      using T = decltype(zero);
      Backward<T> f{P, dout.data_ptr<T>(), out.data_ptr<T>(), has_res ? res.data_ptr<int8_t>() : nullptr,
                    lse.data_ptr<float>(), dqp.data_ptr<float>(),
                    dq.data_ptr<T>(), dk.data_ptr<T>(), dv.data_ptr<T>(), dnpp, qdqp, nkb, chunks, done.get(),
                    &nonfinite};
      run_items(P.B * P.Hkv * chunks, f, serial);
    };
    if (P.dtype == at::kBFloat16) launch(at::BFloat16(0.0f));
    else if (P.dtype == at::kHalf) launch(at::Half(0.0f));
    else launch(0.0f);
    if (nonfinite.load()) return {};  // the torch path propagates inf/NaN as eager attention does
  }
  at::Tensor dn, db;
  if (bn) {  // dL/dn = sum(dg g) / n and dL/db = sum(q . dq) / b per head, over chunks and batch, in double
    dn = at::empty({P.H}, n.options().dtype(at::kFloat));
    db = at::empty({P.H}, b.options().dtype(at::kFloat));
    float* dnw = dn.data_ptr<float>();
    float* dbw = db.data_ptr<float>();
    for (int64_t h = 0; h < P.H; ++h) {
      double sn = 0.0, sb = 0.0;
      for (int64_t c = 0; c < chunks * P.B; ++c) sn += dnp[c * P.H + h];
      for (int64_t bi = 0; bi < P.B; ++bi) sb += qdq[bi * P.H + h];
      dnw[h] = (float)(sn / (double)P.n[h]);
      dbw[h] = (float)(sb / (double)P.b[h]);
    }
  } else {
    dn = at::empty({0}, n.options());
    db = at::empty({0}, b.options());
  }
  return {dq, dk, dv, dn, db};
}

// The number of threads that ran a parallel region of n items (tests: the kernel really runs on torch's pool).
int64_t ssa_parallel_width(int64_t n) {
  std::atomic<int64_t> width{0};
  parallel(n, [&](int64_t, int64_t) {
    const int64_t t = at::get_thread_num() + 1;
    int64_t w = width.load();
    while (t > w && !width.compare_exchange_weak(w, t)) {
    }
  });
  return width.load();
}

// The number of parallel regions the forward and backward kernels have opened in this process (tests).
int64_t ssa_parallel_regions() { return g_regions.load(); }

// Lanes of the vectorised per-score passes this build holds (16: AVX-512, 8: AVX2, 0: portable only), and a switch
// to the portable passes (tests run both paths against the float64 oracle); returns the lanes in use.
int64_t ssa_vector_lanes() { return vector_lanes(); }
// The per-score pass alone, in place on a float32 [R, C] tile (the path in use): forward (dp empty) S -> P =
// 2^(g2 - off log2 e), returning the row sums; backward S -> P, dp -> dS, returning the rows' sum(dg g).  For
// the accuracy test against float64 and the per-score timing of bench_attention.py.
at::Tensor ssa_score_pass(at::Tensor s, at::Tensor dp, double scale, double b, double n, double off, double d,
                          bool ssa) {
  TORCH_CHECK(s.scalar_type() == at::kFloat && s.dim() == 2 && s.is_contiguous(), "score_pass: contiguous 2-D float32");
  const bool bwd = dp.numel() > 0;
  TORCH_CHECK(!bwd || (dp.sizes() == s.sizes() && dp.scalar_type() == at::kFloat && dp.is_contiguous()),
              "score_pass: dp like s");
  const int64_t R = s.size(0), C = s.size(1);
  at::Tensor out = at::empty({R}, s.options());
  float* S = s.data_ptr<float>();
  float* dP = bwd ? dp.data_ptr<float>() : nullptr;
  for (int64_t r = 0; r < R; ++r) {
    float* row = S + r * C;
    float res;
    if (bwd) res = ssa ? bwd_row_path<true, false>(row, dP + r * C, nullptr, C, scale, b, n, off, d)
                       : bwd_row_path<false, false>(row, dP + r * C, nullptr, C, scale, b, n, off, d);
    else res = ssa ? fwd_row_path<true, false>(row, nullptr, C, C, scale, b, n, off)
                   : fwd_row_path<false, false>(row, nullptr, C, C, scale, b, n, off);
    out.data_ptr<float>()[r] = res;
  }
  return out;
}

// The bf16 tile products, forward and backward: -1 as the CPU suits (the brgemm ukernel where it multiplies bf16
// natively), 0 fp32 on converted tiles, 1 the ukernel wherever torch's brgemm runs it; returns whether it is in use.
bool ssa_set_bf16_brgemm(int64_t mode) {
  g_bf16_brgemm.store((int)mode);
  return bf16_brgemm();
}

// The fp32 tile products: -1 as the CPU suits (the ukernel where oneDNN runs AVX-512), 0 sgemm, 1 brgemm;
// returns whether brgemm is in use.
bool ssa_set_f32_brgemm(int64_t mode) {
  g_f32_brgemm.store((int)mode);
  return f32_brgemm();
}

// Whether bf16 (fp32) tile products go through the ukernel (brgemm) now: the mode as set, torch's oneDNN switch,
// the probe (the CPU).
bool ssa_bf16_brgemm() { return bf16_brgemm(); }
bool ssa_f32_brgemm() { return f32_brgemm(); }

int64_t ssa_set_portable(bool portable) {
  g_portable.store(portable);
  return vector_path() ? vector_lanes() : 0;
}

// Python bindings (pybind11, as torch's own C++ modules bind theirs) rather than TORCH_LIBRARY operators: an
// operator call from Python converts every argument to an IValue and goes through the dispatcher, 3 us of a
// decoding call's 5 (a binding: 2.7 us all told).  The torch.compile / torch.export surface is the Python custom op
// of blockwise.py, which calls these.  The kernels release the GIL while they run.
PYBIND11_MODULE(SSA_HF_NS, m) {
  namespace py = pybind11;
  m.def("parallel_width", &ssa_parallel_width, py::call_guard<py::gil_scoped_release>());
  m.def("parallel_regions", &ssa_parallel_regions);
  m.def("vector_lanes", &ssa_vector_lanes);
  m.def("set_portable", &ssa_set_portable);
  m.def("set_bf16_brgemm", &ssa_set_bf16_brgemm);
  m.def("bf16_brgemm", &ssa_bf16_brgemm);
  m.def("set_f32_brgemm", &ssa_set_f32_brgemm);
  m.def("f32_brgemm", &ssa_f32_brgemm);
  m.def("score_pass", &ssa_score_pass, py::call_guard<py::gil_scoped_release>());
  m.def("forward", &ssa_fused_forward, py::call_guard<py::gil_scoped_release>());
  m.def("backward", &ssa_fused_backward, py::call_guard<py::gil_scoped_release>());
}
"""
