#pragma once
// The walk over a StridedLayout (kernels/strided_layout.h) that the CPU's compare and where kernels
// share: the innermost dimension is a row; each thread takes a contiguous range of rows and steps
// from one row to the next with an odometer over the outer dimensions (no division per element).
// row(offsets, out_begin, cols, inner) is called per row with each operand's element offset of
// the row's first element, the row's first output index, its length and each operand's inner
// stride. Rows are split over the OpenMP threads once the walk has at least kParallelMinElements
// elements, and a single row (what contiguous operands collapse to) is cut into one piece per thread;
// the split does not change any result (every output element is written once, by one call).
#include <cstdint>

#include <omp.h>

#include "kernels/strided_layout.h"

namespace hg::kernels::cpu {

inline constexpr int64_t kStridedParallelMinElements = int64_t(1) << 15;

template <int N, class RowFn>
void strided_rows_range(const StridedLayout<N>& layout, int64_t row_begin, int64_t row_end, RowFn& row) {
  const int outer = layout.rank - 1;
  const int64_t cols = layout.shape[outer];
  int64_t index[kMaxRank] = {};
  int64_t offsets[N] = {};
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = layout.strides[k][outer];
  int64_t rest = row_begin;
  for (int d = outer - 1; d >= 0; --d) {
    index[d] = rest % layout.shape[d];
    rest /= layout.shape[d];
    for (int k = 0; k < N; ++k) offsets[k] += index[d] * layout.strides[k][d];
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    row(static_cast<const int64_t*>(offsets), r * cols, cols, static_cast<const int64_t*>(inner));
    for (int d = outer - 1; d >= 0; --d) {  // odometer step
      for (int k = 0; k < N; ++k) offsets[k] += layout.strides[k][d];
      if (++index[d] < layout.shape[d]) break;
      for (int k = 0; k < N; ++k) offsets[k] -= layout.strides[k][d] * layout.shape[d];
      index[d] = 0;
    }
  }
}

template <int N, class RowFn>
void for_each_strided_row(const StridedLayout<N>& layout, RowFn row) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < layout.rank; ++d) rows *= layout.shape[d];
  const int64_t total = layout.numel();
  if (total < kStridedParallelMinElements) return strided_rows_range(layout, 0, rows, row);
  if (rows == 1) {  // one long row (contiguous operands collapse to it): each thread takes a piece of it
    const int64_t cols = layout.shape[0];
    int64_t inner[N];
    for (int k = 0; k < N; ++k) inner[k] = layout.strides[k][0];
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
      const int64_t begin = cols * thread / threads, end = cols * (thread + 1) / threads;
      int64_t offsets[N];
      for (int k = 0; k < N; ++k) offsets[k] = begin * inner[k];
      RowFn mine = row;
      if (end > begin) mine(static_cast<const int64_t*>(offsets), begin, end - begin, static_cast<const int64_t*>(inner));
    }
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    RowFn mine = row;
    strided_rows_range(layout, rows * thread / threads, rows * (thread + 1) / threads, mine);
  }
}

}  // namespace hg::kernels::cpu
