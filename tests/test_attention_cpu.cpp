// kernels/cpu/attention*: the fused CPU attention (forward O, lse; backward dQ, dK, dV, delta) against
// the double-precision oracle tests/support/attention_reference.h, on the AVX-512 and the portable
// tile paths; its determinism over thread counts; its errors; its vectorised exp.
//
// Inputs are fresh seeded random values (q, k in [-2, 2), v, dO in [-1, 1)) rounded to the dtype, so
// kernel and oracle see the same numbers; outputs start as NaN, and in the strided layout (rows of
// [B, T, H, D + 3], as the GPT's views) the gaps hold a sentinel that must survive.
//
// Tolerance, per element, derived from first-order rounding-error bounds (u = unit roundoff of the
// accumulation type, 2^-24 for f32/f16/bf16, 2^-53 for f64; u_t = that of the dtype; gamma_n = n u):
//   score:       |dS| <= gamma_d S_abs,  S_abs = max over (i, j) of scale sum_c |q_ic k_jc|
//   lse:         |dlse| <= gamma_d S_abs + gamma_tk + 4u                 (plus exp/log's few ulp)
//   P = exp(S - lse): relative error rho = 2 gamma_d S_abs + gamma_tk + 8u
//   O  = sum_j P Z' v:        |dO|  <= (rho + gamma_tk) mag_O + u_t |O|,   mag_O  = sum_j P Z' |v|
//   dV = sum_i P Z' dO:       |ddV| <= (rho + gamma_tq) mag_dV + u_t |dV|, mag_dV = sum_i P Z' |dO|
//   dS = P (dP Z' - D):       its error <= (rho + gamma_d + u_t) mag_dS,
//                             mag_dS = P (Z' sum_c |dO v| + sum_c |dO O|)
//                             (u_t: the backward's D is computed from O as stored in the dtype)
//   dQ = scale sum_j dS k:    |ddQ| <= (rho + gamma_d + u_t + gamma_tk) mag_dQ + u_t |dQ|,
//                             mag_dQ = scale sum_j mag_dS |k|;  dK likewise over i with |q| and gamma_tq.
// Each stored result also carries its rounding to the dtype: u_t |x|, or eta_t = half the subnormal
// spacing for a tiny x (2^-25 in f16). The check allows twice each bound (second-order terms and
// the exp's 4 ulp), plus 1e-30.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention_tiles.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"
#include "support/attention_reference.h"
#include "support/host_buffer.h"
#include "support/roundoff.h"

namespace {

using hg::DType;
using hg::kernels::AttentionProblem;
using hg::kernels::AttentionTensor;
using hg::kernels::cpu::detail::AttentionPath;
using hg::testing::HostBuffer;
namespace detail = hg::kernels::cpu::detail;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kSentinel = 768.0;  // in the gaps of strided operands, exact in every dtype
using hg::testing::accumulate_roundoff;
using hg::testing::kFloatingTypes;
using hg::testing::unit_roundoff;
// Half the spacing of the dtype's subnormals: the absolute rounding error of a tiny result.
double subnormal_rounding(DType t) {
  switch (t) {
    case DType::f64:
      return 0.0;
    case DType::f16:
      return 0x1p-25;
    case DType::bf16:
      return 0x1p-134;
    default:
      return 0x1p-150;
  }
}

bool has_avx512() { return detail::cpu_has_avx512_gemm(); }

// One [batch, heads, rows, d] operand in a buffer of its dtype, contiguous or in the strided layout
// rows of [B, rows, H, d + 3] (the pad columns hold kSentinel).
class Operand {
 public:
  Operand(DType dtype, int64_t batch, int64_t heads, int64_t rows, int64_t d, bool strided)
      : batch_(batch),
        heads_(heads),
        rows_(rows),
        d_(d),
        ld_(strided ? d + 3 : d),
        buffer_(dtype, std::max<int64_t>(batch * heads * rows * (strided ? d + 3 : d), 1)) {
    if (strided) {
      tensor_ = {buffer_.data(), rows * heads * ld_, ld_, heads * ld_};
    } else {
      tensor_ = {buffer_.data(), heads * rows * d, rows * d, d};
    }
    for (int64_t i = 0; i < buffer_.size(); ++i) buffer_.set(i, kSentinel);
  }

  AttentionTensor tensor() const { return tensor_; }
  int64_t index(int64_t b, int64_t h, int64_t r, int64_t c) const { return tensor_.offset(b, h, r) + c; }

