// The AVX-512 vector math (kernels/cpu/simd_math_avx512.h, through vector_math.h's array functions)
// and the softmax / GELU kernels that use it (softmax.cpp, elementwise.cpp's GELU, bias_gelu.cpp):
//   - exp, tanh, erf: max ulp error against float64 std:: on a dense sweep of float bit patterns
//     (every kSweepStride-th of all 2^32, both signs; the bound is asserted, the measured maxima are
//     printed and stated in docs/precision.md, next to std::expf/tanhf/erff's own), plus the special
//     inputs: +-0, +-inf, NaN, subnormals, the overflow and underflow edges;
//   - GELU (tanh and erf) and their slopes: error against float64 formulas, relative to
//     max(|ref|, 1e-3 absolute floor) where the float formulas' own rounding is that large;
//   - softmax / log-softmax forward and backward, GELU forward / backward and bias_gelu in f32, bf16
//     and f16 at awkward lengths (1, 15, 17, 255, 1000) and causal-masked rows, against float64
//     references, on every tier this CPU runs (vector_math_force), and the tiers against each other;
//   - the bf16 GELU lookup tables (gelu_table.h): every one of the 2^16 inputs, NaNs included,
//     looked up and evaluated give the same bits, forward and backward, tanh and erf forms (and f16,
//     which is not looked up, gives the same bits with the switch on and off).
// Outputs are poisoned (NaN) before every kernel call; inputs are fresh seeded random values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bias_gelu.h"
#include "kernels/cpu/calibration_rule.h"
#include "kernels/cpu/gelu_table.h"
#include "kernels/cpu/tier_calibration.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "support/gelu_reference.h"
#include "support/half_values.h"

namespace cpu = hg::kernels::cpu;
using cpu::VectorFunction;
using cpu::VectorMath;

namespace {

#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
constexpr uint32_t kSweepStride = 61;
#else
constexpr uint32_t kSweepStride = 4099;
#endif

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<VectorMath> tiers() {
  std::vector<VectorMath> t{VectorMath::portable};
  if (cpu::vector_math_best() == VectorMath::avx512) t.push_back(VectorMath::avx512);
  return t;
}

// Restores the CPU's tier however the test case ends.
struct ForceTier {
  explicit ForceTier(VectorMath t) { cpu::vector_math_force(t); }
  ~ForceTier() { cpu::vector_math_reset(); }
};

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// |got - ref| in units of the float spacing at ref (the subnormal spacing at least).
double ulp_error(float got, double ref) {
  const float r = float(ref);
  if (std::isnan(ref) || std::isinf(r)) return (std::isnan(got) == std::isnan(ref) && (std::isnan(ref) || got == r)) ? 0 : 1e30;
  if (!std::isfinite(got)) return 1e30;
  const float a = std::fabs(r);
  const double spacing = a == std::numeric_limits<float>::max() ? double(a) - double(std::nextafter(a, 0.0f))
                                                                 : double(std::nextafter(a, kInf)) - double(a);
  return std::fabs(double(got) - ref) / spacing;
}

double reference(VectorFunction f, double x) {
  switch (f) {
    case VectorFunction::exp: return std::exp(x);
    case VectorFunction::tanh: return std::tanh(x);
    case VectorFunction::erf: return std::erf(x);
    default: return 0;
  }
}

struct SweepResult {
  double max_ulp = 0, std_max_ulp = 0;
  float worst_x = 0;
};

SweepResult sweep(VectorFunction f, float lo, float hi, uint32_t stride) {
  std::vector<float> in, out;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += stride) {
    const float x = from_bits(uint32_t(b));
    if (std::isfinite(x) && x >= lo && x <= hi) in.push_back(x);
  }
  out.assign(in.size(), kNaN);
  cpu::vector_math_apply(f, in.data(), out.data(), int64_t(in.size()), VectorMath::avx512);
  std::vector<float> mine_std(in.size());
  cpu::vector_math_apply(f, in.data(), mine_std.data(), int64_t(in.size()), VectorMath::portable);
  SweepResult r;
  for (size_t i = 0; i < in.size(); ++i) {
    const double ref = reference(f, double(in[i]));
    const double e = ulp_error(out[i], ref);
    if (e > r.max_ulp) {
      r.max_ulp = e;
      r.worst_x = in[i];
    }
    r.std_max_ulp = std::max(r.std_max_ulp, ulp_error(mine_std[i], ref));
  }
  return r;
}

}  // namespace

