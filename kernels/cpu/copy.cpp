// copy_strided: dst[idx . dst_strides] = src[idx . src_strides] for every index of `shape`.
//
// The copy only moves bits, so it is templated on the element size (2, 4 or 8 bytes), not on the
// dtype. Before copying, the layout is simplified:
//   - size-1 dimensions are dropped (their stride never matters);
//   - neighbouring dimensions d, d+1 are merged when both views step over them as one
//     (stride[d] == stride[d+1] * shape[d+1] for src and for dst), so a contiguous tensor of any
//     rank becomes a single row.
// What remains is [rows..., cols]: the last dimension is the inner loop (a memcpy when it is
// unit-stride on both sides), the leading ones are walked with an odometer.
//
// Parallel strategy (when the copy is large enough): the outer rows are cut into one contiguous range
// per thread; each range unravels its first row index once and then steps the odometer. A layout of
// one row -- what any contiguous tensor collapses to -- has its columns cut instead, at multiples of
// 64 elements (one memcpy per thread).
// Views must not overlap (the copy is not ordered).
#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/pair_layout.h"
#include "kernels/strided_layout.h"

#include <omp.h>

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 16;

template <class E>
void copy_row(const E* __restrict src, int64_t src_stride, E* __restrict dst, int64_t dst_stride, int64_t n) {
  if (src_stride == 1 && dst_stride == 1) {
    std::memcpy(dst, src, size_t(n) * sizeof(E));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i * dst_stride] = src[i * src_stride];
}

// Copies outer rows [row_begin, row_end) of the layout; each row is the last dimension.
template <class E>
void copy_rows(const E* src, E* dst, const PairLayout& layout, int64_t row_begin, int64_t row_end) {
  const int outer_rank = layout.rank - 1;
  int64_t index[kMaxRank] = {};
  int64_t src_offset = 0, dst_offset = 0;
  int64_t rest = row_begin;
  for (int d = outer_rank - 1; d >= 0; --d) {
    index[d] = rest % layout.shape[d];
    rest /= layout.shape[d];
    src_offset += index[d] * layout.first[d];
    dst_offset += index[d] * layout.second[d];
  }
  const int64_t cols = layout.shape[outer_rank];
  for (int64_t row = row_begin; row < row_end; ++row) {
    copy_row(src + src_offset, layout.first[outer_rank], dst + dst_offset, layout.second[outer_rank], cols);
    for (int d = outer_rank - 1; d >= 0; --d) {  // odometer step
      src_offset += layout.first[d];
      dst_offset += layout.second[d];
      if (++index[d] < layout.shape[d]) break;
      src_offset -= layout.first[d] * layout.shape[d];
      dst_offset -= layout.second[d] * layout.shape[d];
      index[d] = 0;
    }
  }
}

template <class E>
void copy_layout(const E* src, E* dst, const PairLayout& layout) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < layout.rank; ++d) rows *= layout.shape[d];
  const int64_t cols = layout.shape[layout.rank - 1];
  const int64_t total = rows * cols;
  if (total < kParallelMinElements) {
    copy_rows(src, dst, layout, 0, rows);
    return;
  }
  if (rows == 1) {
    const int64_t src_stride = layout.first[layout.rank - 1], dst_stride = layout.second[layout.rank - 1];
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
      const int64_t begin = cols * thread / threads / 64 * 64;
      const int64_t end = thread + 1 == threads ? cols : cols * (thread + 1) / threads / 64 * 64;
      if (end > begin) copy_row(src + begin * src_stride, src_stride, dst + begin * dst_stride, dst_stride, end - begin);
    }
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    copy_rows(src, dst, layout, rows * thread / threads, rows * (thread + 1) / threads);
  }
}

}  // namespace

void copy_strided(const void* src, const int64_t* src_strides, void* dst, const int64_t* dst_strides,
                  const int64_t* shape, int rank, DType dtype) {
  if (!strided_shape_has_elements("copy_strided", shape, rank)) return;
  const PairLayout layout = collapse_dimensions(shape, src_strides, dst_strides, rank);
  switch (dtype_size(dtype)) {
    case 1:
      return copy_layout(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), layout);
    case 2:
      return copy_layout(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), layout);
    case 4:
      return copy_layout(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), layout);
    case 8:
      return copy_layout(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), layout);
    default:
      HG_FAIL("[copy_strided] unsupported dtype ", dtype_name(dtype));
  }
}

}  // namespace hg::kernels::cpu