  // Fresh values in [-amplitude, amplitude), rounded to the dtype.
  void randomize(std::mt19937& rng, double amplitude) {
    std::uniform_real_distribution<double> dist(-amplitude, amplitude);
    for_each([&](int64_t at, int64_t) { buffer_.set(at, dist(rng)); });
  }
  void poison() {
    for_each([&](int64_t at, int64_t) { buffer_.set(at, kNaN); });
  }
  // Dense [B, H, rows, d] doubles of the stored values.
  std::vector<double> dense() const {
    std::vector<double> out(size_t(batch_ * heads_ * rows_ * d_));
    for_each([&](int64_t at, int64_t flat) { out[size_t(flat)] = buffer_.get(at); });
    return out;
  }
  // True when every pad element still holds the sentinel.
  bool gaps_intact() const {
    if (ld_ == d_) return true;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t h = 0; h < heads_; ++h)
          for (int64_t c = d_; c < ld_; ++c)
            if (buffer_.get(index(b, h, r, 0) + c) != kSentinel) return false;
    return true;
  }
  const HostBuffer& buffer() const { return buffer_; }
  HostBuffer& buffer_mut() { return buffer_; }

 private:
  template <class F>
  void for_each(F&& f) const {
    int64_t flat = 0;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t h = 0; h < heads_; ++h)
        for (int64_t r = 0; r < rows_; ++r)
          for (int64_t c = 0; c < d_; ++c) f(index(b, h, r, c), flat++);
  }

  int64_t batch_, heads_, rows_, d_, ld_;
  HostBuffer buffer_;
  AttentionTensor tensor_;
};

struct Case {
  DType dtype = DType::f32;
  int64_t batch = 1, heads = 2, tq = 17, tk = 17, d = 64;
  bool causal = false;
  double dropout = 0.0;
  bool strided = true;
  AttentionPath path = AttentionPath::automatic;

  std::string describe() const {
    return std::string(hg::dtype_name(dtype)) + " B" + std::to_string(batch) + " H" + std::to_string(heads) + " tq" +
           std::to_string(tq) + " tk" + std::to_string(tk) + " d" + std::to_string(d) + (causal ? " causal" : "") +
           " dropout " + std::to_string(dropout) + (strided ? " strided" : " contiguous") +
           (path == AttentionPath::portable ? " portable"
            : path == AttentionPath::avx512 ? " avx512"
                                            : " auto");
  }
  AttentionProblem problem(uint64_t seed) const {
    AttentionProblem p;
    p.batch = batch, p.heads = heads, p.tq = tq, p.tk = tk, p.d = d;
    p.scale = 1.0 / std::sqrt(double(d));
    p.causal = causal;
    p.dropout_p = dropout;
    p.seed = seed, p.offset = 977;
    return p;
  }
};

// The magnitudes of the tolerance (file comment), in double, one (b, h) at a time.
struct Magnitudes {
  std::vector<double> o, dq, dk, dv;
  double s_abs = 0;
};

Magnitudes magnitudes(const AttentionProblem& p, const std::vector<double>& q, const std::vector<double>& k,
                      const std::vector<double>& v, const std::vector<double>& dout,
                      const hg::testing::AttentionReference& ref) {
  const int64_t tq = p.tq, tk = p.tk, d = p.d, bh = p.batch * p.heads;
  Magnitudes m;
  m.o.assign(size_t(bh * tq * d), 0.0);
  m.dq.assign(size_t(bh * tq * d), 0.0);
  m.dk.assign(size_t(bh * tk * d), 0.0);
  m.dv.assign(size_t(bh * tk * d), 0.0);
  const double keep_scale = 1.0 / (1.0 - p.dropout_p);
  for (int64_t g = 0; g < bh; ++g)
    for (int64_t i = 0; i < tq; ++i) {
      const int64_t qi = (g * tq + i) * d;
      double abs_d = 0;
      for (int64_t c = 0; c < d; ++c) abs_d += std::abs(dout[size_t(qi + c)] * ref.o[size_t(qi + c)]);
      for (int64_t j = 0; j < std::min(p.visible_keys(i), tk); ++j) {
        const int64_t kj = (g * tk + j) * d;
        double s = 0, s_abs = 0, dpv_abs = 0;
        for (int64_t c = 0; c < d; ++c) {
          s += q[size_t(qi + c)] * k[size_t(kj + c)];
          s_abs += std::abs(q[size_t(qi + c)] * k[size_t(kj + c)]);
          dpv_abs += std::abs(dout[size_t(qi + c)] * v[size_t(kj + c)]);
        }
        m.s_abs = std::max(m.s_abs, s_abs * p.scale);
        const double prob = std::exp(s * p.scale - ref.lse[size_t(g * tq + i)]);
        const uint64_t index = uint64_t((g * tq + i) * tk + j);
        const double z =
            p.dropout_p == 0.0 || hg::dropout_keep(p.seed, p.offset, index, float(p.dropout_p)) ? keep_scale : 0.0;
        const double ds = prob * (z * dpv_abs + abs_d);
        for (int64_t c = 0; c < d; ++c) {
          m.o[size_t(qi + c)] += prob * z * std::abs(v[size_t(kj + c)]);
          m.dv[size_t(kj + c)] += prob * z * std::abs(dout[size_t(qi + c)]);
          m.dq[size_t(qi + c)] += p.scale * ds * std::abs(k[size_t(kj + c)]);
          m.dk[size_t(kj + c)] += p.scale * ds * std::abs(q[size_t(qi + c)]);
        }
      }
    }
  return m;
}