TEST_CASE("vector math: exp, tanh, erf within their ulp bounds of float64 std:: on a dense sweep") {
  if (cpu::vector_math_best() != VectorMath::avx512) {
    MESSAGE("SKIPPED: this CPU has no AVX-512 (the portable tier is std::)");
    return;
  }
  struct Case {
    const char* name;
    VectorFunction f;
    float lo, hi;
    double bound;
  };
  // exp: the whole range where it is finite and nonzero, and beyond; tanh and erf: everywhere.
  const Case cases[] = {{"exp", VectorFunction::exp, -110.0f, 100.0f, 2.0},
                        {"tanh", VectorFunction::tanh, -kInf, kInf, 2.0},
                        {"erf", VectorFunction::erf, -kInf, kInf, 2.0}};
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const SweepResult r = sweep(c.f, c.lo, c.hi, kSweepStride);
    std::printf("vector math %-5s max %.3f ulp (at %.9g); std:: float %.3f ulp; every %u-th float\n", c.name, r.max_ulp,
                double(r.worst_x), r.std_max_ulp, kSweepStride);
    CHECK(r.max_ulp <= c.bound);
  }
}

TEST_CASE("vector math: special inputs") {
  if (cpu::vector_math_best() != VectorMath::avx512) return;
  const float denormal = std::numeric_limits<float>::denorm_min(), small_normal = std::numeric_limits<float>::min();
  const std::vector<float> xs{0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, denormal, -denormal, 3e-39f, -3e-39f,
                              small_normal, -small_normal, 88.72f, 88.73f, 89.0f, 1000.0f, -87.3f, -100.0f,
                              -103.9f, -104.0f, -1000.0f, 1e30f, -1e30f, 0.625f, -0.625f, 1.0f, -1.0f, 4.0f,
                              -4.0f, 10.5f, 11.0f, -11.0f};
  std::vector<float> out(xs.size());
  for (VectorFunction f : {VectorFunction::exp, VectorFunction::tanh, VectorFunction::erf}) {
    std::fill(out.begin(), out.end(), 12345.0f);
    cpu::vector_math_apply(f, xs.data(), out.data(), int64_t(xs.size()), VectorMath::avx512);
    for (size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(int(f));
      CAPTURE(xs[i]);
      CAPTURE(out[i]);
      const double ref = reference(f, double(xs[i]));
      CHECK(ulp_error(out[i], ref) <= 2.0);
      if (xs[i] == 0 && f != VectorFunction::exp) CHECK(std::signbit(out[i]) == std::signbit(xs[i]));
    }
  }
}

using hg::testing::gelu_ref;
using hg::testing::gelu_slope_ref;

