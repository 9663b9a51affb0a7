#pragma once
// Max-norm distances between tensors, read as doubles on the host; no test framework, so benchmarks use
// them too (bench_attention's accuracy check).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/tensor.h"

namespace hg::testing {

// max |t|.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// max |a - b| over the elements of two tensors; a NaN difference, or a different element count, is infinity.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::isnan(x[i] - y[i]) ? INFINITY : std::abs(x[i] - y[i]));
  return m;
}

}  // namespace hg::testing
