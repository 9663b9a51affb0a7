// Random fills on Philox words (philox.h). Word w of the stream at generator state (seed, offset) is
// word w % 4 of Philox block offset + w / 4.
//
// uniform_fill: element i uses word i:
//     u = bits_to_uniform(word i) in [0, 1) (24 random bits),  y = low + (high - low) * u   (acc_t)
//   The result is rounded to the dtype; should that rounding reach `high` (possible for f16/bf16
//   and for f32 with a wide range), the next value below `high` is taken, so y stays in [low, high).
//   A call of n elements consumes philox_blocks(n) blocks.
// normal_fill: element i uses words 2i and 2i + 1 (block offset + i / 2, words 2 (i % 2) and
//   2 (i % 2) + 1), with the Box-Muller transform (the cosine branch only, so every element is a
//   pure function of its own two words):
//     u1 = ((word 2i >> 8) + 1) / 2^24 in (0, 1]   (never 0, so log(u1) is finite)
//     u2 = bits_to_uniform(word 2i + 1) in [0, 1)
//     y  = mean + std * sqrt(-2 log u1) * cos(2 pi u2)                                     (acc_t)
//   A call of n elements consumes philox_blocks(2 n) = ceil(n / 2) blocks: the engine advances its
//   offset by that much after a normal fill.
//
// Parallel strategy: chunks of kChunk elements (a multiple of 4, whole Philox blocks for both
// fills), spread over threads by OpenMP. Every element is independent of the split.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 1024;
static_assert(kChunk % 4 == 0, "a chunk must own whole Philox blocks");
constexpr int64_t kParallelMinElements = int64_t(1) << 14;

Philox4 philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, uint32_t(seed), uint32_t(seed >> 32));
}

// The largest value of T below v (one step toward -infinity).
template <class T>
T next_below(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(v, -std::numeric_limits<T>::infinity());
  } else {  // half / bfloat16: sign-magnitude bits
    const uint16_t bits = v.bits;
    if ((bits & 0x7fffu) == 0) return T::from_bits(0x8001u);  // +-0 -> the smallest negative subnormal
    return T::from_bits(bits & 0x8000u ? uint16_t(bits + 1u) : uint16_t(bits - 1u));
  }
}

template <class T>
void uniform_typed(T* y, int64_t n, double low, double high, uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  const A base = A(low), width = A(high - low);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    for (int64_t i = begin; i < end; i += 4) {
      const Philox4 words = philox_block(seed, offset + uint64_t(i) / 4);
      for (int64_t w = 0; w < 4 && i + w < end; ++w) {
        T v = T(base + width * A(bits_to_uniform(words.v[w])));
        if (high > low && double(A(v)) >= high) v = next_below(v);
        y[i + w] = v;
      }
    }
  }
}

template <class A>
A box_muller(uint32_t word1, uint32_t word2) {
  constexpr A kTwoPi = A(6.283185307179586);
  const A u1 = A((word1 >> 8) + 1u) * A(1.0 / 16777216.0);
  const A u2 = A(bits_to_uniform(word2));
  return std::sqrt(A(-2) * std::log(u1)) * std::cos(kTwoPi * u2);
}

template <class T>
void normal_typed(T* y, int64_t n, double mean, double std_dev, uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  const A mu = A(mean), sigma = A(std_dev);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    for (int64_t i = begin; i < end; i += 2) {  // one Philox block feeds elements i and i + 1
      const Philox4 words = philox_block(seed, offset + uint64_t(i) / 2);
      y[i] = T(mu + sigma * box_muller<A>(words.v[0], words.v[1]));
      if (i + 1 < end) y[i + 1] = T(mu + sigma * box_muller<A>(words.v[2], words.v[3]));
    }
  }
}

}  // namespace

void uniform_fill(void* y, int64_t n, double low, double high, uint64_t seed, uint64_t offset, DType dtype) {
  HG_CHECK(n >= 0, "[uniform_fill] n = ", n, ", expected n >= 0");
  HG_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "[uniform_fill] low = ", low, ", high = ", high,
           ", expected finite bounds with low <= high");
  dispatch_floating(dtype, "uniform_fill",
                    [&]<class T>() { uniform_typed(static_cast<T*>(y), n, low, high, seed, offset); });
}

void normal_fill(void* y, int64_t n, double mean, double std, uint64_t seed, uint64_t offset, DType dtype) {
  HG_CHECK(n >= 0, "[normal_fill] n = ", n, ", expected n >= 0");
  HG_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, "[normal_fill] mean = ", mean, ", std = ", std,
           ", expected finite values with std >= 0");
  dispatch_floating(dtype, "normal_fill",
                    [&]<class T>() { normal_typed(static_cast<T*>(y), n, mean, std, seed, offset); });
}

}  // namespace hg::kernels::cpu
