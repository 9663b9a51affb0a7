// Dropout with a counter-based mask that is regenerated, never stored.
//   forward:  y[i]  = keep(i) ? x[i]  * scale : 0
//   backward: dx[i] = keep(i) ? dy[i] * scale : 0,      scale = 1 / (1 - p) (rounded to acc_t)
// keep(i) = dropout_keep(seed, offset, i, p) of philox.h: element i uses word i % 4 of Philox block
// offset + i / 4, so a call over n elements consumes philox_blocks(n) blocks and element i's mask bit
// does not depend on n, on the thread count, or on which backend draws it.
//
// Parallel strategy: elements are processed in chunks of kChunk (a multiple of 4, so a chunk owns
// whole Philox blocks). Per chunk, the Philox blocks are evaluated once each (4 mask bits per
// evaluation) into a keep buffer, then out = keep ? in * scale : 0 runs as a vectorised select (a
// select, not a multiply by 0, so a dropped inf or NaN still gives 0).
// OpenMP spreads the chunks over threads.
#include <algorithm>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 1024;
static_assert(kChunk % 4 == 0, "a chunk must own whole Philox blocks");
constexpr int64_t kParallelMinElements = int64_t(1) << 14;

// keep[k] = keep(begin + k) for k < count; begin is a multiple of 4.
void keep_mask(uint64_t seed, uint64_t offset, int64_t begin, int64_t count, float p, uint8_t* keep) {
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int64_t k = 0; k < count; k += 4) {
    const uint64_t block = offset + uint64_t(begin + k) / 4;
    const Philox4 words = philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, k0, k1);
    for (int64_t w = 0; w < 4 && k + w < count; ++w) {
      // The same test as dropout_keep(seed, offset, begin + k + w, p), four draws per block.
      keep[k + w] = bits_to_uniform(words.v[w]) >= p;
    }
  }
}

template <class T>
void dropout_typed(const T* in, T* out, int64_t n, double p, uint64_t seed, uint64_t offset) {
  using A = acc_t<T>;
  const A scale = A(1.0 / (1.0 - p));
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    uint8_t keep[kChunk];
    keep_mask(seed, offset, begin, count, float(p), keep);
    const T* __restrict src = in + begin;
    T* __restrict dst = out + begin;
    if constexpr (std::is_same_v<T, A>) {
      for (int64_t k = 0; k < count; ++k) dst[k] = keep[k] ? src[k] * scale : A(0);
    } else {  // f16/bf16: widened and narrowed by convert.h's SIMD conversions
      A staged[kChunk];
      to_float(src, staged, count);
      for (int64_t k = 0; k < count; ++k) staged[k] = keep[k] ? staged[k] * scale : A(0);
      from_float(staged, dst, count);
    }
  }
}

void dropout(const char* op, const void* in, void* out, int64_t n, double p, uint64_t seed, uint64_t offset,
             DType dtype) {
  HG_CHECK(n >= 0, "[", op, "] n = ", n, ", expected n >= 0");
  HG_CHECK(p >= 0.0 && p < 1.0, "[", op, "] p = ", p, ", expected 0 <= p < 1");
  dispatch_floating(dtype, op, [&]<class T>() {
    dropout_typed(static_cast<const T*>(in), static_cast<T*>(out), n, p, seed, offset);
  });
}

}  // namespace

void dropout_forward(const void* x, void* y, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype) {
  dropout("dropout_forward", x, y, n, p, seed, offset, dtype);
}

void dropout_backward(const void* dy, void* dx, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype) {
  dropout("dropout_backward", dy, dx, n, p, seed, offset, dtype);
}

}  // namespace hg::kernels::cpu
