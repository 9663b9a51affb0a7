#pragma once
// Typed test values for kernels that run in f32, bf16 and f16 (test_vector_math, test_layer_norm_cpu):
// the dtype of T, the unit roundoff of a result rounded to T and its subnormal floor, fresh random
// values rounded to T, NaN-poisoned outputs, and T widened to double / float.
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace hg::testing {

template <class T>
constexpr hg::DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return hg::DType::f32;
  else if constexpr (std::is_same_v<T, hg::bfloat16>) return hg::DType::bf16;
  else return hg::DType::f16;
}

// Relative unit roundoff of a result rounded to T (0 for f32: float bounds are the tests' own).
template <class T>
double roundoff() {
  if constexpr (std::is_same_v<T, float>) return 0;
  else if constexpr (std::is_same_v<T, hg::bfloat16>) return 0x1p-8;
  else return 0x1p-11;
}

// Absolute floor of T's subnormals: half the f16 subnormal spacing; none for bf16 / f32, which share
// float's range.
template <class T>
double subnormal_floor() {
  return std::is_same_v<T, hg::half> ? 0x1p-25 : 0;
}

// n values uniform in [lo, hi), rounded to T.
template <class T>
std::vector<T> random_values(std::mt19937& rng, int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& e : v) e = T(float(dist(rng)));
  return v;
}

// n NaNs: an output buffer a kernel must overwrite.
template <class T>
std::vector<T> poison(int64_t n) {
  return std::vector<T>(static_cast<size_t>(n), T(std::numeric_limits<float>::quiet_NaN()));
}

template <class T>
double d(T v) {
  return double(float(v));
}

template <class T>
std::vector<float> widened(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = float(v[i]);
  return f;
}

}  // namespace hg::testing
