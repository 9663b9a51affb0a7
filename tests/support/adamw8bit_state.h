#pragma once
// The 8-bit AdamW kernels' host-side test state, shared by test_adamw8bit_kernels (CPU) and
// test_cuda_adamw8bit (CUDA): the quantised moments of n elements (codes and per-block absmax) in their
// zero state, the random gradients and parameters both suites step with, and the check that a block whose
// absmax is subnormal became the zero state.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/adamw8bit_math.h"
#include "kernels/step_kernels.h"
#include "support/host_buffer.h"

namespace hg::testing {

// The codes of m and v and their per-block absmax, as QuantizedMoments points at them.
struct AdamW8BitState {
  std::vector<uint8_t> m, v;
  std::vector<float> absmax_m, absmax_v;
  explicit AdamW8BitState(int64_t n)
      : m(size_t(n), kernels::kAdamW8BitSignedZeroCode),
        v(size_t(n), kernels::kAdamW8BitUnsignedZeroCode),
        absmax_m(size_t(kernels::adamw8bit_blocks(n)), 0.0f),
        absmax_v(size_t(kernels::adamw8bit_blocks(n)), 0.0f) {}
  kernels::QuantizedMoments view() { return {m.data(), v.data(), absmax_m.data(), absmax_v.data()}; }
  bool operator==(const AdamW8BitState& o) const {
    return m == o.m && v == o.v && std::memcmp(absmax_m.data(), o.absmax_m.data(), absmax_m.size() * 4) == 0 &&
           std::memcmp(absmax_v.data(), o.absmax_v.data(), absmax_v.size() * 4) == 0;
  }
};

// Gradients over several orders of magnitude, so that the blocks' values spread over the map's decades.
inline HostBuffer random_adamw8bit_grad(DType dtype, int64_t n, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> exponent(-4.0, 0.0);
  HostBuffer g(dtype, n);
  for (int64_t i = 0; i < n; ++i) g.set(i, normal(rng) * std::pow(10.0, exponent(rng)));
  return g;
}

// Parameters uniform in [-1, 1).
inline HostBuffer random_adamw8bit_params(DType dtype, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  HostBuffer p(dtype, n);
  for (int64_t i = 0; i < n; ++i) p.set(i, u(rng));
  return p;
}

// After a step whose first block (2048 elements) has a subnormal absmax_m: that block is the zero state
// (both absmax 0, every code the zero code), the second block is not, and every parameter is finite.
inline void check_subnormal_first_block_zeroed(const AdamW8BitState& state, const HostBuffer& param, int64_t n) {
  CHECK(state.absmax_m[0] == 0.0f);
  CHECK(state.absmax_v[0] == 0.0f);
  CHECK(state.absmax_m[1] > 1e-6f);
  for (int64_t i = 0; i < 2048; ++i) {
    INFO("element ", i);
    REQUIRE(state.m[size_t(i)] == kernels::kAdamW8BitSignedZeroCode);
    REQUIRE(state.v[size_t(i)] == kernels::kAdamW8BitUnsignedZeroCode);
  }
  for (int64_t i = 0; i < n; ++i) REQUIRE(std::isfinite(param.get(i)));
}

}  // namespace hg::testing
