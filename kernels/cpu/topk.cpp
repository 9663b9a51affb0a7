// topk over the rows of contiguous x [rows, n] (the math and the order: kernels/kernels.h,
// kernels/topk_key.h).
//
// Parallel strategy: one OpenMP iteration per row, static schedule. For k <= 32 the row is scanned
// once, keeping its k first (key, index) pairs so far in a sorted per-thread buffer: an element enters
// only when it comes before the last of them (one comparison turns most away), by insertion. For larger
// k the row's pairs go to a per-thread buffer and std::partial_sort brings the k first to the front
// (n log k comparisons). Either way they are written out in topk's order. The order is total (ties by
// index), so the result does not depend on the thread count or on the sort's stability.
#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/topk_key.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 14;
// Up to this k a row is scanned once, keeping the k first in a sorted buffer; beyond, partial_sort.
constexpr int64_t kStreamingMaxK = 32;

}  // namespace

size_t topk_workspace_bytes(int64_t, int64_t) { return 0; }

void topk(const void* x, void* values, int64_t* indices, int64_t rows, int64_t n, int64_t k, bool largest, void*,
          size_t, DType dtype) {
  HG_CHECK(rows >= 0 && n >= 0 && k >= 0 && k <= n, "[topk] rows = ", rows, ", n = ", n, ", k = ", k,
           ", expected rows >= 0 and 0 <= k <= n");
  if (rows * k == 0) return;
  dispatch_floating(dtype, "topk", [&]<class T>() {
    const T* src = static_cast<const T*>(x);
    T* out = static_cast<T*>(values);
#pragma omp parallel if (rows * n >= kParallelMinElements)
    {
      std::vector<std::pair<uint64_t, int64_t>> row(static_cast<size_t>(k <= kStreamingMaxK ? k : n));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const T* in = src + r * n;
        if (k <= kStreamingMaxK) {
          // The k first so far, in order; an element enters only when it comes before the last of them
          // (most are turned away by that one comparison), by insertion.
          int64_t held = 0;
          for (int64_t i = 0; i < n; ++i) {
            const uint64_t key = topk_key(double(in[i]), largest);
            if (held == k && !topk_before(key, i, row[size_t(k - 1)].first, row[size_t(k - 1)].second)) continue;
            int64_t at = held < k ? held++ : k - 1;
            while (at > 0 && topk_before(key, i, row[size_t(at - 1)].first, row[size_t(at - 1)].second)) {
              row[size_t(at)] = row[size_t(at - 1)];
              --at;
            }
            row[size_t(at)] = {key, i};
          }
        } else {
          for (int64_t i = 0; i < n; ++i) row[size_t(i)] = {topk_key(double(in[i]), largest), i};
          std::partial_sort(row.begin(), row.begin() + k, row.end(), [](const auto& a, const auto& b) {
            return topk_before(a.first, a.second, b.first, b.second);
          });
        }
        for (int64_t j = 0; j < k; ++j) {
          const int64_t i = row[size_t(j)].second;
          out[r * k + j] = in[i];
          indices[r * k + j] = i;
        }
      }
    }
  });
}

}  // namespace hg::kernels::cpu
