// The softmax/GELU kernels' tier choice (vector_math.h) and the vector math as array functions for
// the accuracy tests: each AVX-512 function of simd_math_avx512.h over n floats, 16 lanes at a time
// with a masked tail; the portable tier is std:: and unary_math.h in float.

// GCC 12 warns that the undefined vectors inside its own AVX-512 intrinsics may be uninitialised
// (before any include: the warnings point into avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "kernels/cpu/vector_math.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/calibration_rule.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/convert_avx512.h"
#include "kernels/cpu/simd_math_avx512.h"
#include "kernels/cpu/tier_calibration.h"
#include "kernels/error.h"
#include "kernels/unary_math.h"

namespace hg::kernels::cpu {
namespace {

std::atomic<int> g_forced{-1};

template <VectorFunction kF>
HG_SIMD512 __m512 apply16(__m512 x) {
  if constexpr (kF == VectorFunction::exp) return simd512::exp(x);
  else if constexpr (kF == VectorFunction::tanh) return simd512::tanh(x);
  else if constexpr (kF == VectorFunction::erf) return simd512::erf(x);
  else if constexpr (kF == VectorFunction::gelu_tanh) return simd512::gelu_tanh(x);
  else if constexpr (kF == VectorFunction::gelu_tanh_slope) return simd512::gelu_tanh_slope(x);
  else if constexpr (kF == VectorFunction::gelu_erf) return simd512::gelu_erf(x);
  else return simd512::gelu_erf_slope(x);
}

template <VectorFunction kF>
HG_SIMD512 void apply_avx512(const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) simd512::store16(out + i, apply16<kF>(simd512::load16(in + i)));
  if (i < n) {
    const __mmask16 m = simd512::tail_mask(n - i);
    simd512::store16(out + i, apply16<kF>(simd512::load16(in + i, m)), m);
  }
}

float apply_portable(VectorFunction f, float x) {
  switch (f) {
    case VectorFunction::exp: return std::exp(x);
    case VectorFunction::tanh: return std::tanh(x);
    case VectorFunction::erf: return std::erf(x);
    case VectorFunction::gelu_tanh: return gelu_tanh_of(x);
    case VectorFunction::gelu_tanh_slope: return gelu_tanh_derivative(x);
    case VectorFunction::gelu_erf: return gelu_erf_of(x);
    case VectorFunction::gelu_erf_slope: return gelu_erf_derivative(x);
  }
  return x;
}

}  // namespace

VectorMath vector_math_best() {
  return convert_best_isa() == ConvertIsa::avx512 ? VectorMath::avx512 : VectorMath::portable;
}

namespace {

// The tiers' times on this CPU (avx512 first): exp, tanh, GELU and its slope over 4096 floats (the
// row kernels' transcendental work, L1-resident), best of 5 interleaved rounds.
std::vector<std::pair<VectorMath, double>> time_vector_math_tiers() {
  constexpr int64_t kFloats = 4096;
  std::vector<float> in(kFloats), out(kFloats);
  for (int64_t i = 0; i < kFloats; ++i) in[size_t(i)] = float(i - kFloats / 2) * (8.0f / kFloats);
  const VectorMath tiers[] = {VectorMath::avx512, VectorMath::portable};
  std::vector<std::function<void()>> runs;
  for (const VectorMath tier : tiers)
    runs.emplace_back([&, tier] {
      for (const VectorFunction f :
           {VectorFunction::exp, VectorFunction::tanh, VectorFunction::gelu_tanh, VectorFunction::gelu_tanh_slope})
        vector_math_apply(f, in.data(), out.data(), kFloats, tier);
    });
  const std::vector<double> seconds = detail::interleaved_best_seconds(runs, 5);
  return {{tiers[0], seconds[0]}, {tiers[1], seconds[1]}};
}

// How the default tier was settled: HG_VECTOR_MATH's text ("" when unset or auto), the timings (none
// when nothing was timed) and the tier.
struct DefaultTier {
  std::string env;
  std::vector<std::pair<VectorMath, double>> timings;
  VectorMath tier;
};

// The tier when none is forced: HG_VECTOR_MATH=portable|avx512 (read once; like HG_CPU_GEMM, for A/B
// runs of a whole program on one CPU), else (unset or auto) the faster of the tiers this CPU runs,
// timed once (tier_calibration.h).
const DefaultTier& default_tier_choice() {
  static const DefaultTier choice = [] {
    const char* env = std::getenv("HG_VECTOR_MATH");
    const std::string v = env != nullptr ? env : "";
    if (v.empty() || v == "auto") {
      DefaultTier d{"", {}, vector_math_best()};
      if (d.tier == VectorMath::portable) return d;  // the only tier
      d.timings = time_vector_math_tiers();
      d.tier = detail::choose_fastest(d.timings, VectorMath::avx512);
      return d;
    }
    HG_CHECK(v == "portable" || v == "avx512", "[vector_math] HG_VECTOR_MATH=", v,
             ": expected portable, avx512 or auto");
    const VectorMath want = v == "avx512" ? VectorMath::avx512 : VectorMath::portable;
    HG_CHECK(int(want) <= int(vector_math_best()), "[vector_math] HG_VECTOR_MATH=", v,
             " but this CPU runs at most ", vector_math_name(vector_math_best()),
             " (avx512 needs AVX-512 F/BW/VL and F16C)");
    return DefaultTier{v, {}, want};
  }();
  return choice;
}

VectorMath default_tier() { return default_tier_choice().tier; }

}  // namespace