// Checks every element of `got` against ref within factor * mag + u_t |ref| + eta_t (twice that, see
// above; eta_t: subnormal_rounding).
void check_close(const std::string& what, const Operand& got, const std::vector<double>& ref,
                 const std::vector<double>& mag, double factor, double u_t, double eta_t) {
  const std::vector<double> values = got.dense();
  int64_t bad = 0, first_bad = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = 2.0 * (factor * mag[i] + u_t * std::abs(ref[i]) + eta_t) + 1e-30;
    const double err = std::abs(values[i] - ref[i]);
    if (!(err <= tol)) {
      if (first_bad < 0) first_bad = int64_t(i);
      ++bad;
    }
    worst_ratio = std::max(worst_ratio, err / tol);
  }
  INFO(what, ": worst error / tolerance = ", worst_ratio);
  if (first_bad >= 0) {
    const size_t i = size_t(first_bad);
    INFO(what, "[", first_bad, "] = ", values[i], ", expected ", ref[i], " (", bad, " elements out of tolerance)");
    CHECK(bad == 0);
  }
  CHECK(got.gaps_intact());
}

struct Outputs {
  Operand o, dq, dk, dv;
  HostBuffer lse, delta;
};

// Runs forward and backward of one case and checks everything against the oracle; returns the
// outputs (for the determinism test).
Outputs run_and_check(const Case& c, uint64_t seed, bool check = true) {
  INFO(c.describe());
  std::mt19937 rng{uint32_t(seed)};
  const AttentionProblem p = c.problem(seed * 31 + 7);
  const DType acc = hg::accumulate_dtype(c.dtype);
  Operand q(c.dtype, c.batch, c.heads, c.tq, c.d, c.strided), k(c.dtype, c.batch, c.heads, c.tk, c.d, c.strided),
      v(c.dtype, c.batch, c.heads, c.tk, c.d, c.strided), dout(c.dtype, c.batch, c.heads, c.tq, c.d, c.strided);
  q.randomize(rng, 2.0);
  k.randomize(rng, 2.0);
  v.randomize(rng, 1.0);
  dout.randomize(rng, 1.0);
  Outputs out{Operand(c.dtype, c.batch, c.heads, c.tq, c.d, c.strided),
              Operand(c.dtype, c.batch, c.heads, c.tq, c.d, c.strided),
              Operand(c.dtype, c.batch, c.heads, c.tk, c.d, c.strided),
              Operand(c.dtype, c.batch, c.heads, c.tk, c.d, c.strided),
              HostBuffer(acc, p.rows()),
              HostBuffer(acc, p.rows())};
  out.o.poison();
  out.dq.poison();
  out.dk.poison();
  out.dv.poison();
  out.lse.poison_with_nan();
  out.delta.poison_with_nan();

  detail::attention_forward_on(c.path, p, q.tensor(), k.tensor(), v.tensor(), out.o.tensor(), out.lse.data(), c.dtype);
  detail::attention_backward_on(c.path, p, q.tensor(), k.tensor(), v.tensor(), out.o.tensor(), dout.tensor(),
                                out.lse.data(), out.delta.data(), out.dq.tensor(), out.dk.tensor(), out.dv.tensor(),
                                c.dtype);
  if (!check) return out;

  const std::vector<double> qd = q.dense(), kd = k.dense(), vd = v.dense(), dod = dout.dense();
  const hg::testing::AttentionReference ref = hg::testing::attention_reference(p, qd, kd, vd, dod);
  const Magnitudes mag = magnitudes(p, qd, kd, vd, dod, ref);
  const double u = accumulate_roundoff(c.dtype), u_t = unit_roundoff(c.dtype);
  const double gd = double(c.d) * u, gq = double(c.tq) * u, gk = double(c.tk) * u;
  const double u_out = c.dtype == DType::f64 || c.dtype == DType::f32 ? 0.0 : u_t;  // half: O stored rounded
  const double rho = 2 * gd * mag.s_abs + gk + 8 * u;
  const double eta = subnormal_rounding(c.dtype);

  // lse and delta, in the accumulation type.
  // (|lse| <= S_abs + log tk: the log's own rounding is relative to it.)
  const double lse_tol = 2 * (gd * mag.s_abs + gk + 4 * u * (1 + mag.s_abs + std::log(double(c.tk))));
  int64_t bad_lse = 0, bad_delta = 0;
  const std::vector<double> od = out.o.dense();
  for (int64_t r = 0; r < p.rows(); ++r) {
    if (!(std::abs(out.lse.get(r) - ref.lse[size_t(r)]) <= lse_tol)) ++bad_lse;
    // delta = sum_c dO O, from the O the kernel stored: a d-term sum in the accumulation type.
    double expected = 0, magnitude = 0;
    for (int64_t col = 0; col < c.d; ++col) {
      expected += dod[size_t(r * c.d + col)] * od[size_t(r * c.d + col)];
      magnitude += std::abs(dod[size_t(r * c.d + col)] * od[size_t(r * c.d + col)]);
    }
    if (!(std::abs(out.delta.get(r) - expected) <= 2 * gd * magnitude + 1e-30)) ++bad_delta;
  }
  CHECK(bad_lse == 0);
  CHECK(bad_delta == 0);
  check_close("o", out.o, ref.o, mag.o, rho + gk, u_t, eta);
  check_close("dv", out.dv, ref.dv, mag.dv, rho + gq, u_t, eta);
  check_close("dq", out.dq, ref.dq, mag.dq, rho + gd + u_out + gk, u_t, eta);
  check_close("dk", out.dk, ref.dk, mag.dk, rho + gd + u_out + gq, u_t, eta);
  return out;
}