TEST_CASE("vector math: GELU and its slope against float64, tanh and erf forms") {
  // Relative error; GELU's values relative down to 1e-6 (the rewritten formulas do not cancel in
  // the negative tail), the slopes relative to max(|slope|, 1): the slope is a sum of O(1) terms that
  // cancel near x = -0.75, so no float formula is relatively accurate at its zero.
  std::vector<float> xs;
  for (float x = -12.0f; x <= 12.0f; x += 0.000731f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 1e4f, -1e4f}) xs.push_back(x);
  std::vector<float> out(xs.size());
  const struct {
    VectorFunction f;
    bool erf, slope;
  } cases[] = {{VectorFunction::gelu_tanh, false, false},
               {VectorFunction::gelu_tanh_slope, false, true},
               {VectorFunction::gelu_erf, true, false},
               {VectorFunction::gelu_erf_slope, true, true}};
  for (VectorMath tier : tiers()) {
    for (const auto& c : cases) {
      CAPTURE(cpu::vector_math_name(tier));
      CAPTURE(int(c.f));
      std::fill(out.begin(), out.end(), kNaN);
      cpu::vector_math_apply(c.f, xs.data(), out.data(), int64_t(xs.size()), tier);
      double worst = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const double ref = c.slope ? gelu_slope_ref(xs[i], c.erf) : gelu_ref(xs[i], c.erf);
        const double err = std::fabs(double(out[i]) - ref) / std::max(std::fabs(ref), c.slope ? 1.0 : 1e-6);
        worst = std::max(worst, err);
      }
      std::printf("gelu %s %s%s: max relative error %.3g\n", cpu::vector_math_name(tier),
                  c.erf ? "erf" : "tanh", c.slope ? " slope" : "", worst);
      if (tier == VectorMath::avx512) CHECK(worst <= 4e-6);
    }
  }
  if (cpu::vector_math_best() == VectorMath::avx512) {  // limits and NaN
    const std::vector<float> sp{kInf, -kInf, kNaN};
    std::vector<float> o(3);
    cpu::vector_math_apply(VectorFunction::gelu_tanh, sp.data(), o.data(), 3, VectorMath::avx512);
    CHECK(o[0] == kInf);
    CHECK(std::isnan(o[1]));  // -inf * 0, as the float formula gives
    CHECK(std::isnan(o[2]));
    cpu::vector_math_apply(VectorFunction::gelu_erf, sp.data(), o.data(), 3, VectorMath::avx512);
    CHECK(o[0] == kInf);
    CHECK(std::isnan(o[1]));
    CHECK(std::isnan(o[2]));
  }
}

// ==== the kernels on every tier ===================================================================

namespace {

using hg::testing::d;
using hg::testing::dtype_of;
using hg::testing::poison;
using hg::testing::random_values;
using hg::testing::roundoff;
using hg::testing::subnormal_floor;
using hg::testing::widened;

// |got - ref| <= (roundoff(T) + rel32) |ref| + floor(T) + abs32, elementwise, with the first
// failure reported.
template <class T>
void check_near(const std::vector<T>& got, const std::vector<double>& ref, double rel32, double abs32,
                const std::string& what, const std::vector<double>* abs_each = nullptr) {
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = d(got[i]);
    bool ok;
    if (std::isnan(ref[i]) || std::isinf(ref[i])) ok = std::isnan(ref[i]) ? std::isnan(g) : g == ref[i];
    else ok = std::fabs(g - ref[i]) <= (roundoff<T>() + rel32) * std::fabs(ref[i]) + subnormal_floor<T>() + abs32 +
                                           (abs_each != nullptr ? (*abs_each)[i] : 0.0);
    if (!ok && bad++ == 0) {
      CAPTURE(what);
      CAPTURE(i);
      CAPTURE(g);
      CAPTURE(ref[i]);
      CHECK(ok);
    }
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " elements out of bounds");
}

// On the AVX-512 tier a half result is the f32 result (same inputs, widened) rounded once.
template <class T>
void check_rounded_once(const std::vector<T>& half_out, const std::vector<float>& f32_out, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < half_out.size(); ++i) {
    const T expect(f32_out[i]);
    if (std::memcmp(&expect, &half_out[i], sizeof(T)) != 0) ++bad;
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " half results are not the f32 result rounded once");
}

struct SoftmaxShape {
  int64_t rows, cols, causal_rows;
};
const SoftmaxShape kShapes[] = {{3, 1, 0},    {4, 15, 0},  {4, 17, 0},  {3, 255, 0},
                                {64, 1000, 0}, {17, 17, 17}, {6, 255, 3}, {2, 1000, 1000}};

int64_t visible_of(const SoftmaxShape& s, int64_t r) {
  return s.causal_rows > 0 ? (r % s.causal_rows) + (s.cols - s.causal_rows) + 1 : s.cols;
}

