#pragma once
// GELU and its slope in double, the reference of the GELU kernel tests: the exact form
// 0.5 v (1 + erf(v / sqrt 2)) when erf, else the tanh approximation
// 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))).
#include <cmath>

namespace hg::testing {

inline double gelu_ref(double v, bool erf) {
  if (erf) return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  const double c = std::sqrt(2 / M_PI);
  return 0.5 * v * (1 + std::tanh(c * (v + 0.044715 * v * v * v)));
}

inline double gelu_slope_ref(double v, bool erf) {
  if (erf) return 0.5 * (1 + std::erf(v / std::sqrt(2.0))) + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
  const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (v + 0.044715 * v * v * v));
  return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
}

}  // namespace hg::testing
