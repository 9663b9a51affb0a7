// sum_of_squares: the reduction behind global gradient-norm clipping, sum_i x[i]^2.
//
// Accumulated in double (a gradient norm over 1e9 float elements keeps ~16 digits; an fp32 sum
// would lose several). Determinism: the input is cut into fixed chunks of kChunk elements; each
// chunk's partial sum is computed by one thread with a fixed (compile-time) vectorised order, and
// the partials are then added sequentially in chunk order. So the result is bit-identical whatever
// the number of OpenMP threads. inf/NaN elements propagate into the result (the caller decides).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kChunk = 8192;
constexpr int64_t kParallelMinElements = int64_t(1) << 16;

template <class T>
double chunk_sum_of_squares(const T* __restrict x, int64_t count) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    // Widened through convert.h's SIMD conversions (exact), then summed as the f32 chunks are: the
    // scalar f16 conversion in the loop kept it from vectorising (12% of an fp16 GPT step).
    float widened[kChunk];
    to_float(x, widened, count);
    return chunk_sum_of_squares(static_cast<const float*>(widened), count);
  } else {
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < count; ++i) {
      const double value = static_cast<double>(static_cast<acc_t<T>>(x[i]));
      sum += value * value;
    }
    return sum;
  }
}

}  // namespace

double sum_of_squares(const void* x, int64_t n, DType dtype) {
  HG_CHECK(n >= 0, "[sum_of_squares] expected n >= 0, got ", n);
  if (n == 0) return 0.0;
  HG_CHECK(x != nullptr, "[sum_of_squares] null input for n = ", n);
  return dispatch_floating(dtype, "sum_of_squares", [&]<class T>() {
    const T* data = static_cast<const T*>(x);
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t begin = k * kChunk;
      partial[static_cast<size_t>(k)] = chunk_sum_of_squares(data + begin, std::min(kChunk, n - begin));
    }
    double total = 0.0;
    for (const double p : partial) total += p;
    return total;
  });
}

}  // namespace hg::kernels::cpu

namespace hg::kernels::cpu {

void sum_of_squares_into(const void* x, int64_t n, DType dtype, double* accumulator) {
  HG_CHECK(accumulator != nullptr, "[sum_of_squares_into] null accumulator");
  *accumulator += sum_of_squares(x, n, dtype);
}

}  // namespace hg::kernels::cpu