template <class T>
void softmax_case(VectorMath tier, const SoftmaxShape& s, bool log, std::mt19937& rng) {
  const ForceTier force(tier);
  const int64_t n = s.rows * s.cols;
  const std::string what = std::string(cpu::vector_math_name(tier)) + " " + hg::dtype_name(dtype_of<T>()) +
                           (log ? " log_softmax " : " softmax ") + std::to_string(s.rows) + "x" +
                           std::to_string(s.cols) + " causal " + std::to_string(s.causal_rows);
  const std::vector<T> x = random_values<T>(rng, n, -8, 8), dy = random_values<T>(rng, n, -1, 1);
  std::vector<T> y = poison<T>(n), dx = poison<T>(n);
  cpu::softmax_forward(x.data(), y.data(), s.rows, s.cols, log, s.causal_rows, dtype_of<T>());
  // f32 error bounds (u = 2^-24): a row sum of `cols` terms is off by at most `terms` u relative to
  // the sum of magnitudes, terms = cols for a sequential sum (the portable tier, which the compiler
  // may or may not vectorise) and cols / 32 + 6 for the AVX-512 tier's 32 partial sums added
  // pairwise; exp, the division and the final rounding add 4 u.
  const double u = 0x1p-24;
  const double terms = tier == VectorMath::avx512 ? double(s.cols) / 32 + 6 : double(s.cols);
  std::vector<double> ref(static_cast<size_t>(n)), dref(static_cast<size_t>(n)), dbound(static_cast<size_t>(n));
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t v = visible_of(s, r);
    double m = -INFINITY, sum = 0, dsum = 0, dmag = 0;
    for (int64_t c = 0; c < v; ++c) m = std::max(m, d(x[r * s.cols + c]));
    for (int64_t c = 0; c < v; ++c) sum += std::exp(d(x[r * s.cols + c]) - m);
    for (int64_t c = 0; c < s.cols; ++c) {
      const double xv = d(x[r * s.cols + c]);
      ref[r * s.cols + c] = c >= v ? (log ? -INFINITY : 0.0) : log ? xv - m - std::log(sum) : std::exp(xv - m) / sum;
    }
    // The backward reference reads the kernel's own (rounded) y, as the engine's backward does.
    for (int64_t c = 0; c < s.cols; ++c) {
      const double term = log ? d(dy[r * s.cols + c]) : d(dy[r * s.cols + c]) * d(y[r * s.cols + c]);
      dsum += term;
      dmag += std::fabs(term);
    }
    for (int64_t c = 0; c < s.cols; ++c) {
      const int64_t i = r * s.cols + c;
      dref[i] = log ? d(dy[i]) - std::exp(d(y[i])) * dsum : d(y[i]) * (d(dy[i]) - dsum);
      // The sum's error, scaled by what multiplies it (y or exp(y)), plus 4 u of the terms.
      const double scale = log ? std::exp(d(y[i])) : std::fabs(d(y[i]));
      dbound[i] = (terms + 4) * u * scale * dmag + 4 * u * (std::fabs(d(dy[i])) + scale * std::fabs(dsum));
    }
  }
  // Forward: softmax relative (terms + 4) u; log_softmax x - m - log(s), absolute (terms + 4) u for
  // log(s) plus the rounding of |x - m| <= 16 + log(1000).
  if (log) check_near(y, ref, 4 * u, (terms + 4 + 24) * u, what + " forward");
  else check_near(y, ref, (terms + 4) * u, 0, what + " forward");
  if (!(log && s.causal_rows > 0)) {  // masked log outputs are -inf, whose gradient is undefined
    cpu::softmax_backward(y.data(), dy.data(), dx.data(), s.rows, s.cols, log, dtype_of<T>());
    check_near(dx, dref, 0, 0, what + " backward", &dbound);
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (tier == VectorMath::avx512) {  // the same inputs in f32, rounded once to T
      const std::vector<float> xf = widened(x), dyf = widened(dy);
      std::vector<float> yf = poison<float>(n), dxf = poison<float>(n);
      cpu::softmax_forward(xf.data(), yf.data(), s.rows, s.cols, log, s.causal_rows, hg::DType::f32);
      check_rounded_once(y, yf, what + " forward");
      if (!(log && s.causal_rows > 0)) {
        const std::vector<float> yw = widened(y);
        cpu::softmax_backward(yw.data(), dyf.data(), dxf.data(), s.rows, s.cols, log, hg::DType::f32);
        check_rounded_once(dx, dxf, what + " backward");
      }
    }
  }
}

