#pragma once
// Two strided operands over one shape (copy: source and destination; a broadcast binary op: a and
// b), reduced to the fewest dimensions that describe the same element walk: size-1 dimensions are
// dropped, and a dimension merges into the previous one when both operands are contiguous across
// the pair (outer stride == inner stride * inner size for each). A fully contiguous copy becomes one
// row; a scalar becomes rank 1 of size 1. Computed on the host; passed to kernels by value.
#include <cstdint>

#include "kernels/kernels.h"

namespace hg::kernels {

struct PairLayout {
  int rank = 0;
  int64_t shape[kMaxRank];
  int64_t first[kMaxRank];   // strides of the first operand (source, or a)
  int64_t second[kMaxRank];  // strides of the second operand (destination, or b)
};

inline PairLayout collapse_dimensions(const int64_t* shape, const int64_t* first_strides,
                                      const int64_t* second_strides, int rank) {
  PairLayout out;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    const int last = out.rank - 1;
    if (last >= 0 && out.first[last] == first_strides[d] * shape[d] &&
        out.second[last] == second_strides[d] * shape[d]) {
      out.shape[last] *= shape[d];
      out.first[last] = first_strides[d];
      out.second[last] = second_strides[d];
    } else {
      out.shape[out.rank] = shape[d];
      out.first[out.rank] = first_strides[d];
      out.second[out.rank] = second_strides[d];
      ++out.rank;
    }
  }
  if (out.rank == 0) {  // a single element
    out.rank = 1;
    out.shape[0] = 1;
    out.first[0] = out.second[0] = 1;
  }
  return out;
}

}  // namespace hg::kernels
