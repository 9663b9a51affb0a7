// cumsum over [outer, n, inner] (the math: kernels/kernels.h), forward or reverse.
//
// Parallel strategy: rows (inner == 1) one per OpenMP iteration, widened and narrowed a whole row at a
// time; otherwise tasks of (o, block of up to kBlock columns k), one OpenMP iteration each. A task
// keeps the running sums of its columns in acc_t and walks i in order (reverse: from n - 1 down), so
// the inner loop over the contiguous columns vectorises and every output is the same bits whatever
// the thread count. Half types are widened and rounded a row block at a time (kernels/cpu/convert.h).
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 15;
constexpr int64_t kBlock = 1024;

}  // namespace

void cumsum(const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool reverse, DType dtype) {
  HG_CHECK(outer >= 0 && n >= 0 && inner >= 0, "[cumsum] outer = ", outer, ", n = ", n, ", inner = ", inner,
           ", expected all >= 0");
  dispatch_floating(dtype, "cumsum", [&]<class T>() {
    using A = acc_t<T>;
    constexpr bool widened = !std::is_same_v<T, A>;
    const T* src = static_cast<const T*>(x);
    T* dst = static_cast<T*>(y);
    if (inner == 1) {  // rows of n contiguous elements: one row per iteration, widened and narrowed whole
#pragma omp parallel if (outer * n >= kParallelMinElements)
      {
        std::vector<A> row(widened ? static_cast<size_t>(n) : 0);
#pragma omp for schedule(static)
        for (int64_t o = 0; o < outer; ++o) {
          const T* in = src + o * n;
          T* out = dst + o * n;
          A running = 0;
          if constexpr (widened) {
            to_float(in, row.data(), n);
            for (int64_t step = 0; step < n; ++step) {
              A& v = row[size_t(reverse ? n - 1 - step : step)];
              running += v;
              v = running;
            }
            from_float(row.data(), out, n);
          } else {
            for (int64_t step = 0; step < n; ++step) {
              const int64_t i = reverse ? n - 1 - step : step;
              running += in[i];
              out[i] = running;
            }
          }
        }
      }
      return;
    }
    const int64_t block = std::min(kBlock, std::max<int64_t>(inner, 1));
    const int64_t blocks = (inner + block - 1) / block;
    const int64_t tasks = outer * blocks;
#pragma omp parallel if (outer * n * inner >= kParallelMinElements)
    {
      std::vector<A> running(static_cast<size_t>(block)), row(widened ? static_cast<size_t>(block) : 0);
#pragma omp for schedule(static)
      for (int64_t task = 0; task < tasks; ++task) {
        const int64_t o = task / blocks, k0 = (task % blocks) * block, width = std::min(block, inner - k0);
        std::fill(running.begin(), running.begin() + width, A(0));
        for (int64_t step = 0; step < n; ++step) {
          const int64_t i = reverse ? n - 1 - step : step;
          const int64_t offset = (o * n + i) * inner + k0;
          if constexpr (widened) {
            to_float(src + offset, row.data(), width);
            for (int64_t c = 0; c < width; ++c) {
              running[c] += row[c];
              row[c] = running[c];
            }
            from_float(row.data(), dst + offset, width);
          } else {
            for (int64_t c = 0; c < width; ++c) {
              running[c] += src[offset + c];
              dst[offset + c] = running[c];
            }
          }
        }
      }
    }
  });
}

}  // namespace hg::kernels::cpu
