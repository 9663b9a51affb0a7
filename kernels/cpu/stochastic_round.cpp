// Stochastic rounding float -> f16 / bf16 on the CPU (math: kernels/stochastic_round.h): element i
// rounds up with probability (|x| - |lo|) / (|hi| - |lo|), deciding with word i % 4 of Philox block
// offset + i / 4.
//
// Parallel strategy: chunks of kChunk elements (a multiple of 4, so a chunk owns whole Philox
// blocks), spread over threads by OpenMP; one philox4x32_10 evaluation serves four elements. Every
// element is a pure function of (x[i], seed, offset, i), independent of the split.
#include <algorithm>

#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/stochastic_round.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 1024;
static_assert(kChunk % 4 == 0, "a chunk must own whole Philox blocks");
constexpr int64_t kParallelMinElements = int64_t(1) << 14;

template <class Bits>
void stochastic_round_typed(const float* x, uint16_t* y, int64_t n, uint64_t seed, uint64_t offset) {
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    for (int64_t i = begin; i < end; i += 4) {
      const uint64_t block = offset + uint64_t(i) / 4;
      const Philox4 words = philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, k0, k1);
      for (int64_t w = 0; w < 4 && i + w < end; ++w) y[i + w] = stochastic_round_bits<Bits>(x[i + w], words.v[w]);
    }
  }
}

}  // namespace

void stochastic_round(const float* x, void* y, int64_t n, uint64_t seed, uint64_t offset, DType dtype) {
  HG_CHECK(n >= 0, "[stochastic_round] n = ", n, ", expected n >= 0");
  uint16_t* out = static_cast<uint16_t*>(y);
  if (dtype == DType::f16) {
    stochastic_round_typed<HalfBits>(x, out, n, seed, offset);
  } else if (dtype == DType::bf16) {
    stochastic_round_typed<BFloat16Bits>(x, out, n, seed, offset);
  } else {
    HG_FAIL("[stochastic_round] cannot round to ", dtype_name(dtype), "; expected f16 or bf16");
  }
}

}  // namespace hg::kernels::cpu
