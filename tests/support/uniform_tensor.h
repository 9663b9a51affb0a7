#pragma once
// Fresh random tensors for the op tests: uniform [lo, hi) values drawn in double and rounded to the
// dtype once, and a tensor's values widened to double for comparisons.
#include <random>
#include <vector>

#include "engine/ops.h"

namespace hg::testing {

inline Tensor uniform(std::mt19937& rng, const Shape& shape, double lo, double hi, DType dtype) {
  std::uniform_real_distribution<double> dist(lo, hi);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = dist(rng);
  return cast(from_vector(v, shape), dtype);
}

inline std::vector<double> values(const Tensor& t) { return cast(t, DType::f64).to_vector<double>(); }

}  // namespace hg::testing
