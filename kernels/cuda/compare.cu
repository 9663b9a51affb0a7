// compare_forward: y[idx] = a[idx . a_strides] op b[idx . b_strides], one bool per element (the math:
// kernels/kernels.h; the op's row in kernels/compare_math.h, the lines the CPU backend runs). Values
// compare in their own type; __half/__nv_bfloat16 widen to float first (exact), integers never do.
//
// The layout is simplified on the host as the CPU backend does (kernels/strided_layout.h: size-1
// dimensions dropped, neighbours merged) and passed by value, so no host array is read on the device.
//
// Parallel strategy: a grid-stride loop with one output element per thread (flat grid, device_math.h).
// A thread unravels its flat index into the simplified shape, innermost dimension fastest, so the
// threads of a warp read neighbouring elements of every operand whose inner stride is 1 and write 32
// neighbouring bytes of y. Comparisons are memory-bound; nothing is shared between threads.
#include <type_traits>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/strided_layout.h"

namespace hg::kernels::cuda {
namespace {

template <class T>
HG_DEVICE auto compare_value(T v) {
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
    return to_acc(v);
  } else {
    return v;
  }
}

template <class T, CompareOp kOp>
__global__ void compare_kernel(const T* __restrict__ a, const T* __restrict__ b, bool* __restrict__ y,
                               StridedLayout<2> layout, int64_t total) {
  for (int64_t i = flat_worker(); i < total; i += flat_workers()) {
    int64_t rest = i, a_offset = 0, b_offset = 0;
    for (int d = layout.rank - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      a_offset += index * layout.strides[0][d];
      b_offset += index * layout.strides[1][d];
    }
    y[i] = CompareMath<kOp>::value(compare_value(a[a_offset]), compare_value(b[b_offset]));
  }
}

}  // namespace

void compare_forward(CompareOp op, const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                     bool* y, const int64_t* shape, int rank, DType dtype, Stream stream) {
  if (!strided_shape_has_elements("compare_forward", shape, rank)) return;
  const int64_t* const strides[2] = {a_strides, b_strides};
  const StridedLayout<2> layout = collapse_strided<2>(shape, strides, rank);
  const int64_t total = layout.numel();
  dispatch_all_cuda(dtype, "compare_forward", [&]<class T>() {
    with_op(op, [&]<CompareOp kOp>() {
      launch(compare_kernel<T, kOp>, flat_grid(total), dim3(kFlatThreads), 0, stream, static_cast<const T*>(a),
             static_cast<const T*>(b), y, layout, total);
    });
  });
}

}  // namespace hg::kernels::cuda
