#pragma once
// Comparisons of a tensor with a reference, read as doubles on the host. max_relative_error:
// max |a - b| / max(1, max |b|), the error of a against the reference b relative to the reference's
// scale. Shapes must hold as many elements.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/tensor.h"
#include "support/tensor_distance.h"  // max_abs, max_abs_diff

namespace hg::testing {

inline double max_relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double worst = 0, scale = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return worst / scale;
}

// CHECKs that `got` (any device) has `expected`'s shape and is within `tolerance` of it by
// max_relative_error, naming `what`; keeps the largest error seen in `worst`, for the suite's report.
inline void check_relative(const Tensor& got, const Tensor& expected, const std::string& what, double tolerance,
                           double& worst) {
  INFO(what << ": got " << got.describe() << ", expected " << expected.describe());
  REQUIRE(got.shape() == expected.shape());
  const double error = max_relative_error(got.to(kCPU).to(DType::f64), expected.to(DType::f64));
  INFO("max relative error " << error);
  CHECK(error <= tolerance);
  worst = std::max(worst, error);
}

}  // namespace hg::testing