template <class T>
void softmax_all(std::mt19937& rng) {
  for (VectorMath tier : tiers())
    for (const SoftmaxShape& s : kShapes)
      for (bool log : {false, true}) softmax_case<T>(tier, s, log, rng);
}

}  // namespace

TEST_CASE("softmax / log_softmax on every tier: f32, bf16, f16 at lengths 1..1000, causal rows, vs float64") {
  std::mt19937 rng(2026);
  softmax_all<float>(rng);
  softmax_all<hg::bfloat16>(rng);
  softmax_all<hg::half>(rng);
}

TEST_CASE("softmax: a NaN makes its row NaN and no other, and the tiers agree") {
  std::mt19937 rng(7);
  const int64_t rows = 4, cols = 37;
  std::vector<float> x = random_values<float>(rng, rows * cols, -5, 5);
  x[size_t(1 * cols + 20)] = kNaN;
  std::vector<std::vector<float>> outs;
  for (VectorMath tier : tiers()) {
    const ForceTier force(tier);
    for (bool log : {false, true}) {
      std::vector<float> y = poison<float>(rows * cols);
      // Poison with a finite value so NaN outputs are the kernel's own.
      std::fill(y.begin(), y.end(), 12345.0f);
      cpu::softmax_forward(x.data(), y.data(), rows, cols, log, 0, hg::DType::f32);
      for (int64_t c = 0; c < cols; ++c) CHECK(std::isnan(y[size_t(cols + c)]));
      for (int64_t r : {0, 2, 3})
        for (int64_t c = 0; c < cols; ++c) CHECK(std::isfinite(y[size_t(r * cols + c)]));
      outs.push_back(y);
    }
  }
  if (outs.size() == 4) {  // portable vs avx512, softmax and log_softmax: a few ulp apart
    for (int k = 0; k < 2; ++k)
      for (size_t i = 0; i < outs[size_t(k)].size(); ++i) {
        const float a = outs[size_t(k)][i], b = outs[size_t(k + 2)][i];
        if (std::isnan(a)) CHECK(std::isnan(b));
        else CHECK(std::fabs(a - b) <= 4e-6f * (1 + std::fabs(a)));
      }
  }
}

