#pragma once
// max |a - b| / max(1, max |b|) over all elements (read as doubles on the host): the error of a
// against the reference b, relative to the reference's scale. Shapes must hold as many elements.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/tensor.h"

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

}  // namespace hg::testing