std::vector<AttentionPath> paths_to_test() {
  std::vector<AttentionPath> paths{AttentionPath::portable};
  if (has_avx512()) paths.push_back(AttentionPath::avx512);
  return paths;
}

}  // namespace

TEST_CASE("attention cpu: every dtype, causal and not, tq = tk, every head dimension (strided)") {
  uint64_t seed = 1;
  for (DType dtype : kFloatingTypes)
    for (bool causal : {false, true})
      for (int64_t t : {1, 17, 64, 256})
        for (int64_t d : {16, 64, 128, 80}) {
          Case c;
          c.dtype = dtype, c.tq = c.tk = t, c.d = d, c.causal = causal;
          run_and_check(c, seed++);
        }
}

TEST_CASE("attention cpu: tq < tk (a query block at the end of the keys), causal and not") {
  uint64_t seed = 100;
  for (DType dtype : kFloatingTypes)
    for (bool causal : {false, true})
      for (auto [tq, tk] : {std::pair<int64_t, int64_t>{1, 100}, {17, 64}, {64, 256}, {100, 130}}) {
        Case c;
        c.dtype = dtype, c.tq = tq, c.tk = tk, c.d = 80, c.causal = causal;
        run_and_check(c, seed++);
      }
}

TEST_CASE("attention cpu: dropout on the probabilities with the Philox keep bits") {
  uint64_t seed = 200;
  for (DType dtype : kFloatingTypes)
    for (bool causal : {false, true})
      for (auto [tq, tk] : {std::pair<int64_t, int64_t>{17, 17}, {70, 130}, {129, 129}}) {
        Case c;
        c.dtype = dtype, c.tq = tq, c.tk = tk, c.d = 64, c.causal = causal, c.dropout = 0.25;
        c.batch = 2;
        run_and_check(c, seed++);
      }
}

TEST_CASE("attention cpu: contiguous operands, several batches and heads") {
  uint64_t seed = 300;
  for (DType dtype : kFloatingTypes)
    for (bool causal : {false, true}) {
      Case c;
      c.dtype = dtype, c.batch = 2, c.heads = 3, c.tq = 65, c.tk = 65, c.d = 32, c.causal = causal, c.strided = false;
      run_and_check(c, seed++);
    }
}

