#pragma once
// Random inputs for the kernel suites that call kernels directly (HostBuffer, any dtype): standard
// normal values, and indices uniform in [0, bound). Shared by the CPU and CUDA suites of an op, so
// both draw the same kinds of inputs.
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

}  // namespace hg::testing
