#pragma once
// Random inputs for the kernel suites that call kernels directly (HostBuffer, any dtype): standard
// normal values, indices uniform in [0, bound), and values with ties and edges. Shared by the CPU and CUDA suites of an op, so
// both draw the same kinds of inputs.
#include <cmath>
#include <random>

#include "support/host_buffer.h"

namespace hg::testing {

inline HostBuffer random_normal(DType dtype, int64_t count, std::mt19937_64& rng) {
  HostBuffer b(dtype, count);
  std::normal_distribution<double> normal;
  for (int64_t i = 0; i < count; ++i) b.set(i, normal(rng));
  return b;
}

inline HostBuffer random_indices(DType dtype, int64_t count, int64_t bound, std::mt19937_64& rng) {
  HostBuffer b(dtype, count);
  for (int64_t i = 0; i < count; ++i) b.set(i, double(int64_t(rng() % uint64_t(bound))));
  return b;
}

// rows x n normal values rounded to multiples of 1/4 (many ties), the first row starting with NaN, +inf,
// -inf, -0.0, +0.0 and NaN: the inputs of a sort's order rules (topk).
inline HostBuffer random_with_ties(DType dtype, int64_t rows, int64_t n, std::mt19937_64& rng) {
  HostBuffer x = random_normal(dtype, rows * n, rng);
  for (int64_t i = 0; i < rows * n; ++i) x.set(i, std::floor(x.get(i) * 4) / 4);
  const double edges[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, NAN};
  for (int64_t i = 0; i < n && i < 6; ++i) x.set(i, edges[i]);
  return x;
}

}  // namespace hg::testing
