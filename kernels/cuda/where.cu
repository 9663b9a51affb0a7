// where_forward: y[idx] = cond[idx . cond_strides] ? a[idx . a_strides] : b[idx . b_strides] (the
// math: kernels/kernels.h). Any dtype: the kernel moves elements as bits of their size (1, 2, 4 or
// 8 bytes; dispatch_bits_cuda), so NaN payloads and -0 pass unchanged, as on the CPU.
//
// The layout is simplified on the host (kernels/strided_layout.h) and passed by value.
//
// Parallel strategy: a grid-stride loop with one output element per thread (flat grid, device_math.h);
// a thread unravels its flat index (innermost dimension fastest, so a warp's reads of each operand
// with inner stride 1 and its writes are contiguous) and reads cond, a and b before it selects: every
// lane of a warp loads both operands, so each load is one full coalesced request (a load of only the
// selected operand would leave half the lanes of a random mask idle at each site and still touch every
// sector of both), and the select is a bit mask, not a branch, so each lane stores once from one
// instruction (a conditional store compiled as two stores would make two half-empty requests; the
// kernel audit caught it).
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/strided_layout.h"

namespace hg::kernels::cuda {
namespace {

template <class E>
__global__ void where_kernel(const bool* __restrict__ cond, const E* __restrict__ a, const E* __restrict__ b,
                             E* __restrict__ y, StridedLayout<3> layout, int64_t total) {
  for (int64_t i = flat_worker(); i < total; i += flat_workers()) {
    int64_t rest = i, c_offset = 0, a_offset = 0, b_offset = 0;
    for (int d = layout.rank - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      c_offset += index * layout.strides[0][d];
      a_offset += index * layout.strides[1][d];
      b_offset += index * layout.strides[2][d];
    }
    const E from_a = a[a_offset], from_b = b[b_offset];
    const E take_a = E(0) - E(cond[c_offset]);  // every bit set where cond is true
    y[i] = E((from_a & take_a) | (from_b & E(~take_a)));
  }
}

}  // namespace

void where_forward(const bool* cond, const int64_t* cond_strides, const void* a, const int64_t* a_strides,
                   const void* b, const int64_t* b_strides, void* y, const int64_t* shape, int rank, DType dtype,
                   Stream stream) {
  if (!strided_shape_has_elements("where_forward", shape, rank)) return;
  const int64_t* const strides[3] = {cond_strides, a_strides, b_strides};
  const StridedLayout<3> layout = collapse_strided<3>(shape, strides, rank);
  const int64_t total = layout.numel();
  dispatch_bits_cuda(dtype, "where_forward", [&]<class E>() {
    launch(where_kernel<E>, flat_grid(total), dim3(kFlatThreads), 0, stream, cond, static_cast<const E*>(a),
           static_cast<const E*>(b), static_cast<E*>(y), layout, total);
  });
}

}  // namespace hg::kernels::cuda