namespace {

template <class T>
void gelu_case(VectorMath tier, int64_t n, bool erf, std::mt19937& rng) {
  const ForceTier force(tier);
  const std::string what = std::string(cpu::vector_math_name(tier)) + " " + hg::dtype_name(dtype_of<T>()) +
                           (erf ? " gelu_erf n=" : " gelu_tanh n=") + std::to_string(n);
  const auto op = erf ? hg::kernels::UnaryOp::GeluErf : hg::kernels::UnaryOp::GeluTanh;
  const std::vector<T> x = random_values<T>(rng, n, -6, 6), dy = random_values<T>(rng, n, -2, 2);
  std::vector<T> y = poison<T>(n), dx = poison<T>(n);
  cpu::unary_forward(op, x.data(), y.data(), n, 0.0, dtype_of<T>());
  cpu::unary_backward(op, x.data(), nullptr, dy.data(), dx.data(), n, 0.0, dtype_of<T>());
  std::vector<double> ref(static_cast<size_t>(n)), dref(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ref[size_t(i)] = gelu_ref(d(x[size_t(i)]), erf);
    dref[size_t(i)] = d(dy[size_t(i)]) * gelu_slope_ref(d(x[size_t(i)]), erf);
  }
  // f32: the portable tier's 0.5 x (1 + tanh u) cancels for x < 0 (absolute error ~1e-7 |x|).
  check_near(y, ref, 4e-6, 2e-7 * 6, what + " forward");
  check_near(dx, dref, 4e-6, 4e-6 * 2, what + " backward");
  if constexpr (!std::is_same_v<T, float>) {
    if (tier == VectorMath::avx512) {
      const std::vector<float> xf = widened(x), dyf = widened(dy);
      std::vector<float> yf = poison<float>(n), dxf = poison<float>(n);
      cpu::unary_forward(op, xf.data(), yf.data(), n, 0.0, hg::DType::f32);
      cpu::unary_backward(op, xf.data(), nullptr, dyf.data(), dxf.data(), n, 0.0, hg::DType::f32);
      check_rounded_once(y, yf, what + " forward");
      check_rounded_once(dx, dxf, what + " backward");
    }
  }
}

template <class T>
void bias_gelu_case(VectorMath tier, int64_t rows, int64_t cols, bool erf, std::mt19937& rng) {
  const ForceTier force(tier);
  const std::string what = std::string(cpu::vector_math_name(tier)) + " " + hg::dtype_name(dtype_of<T>()) +
                           " bias_gelu " + std::to_string(rows) + "x" + std::to_string(cols) + (erf ? " erf" : " tanh");
  const int64_t n = rows * cols;
  const std::vector<T> x = random_values<T>(rng, n, -5, 5), b = random_values<T>(rng, cols, -1, 1),
                       dy = random_values<T>(rng, n, -2, 2);
  std::vector<T> y = poison<T>(n), dx = poison<T>(n), db = poison<T>(cols);
  cpu::bias_gelu_forward(x.data(), b.data(), y.data(), rows, cols, erf, dtype_of<T>());
  cpu::bias_gelu_backward(x.data(), b.data(), dy.data(), dx.data(), db.data(), rows, cols, erf, dtype_of<T>());
  std::vector<double> ref(static_cast<size_t>(n)), dref(static_cast<size_t>(n)), dbref(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const double v = double(float(float(x[i]) + float(b[size_t(c)])));  // x + b is added in float
      ref[i] = gelu_ref(v, erf);
      dref[i] = d(dy[i]) * gelu_slope_ref(v, erf);
      dbref[size_t(c)] += d(dx[i]);  // the bias gradient sums dx as stored
    }
  check_near(y, ref, 4e-6, 2e-7 * 6, what + " forward");
  check_near(dx, dref, 4e-6, 4e-6 * 2, what + " backward");
  check_near(db, dbref, 1e-6 * double(rows), 1e-6 * double(rows), what + " bias gradient");
}

}  // namespace

TEST_CASE("GELU (unary and bias_gelu) on every tier: f32, bf16, f16 at lengths 1..70001, vs float64") {
  std::mt19937 rng(2027);
  for (VectorMath tier : tiers()) {
    for (bool erf : {false, true}) {
      for (int64_t n : {1, 15, 17, 255, 1000, 70001}) {
        gelu_case<float>(tier, n, erf, rng);
        gelu_case<hg::bfloat16>(tier, n, erf, rng);
        gelu_case<hg::half>(tier, n, erf, rng);
      }
      for (int64_t cols : {1, 17, 1000}) {
        for (int64_t rows : {3, 40}) {
          bias_gelu_case<float>(tier, rows, cols, erf, rng);
          bias_gelu_case<hg::bfloat16>(tier, rows, cols, erf, rng);
          bias_gelu_case<hg::half>(tier, rows, cols, erf, rng);
        }
      }
    }
  }
}

namespace {

// Restores the lookup switch however the test case ends.
struct LookupSwitch {
  const bool saved = cpu::gelu_lookup_enabled();
  explicit LookupSwitch(bool on) { cpu::gelu_lookup_enable(on); }
  ~LookupSwitch() { cpu::gelu_lookup_enable(saved); }
};

template <class T>
std::vector<uint16_t> bits_of(const std::vector<T>& v) {
  std::vector<uint16_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 2);
  return b;
}

