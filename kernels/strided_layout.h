#pragma once
// N strided operands read over one shape into a contiguous output (compare_forward: a and b;
// where_forward: cond, a and b), reduced to the fewest dimensions that describe the same walk, as
// pair_layout.h does for two: size-1 dimensions are dropped, and a dimension merges into the previous
// one when every operand steps across the pair as one (outer stride == inner stride * inner size; the
// contiguous output always does). A single element becomes rank 1 of size 1. Computed on the host;
// passed to kernels by value.
#include <cstdint>

#include "kernels/error.h"
#include "kernels/kernels.h"

namespace hg::kernels {

template <int kOperands>
struct StridedLayout {
  int rank = 0;
  int64_t shape[kMaxRank];
  int64_t strides[kOperands][kMaxRank];  // element strides of each operand; 0 broadcasts

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
};

// Checks a kernel's rank and sizes (an hg::Error naming `op` otherwise); false when the shape holds no
// element, so there is nothing to do.
inline bool strided_shape_has_elements(const char* op, const int64_t* shape, int rank) {
  HG_CHECK(rank >= 0 && rank <= kMaxRank, "[", op, "] rank ", rank, ", expected 0 <= rank <= ", kMaxRank);
  bool empty = false;
  for (int d = 0; d < rank; ++d) {
    HG_CHECK(shape[d] >= 0, "[", op, "] shape[", d, "] = ", shape[d], ", expected >= 0");
    empty = empty || shape[d] == 0;
  }
  return !empty;
}

template <int kOperands>
StridedLayout<kOperands> collapse_strided(const int64_t* shape, const int64_t* const (&strides)[kOperands], int rank) {
  StridedLayout<kOperands> out;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    const int last = out.rank - 1;
    bool merges = last >= 0;
    for (int k = 0; k < kOperands && merges; ++k) merges = out.strides[k][last] == strides[k][d] * shape[d];
    if (merges) {
      out.shape[last] *= shape[d];
      for (int k = 0; k < kOperands; ++k) out.strides[k][last] = strides[k][d];
    } else {
      out.shape[out.rank] = shape[d];
      for (int k = 0; k < kOperands; ++k) out.strides[k][out.rank] = strides[k][d];
      ++out.rank;
    }
  }
  if (out.rank == 0) {
    out.rank = 1;
    out.shape[0] = 1;
    for (int k = 0; k < kOperands; ++k) out.strides[k][0] = 1;
  }
  return out;
}

}  // namespace hg::kernels