TEST_CASE("attention cpu: the portable and the AVX-512 tile paths, each checked on its own") {
  if (!has_avx512()) MESSAGE("this CPU lacks AVX-512: only the portable path is checked");
  uint64_t seed = 400;
  for (AttentionPath path : paths_to_test())
    for (DType dtype : kFloatingTypes)
      for (bool causal : {false, true})
        for (auto [t, d] : {std::pair<int64_t, int64_t>{1, 16}, {64, 64}, {97, 80}, {200, 128}}) {
          Case c;
          c.dtype = dtype, c.tq = c.tk = t, c.d = d, c.causal = causal, c.path = path;
          c.dropout = t == 97 ? 0.1 : 0.0;
          run_and_check(c, seed++);
        }
}

TEST_CASE("attention cpu: the result does not depend on the thread count (1 vs 2 OpenMP threads)") {
  const int saved = omp_get_max_threads();
  for (DType dtype : {DType::f32, DType::bf16, DType::f64})
    for (AttentionPath path : paths_to_test()) {
      Case c;
      c.dtype = dtype, c.batch = 2, c.heads = 3, c.tq = 150, c.tk = 200, c.d = 80, c.causal = true, c.dropout = 0.1;
      c.path = path;
      INFO(c.describe());
      omp_set_num_threads(1);
      const Outputs one = run_and_check(c, 500, false);
      omp_set_num_threads(2);
      const Outputs two = run_and_check(c, 500, false);
      CHECK(one.o.buffer().bitwise_equal(two.o.buffer()));
      CHECK(one.lse.bitwise_equal(two.lse));
      CHECK(one.delta.bitwise_equal(two.delta));
      CHECK(one.dq.buffer().bitwise_equal(two.dq.buffer()));
      CHECK(one.dk.buffer().bitwise_equal(two.dk.buffer()));
      CHECK(one.dv.buffer().bitwise_equal(two.dv.buffer()));
    }
  omp_set_num_threads(saved);
}

TEST_CASE("attention cpu: a half forward is the f32 forward of the widened operands, rounded once") {
  // The half path converts rows and then runs the f32 path's arithmetic, so O must be the f32 O
  // rounded and lse the f32 lse, bit for bit. This pins the conversions: the keys and values a thread
  // converted for one query tile are reused by the next tiles of that (b, h) -- with whole (b, h)s
  // handed out (many heads) and with single tiles (one head over two threads) -- and never by another
  // call: a second round on the same buffers has new keys, and bf16 and f16 calls alternate (their
  // converted rows share one float workspace per thread).
  const int saved = omp_get_max_threads();
  const int64_t t = 200, d = 64;
  for (int64_t heads : {int64_t(1), int64_t(6)})
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      std::mt19937 rng{uint32_t(heads * 10 + threads)};
      const auto widen = [](const Operand& from, Operand& to) {
        for (int64_t i = 0; i < from.buffer().size(); ++i) to.buffer_mut().set(i, from.buffer().get(i));
      };
      struct Operands {
        Operand q, k, v, q32, k32, v32;
      };
      std::vector<Operands> by_dtype;
      for (DType dtype : {DType::bf16, DType::f16}) {
        by_dtype.push_back({Operand(dtype, 1, heads, t, d, true), Operand(dtype, 1, heads, t, d, true),
                            Operand(dtype, 1, heads, t, d, true), Operand(DType::f32, 1, heads, t, d, true),
                            Operand(DType::f32, 1, heads, t, d, true), Operand(DType::f32, 1, heads, t, d, true)});
        Operands& x = by_dtype.back();
        x.q.randomize(rng, 2.0);
        x.v.randomize(rng, 1.0);
        widen(x.q, x.q32);
        widen(x.v, x.v32);
      }
      for (int round = 0; round < 2; ++round)  // round 1: new keys in the same buffers
        for (size_t which = 0; which < by_dtype.size(); ++which) {
          Operands& x = by_dtype[which];
          const DType dtype = which == 0 ? DType::bf16 : DType::f16;
          Case c;
          c.dtype = dtype, c.heads = heads, c.tq = c.tk = t, c.d = d, c.causal = true;
          INFO(c.describe(), " threads ", threads, " round ", round);
          const AttentionProblem p = c.problem(3);
          x.k.randomize(rng, 2.0);
          widen(x.k, x.k32);
          Operand o(dtype, 1, heads, t, d, true), o32(DType::f32, 1, heads, t, d, true),
              rounded(dtype, 1, heads, t, d, true);
          HostBuffer lse(DType::f32, p.rows()), lse32(DType::f32, p.rows());
          o.poison();
          lse.poison_with_nan();
          detail::attention_forward_on(AttentionPath::automatic, p, x.q.tensor(), x.k.tensor(), x.v.tensor(),
                                       o.tensor(), lse.data(), dtype);
          detail::attention_forward_on(AttentionPath::automatic, p, x.q32.tensor(), x.k32.tensor(), x.v32.tensor(),
                                       o32.tensor(), lse32.data(), DType::f32);
          widen(o32, rounded);
          CHECK(o.buffer().bitwise_equal(rounded.buffer()));
          CHECK(lse.bitwise_equal(lse32));
        }
    }
  omp_set_num_threads(saved);
}