// All 2^16 patterns of T (in a shuffled order, at an odd length and offset, so chunking, tails and
// threads are exercised) through unary GELU forward and backward, looked up and evaluated.
template <class T>
void gelu_lookup_case(bool erf, std::mt19937& rng) {
  const std::string what = std::string(hg::dtype_name(dtype_of<T>())) + (erf ? " gelu_erf" : " gelu_tanh");
  const auto op = erf ? hg::kernels::UnaryOp::GeluErf : hg::kernels::UnaryOp::GeluTanh;
  std::vector<uint16_t> patterns(1 << 16);
  for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = uint16_t(i);
  std::shuffle(patterns.begin(), patterns.end(), rng);
  // Every pattern once, at elements [1, 65537) of buffers 3 longer: an offset start, and guard
  // elements on both sides that must keep their poison.
  const int64_t n = int64_t(patterns.size());
  std::vector<T> x(1, T(0.0f));
  for (uint16_t b : patterns) x.push_back(T::from_bits(b));
  x.push_back(T(0.0f));
  x.push_back(T(0.0f));
  const std::vector<T> dy = random_values<T>(rng, int64_t(x.size()), -4, 4);
  std::vector<std::vector<T>> y, dx;
  for (bool lookup : {true, false}) {
    const LookupSwitch sw(lookup);
    y.push_back(poison<T>(int64_t(x.size())));
    dx.push_back(poison<T>(int64_t(x.size())));
    cpu::unary_forward(op, x.data() + 1, y.back().data() + 1, n, 0.0, dtype_of<T>());
    cpu::unary_backward(op, x.data() + 1, nullptr, dy.data() + 1, dx.back().data() + 1, n, 0.0, dtype_of<T>());
  }
  const std::vector<uint16_t> y_lookup = bits_of(y[0]), y_eval = bits_of(y[1]), dx_lookup = bits_of(dx[0]),
                              dx_eval = bits_of(dx[1]);
  int64_t forward_mismatches = 0, backward_mismatches = 0;
  for (int64_t i = 1; i <= n; ++i) {
    forward_mismatches += y_lookup[size_t(i)] != y_eval[size_t(i)];
    backward_mismatches += dx_lookup[size_t(i)] != dx_eval[size_t(i)];
  }
  CHECK_MESSAGE(forward_mismatches == 0, what, " forward: ", forward_mismatches, " inputs differ");
  CHECK_MESSAGE(backward_mismatches == 0, what, " backward: ", backward_mismatches, " inputs differ");
  // Nothing outside [1, n] was written: the poison is still there (bit for bit).
  const std::vector<uint16_t> poison_bits = bits_of(poison<T>(1));
  for (size_t i : {size_t(0), x.size() - 2, x.size() - 1}) {
    CHECK_MESSAGE(y_lookup[i] == poison_bits[0], what, " forward wrote element ", i);
    CHECK_MESSAGE(dx_lookup[i] == poison_bits[0], what, " backward wrote element ", i);
  }
}

}  // namespace

TEST_CASE("GELU lookup tables: every bf16 input gives the evaluated bits, forward and backward") {
  if (cpu::vector_math_best() != VectorMath::avx512) {
    MESSAGE("SKIPPED: the GELU tables are filled by the AVX-512 loops, which this CPU does not run");
    return;
  }
  const ForceTier force(VectorMath::avx512);
  std::mt19937 rng(2031);
  for (bool erf : {false, true}) {
    gelu_lookup_case<hg::bfloat16>(erf, rng);
    gelu_lookup_case<hg::half>(erf, rng);
  }
}

TEST_CASE("vector_math_force refuses a tier the CPU lacks, and reset returns to the default") {
  cpu::vector_math_force(VectorMath::portable);
  CHECK(cpu::vector_math_active() == VectorMath::portable);
  cpu::vector_math_reset();
  // Back to the default: HG_VECTOR_MATH's tier for this run, else the timed choice (tier_calibration.h),
  // which is the best tier wherever there is only one.
  const char* env = std::getenv("HG_VECTOR_MATH");
  const std::string chosen = env != nullptr ? env : "";
  const auto& timings = cpu::detail::vector_math_timings();
  const VectorMath expected = chosen == "portable" ? VectorMath::portable
                              : chosen == "avx512" ? VectorMath::avx512
                              : timings.empty()    ? cpu::vector_math_best()
                                                   : cpu::detail::choose_fastest(timings, VectorMath::avx512);
  CHECK(cpu::vector_math_active() == expected);
  if (cpu::vector_math_best() != VectorMath::avx512) CHECK_THROWS(cpu::vector_math_force(VectorMath::avx512));
}