VectorMath vector_math_active() {
  const int forced = g_forced.load(std::memory_order_relaxed);
  return forced >= 0 ? VectorMath(forced) : default_tier();
}

void vector_math_force(VectorMath tier) {
  HG_CHECK(int(tier) <= int(vector_math_best()), "[vector_math] tier ", vector_math_name(tier),
           " was requested but this CPU runs at most ", vector_math_name(vector_math_best()),
           " (avx512 needs AVX-512 F/BW/VL and F16C)");
  g_forced.store(int(tier), std::memory_order_relaxed);
}

void vector_math_reset() { g_forced.store(-1, std::memory_order_relaxed); }

const char* vector_math_name(VectorMath tier) {
  return tier == VectorMath::avx512 ? "avx512" : "portable";
}

const std::vector<std::pair<VectorMath, double>>& detail::vector_math_timings() {
  return default_tier_choice().timings;
}

std::string vector_math_description() {
  const DefaultTier& d = default_tier_choice();
  std::string out = vector_math_name(d.tier);
  if (!d.env.empty()) return out + " (HG_VECTOR_MATH=" + d.env + ")";
  if (d.timings.empty()) return out + " (the only tier)";
  return out + detail::timings_text(d.timings, vector_math_name);
}

void vector_math_apply(VectorFunction f, const float* in, float* out, int64_t n, VectorMath tier) {
  HG_CHECK(n >= 0, "[vector_math_apply] n = ", n, ", expected n >= 0");
  if (tier == VectorMath::portable) {
    for (int64_t i = 0; i < n; ++i) out[i] = apply_portable(f, in[i]);
    return;
  }
  HG_CHECK(vector_math_best() == VectorMath::avx512, "[vector_math_apply] tier avx512 was requested but this CPU ",
           "lacks AVX-512 F/BW/VL or F16C");
  switch (f) {
    case VectorFunction::exp: return apply_avx512<VectorFunction::exp>(in, out, n);
    case VectorFunction::tanh: return apply_avx512<VectorFunction::tanh>(in, out, n);
    case VectorFunction::erf: return apply_avx512<VectorFunction::erf>(in, out, n);
    case VectorFunction::gelu_tanh: return apply_avx512<VectorFunction::gelu_tanh>(in, out, n);
    case VectorFunction::gelu_tanh_slope: return apply_avx512<VectorFunction::gelu_tanh_slope>(in, out, n);
    case VectorFunction::gelu_erf: return apply_avx512<VectorFunction::gelu_erf>(in, out, n);
    case VectorFunction::gelu_erf_slope: return apply_avx512<VectorFunction::gelu_erf_slope>(in, out, n);
  }
}

}  // namespace hg::kernels::cpu