TEST_CASE("attention cpu: bad problems are hg::Errors naming what was wrong") {
  HostBuffer buf(DType::f32, 64), lse(DType::f32, 8);
  const AttentionTensor t{buf.data(), 0, 0, 4};
  AttentionProblem p;
  p.batch = 1, p.heads = 1, p.tq = 2, p.tk = 2, p.d = 4;
  const auto forward_error = [&](const AttentionProblem& problem, DType dtype, AttentionTensor q) {
    try {
      hg::kernels::cpu::attention_forward(problem, q, t, t, t, lse.data(), dtype);
    } catch (const hg::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(forward_error(p, DType::i32, t).find("expected a floating dtype (f32, f64, f16, bf16), got i32") !=
        std::string::npos);
  AttentionProblem causal = p;
  causal.causal = true, causal.tq = 3;
  CHECK(forward_error(causal, DType::f32, t).find("causal attention expects tk >= tq, got tq=3, tk=2") !=
        std::string::npos);
  AttentionProblem drop = p;
  drop.dropout_p = 1.0;
  CHECK(forward_error(drop, DType::f32, t).find("expected dropout_p in [0, 1), got 1") != std::string::npos);
  AttentionProblem no_keys = p;
  no_keys.tk = 0;
  CHECK(forward_error(no_keys, DType::f32, t).find("expected at least one key for 2 queries, got tk=0") !=
        std::string::npos);
  AttentionProblem no_dim = p;
  no_dim.d = 0;
  CHECK(forward_error(no_dim, DType::f32, t).find("expected a head dimension d >= 1, got d=0") != std::string::npos);
  CHECK(forward_error(p, DType::f32, AttentionTensor{}).find("q is null; expected 8 elements") != std::string::npos);
  HostBuffer delta(DType::f32, 8);
  CHECK_THROWS_WITH_AS(hg::kernels::cpu::attention_backward(p, t, t, t, t, t, lse.data(), nullptr, t, t, t, DType::f32),
                       doctest::Contains("delta is null; expected 2 elements"), hg::Error);
}

TEST_CASE("attention cpu: the AVX-512 exp is within 4 ulp of exp, 0 below -87.3, and keeps inf and NaN") {
  if (!has_avx512()) {
    MESSAGE("SKIPPED: this CPU lacks AVX-512");
    return;
  }
  std::vector<float> x, y;
  for (double at = -87.3; at <= 88.7; at += 0.000731) x.push_back(float(at));
  for (float special : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.7f, -87.29f}) x.push_back(special);
  y.assign(x.size(), std::numeric_limits<float>::quiet_NaN());
  detail::exp_f32_avx512(x.data(), y.data(), int64_t(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(double(x[i]));
    worst = std::max(worst, std::abs(double(y[i]) - exact) / exact);
  }
  INFO("worst relative error ", worst, " = ", worst / 0x1p-24, " ulp of 2^-24 over ", x.size(), " points");
  CHECK(worst <= 0x1p-22);
  const float special_in[] = {
      -std::numeric_limits<float>::infinity(), -100.0f, -87.5f,
      std::numeric_limits<float>::infinity(),  100.0f,  std::numeric_limits<float>::quiet_NaN()};
  float special_out[6];
  detail::exp_f32_avx512(special_in, special_out, 6);
  CHECK(special_out[0] == 0.0f);
  CHECK(special_out[1] == 0.0f);
  CHECK(special_out[2] == 0.0f);
  CHECK(special_out[3] == std::numeric_limits<float>::infinity());
  CHECK(special_out[4] == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(special_out[5]));
}
