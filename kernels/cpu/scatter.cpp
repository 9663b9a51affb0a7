// scatter_along: y[o, index[o, i], i] = x[o, i], zeros elsewhere. Parallel over `outer`; each
// output row block is written by exactly one thread, so the result is deterministic.
#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {

void scatter_along(const void* x, const int64_t* index, void* y, int64_t outer, int64_t n, int64_t inner,
                   DType dtype) {
  HG_CHECK(outer >= 0 && n >= 0 && inner >= 0, "[scatter_along] negative size");
  dispatch_floating(dtype, "scatter_along", [&]<class T>() {
    const T* src = static_cast<const T*>(x);
    T* dst = static_cast<T*>(y);
    // Validate first: an exception must not leave an OpenMP region.
    for (int64_t j = 0; j < outer * inner; ++j)
      HG_CHECK(index[j] >= 0 && index[j] < n, "[scatter_along] index ", index[j], " at flat position ", j,
               " is outside [0, ", n, ")");
    std::memset(static_cast<void*>(dst), 0, size_t(outer * n * inner) * sizeof(T));
#pragma omp parallel for if (outer * inner > 32768)
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        dst[(o * n + index[o * inner + i]) * inner + i] = src[o * inner + i];
      }
    }
  });
}

}  // namespace hg::kernels::cpu
