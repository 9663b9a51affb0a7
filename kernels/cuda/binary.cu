// binary_forward: y[idx] = a[idx . a_strides] op b[idx . b_strides] for every index of `shape`,
// y contiguous, a stride of 0 broadcasting; a op b is BinaryMath<op>::value (the op's row in
// kernels/binary_math.h, the lines the CPU backend runs), computed in acc_t<T>.
//
// The layout is first simplified on the host exactly as the CPU backend does (size-1 dimensions
// dropped, neighbours merged when both inputs step over them as one), then handed to the kernel
// by value (PairLayout: rank <= kMaxRank, shape and both stride vectors), so no host array is
// ever read on the device.
//
// Parallel strategy:
//   - rank 1 with unit or zero strides (same shape, or one side a scalar): map_elements (map.h),
//     one 16-byte pack per thread with 128-bit loads/stores where aligned;
//   - anything else: a grid-stride loop with one output element per thread; the thread unravels its
//     flat index into the simplified shape (innermost dimension fastest, so neighbouring threads read
//     neighbouring elements of the inputs whose inner stride is 1) and gathers a and b.
//
// accumulate: y[i] = y[i] + x[i] in place, the bits binary_forward(Add) writes for y + x. The same
// 16-byte packs as map_elements (map.h), one per thread of a grid-stride loop; each thread loads both
// packs before it stores y's, and no pointer is __restrict__ (y is read and written, x may be y).
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/map.h"
#include "kernels/kernels_cuda.h"
#include "kernels/pair_layout.h"
#include "kernels/strided_layout.h"

namespace hg::kernels::cuda {
namespace {

// y = a op b on two contiguous inputs.
template <BinaryOp kOp, class A>
struct Both {
  HG_DEVICE A operator()(const A* v) const { return BinaryMath<kOp>::value(v[0], v[1]); }
};
template <class T, BinaryOp kOp>
__global__ void broadcast_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y, PairLayout layout,
                                 int64_t total) {
  for (int64_t i = flat_worker(); i < total; i += flat_workers()) {
    int64_t rest = i, a_offset = 0, b_offset = 0;
    for (int d = layout.rank - 1; d >= 0; --d) {
      const int64_t index = rest % layout.shape[d];
      rest /= layout.shape[d];
      a_offset += index * layout.first[d];
      b_offset += index * layout.second[d];
    }
    y[i] = from_acc<T>(BinaryMath<kOp>::value(to_acc(a[a_offset]), to_acc(b[b_offset])));
  }
}

// One side is a single element (stride 0): every thread reads it once, then streams the other side
// in packs.
template <class T, BinaryOp kOp>
__global__ void scalar_kernel(const T* __restrict__ tensor, const T* __restrict__ scalar, bool scalar_right,
                              T* __restrict__ y, int64_t n, int64_t head) {
  using A = acc_t<T>;
  const A s = to_acc(scalar[0]);
  for_packs<kPack<T>>(n, head, flat_worker(), flat_workers(), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> in = load_pack<W>(tensor + i);
    Pack<T, W> out;
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      const A v = to_acc(in.v[k]);
      out.v[k] = from_acc<T>(scalar_right ? BinaryMath<kOp>::value(v, s) : BinaryMath<kOp>::value(s, v));
    }
    store_pack<W>(y + i, out);
  });
}

template <class T>
__global__ void accumulate_kernel(T* y, const T* x, int64_t n, int64_t head) {
  for_packs<kPack<T>>(n, head, flat_worker(), flat_workers(), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> before = load_pack<W>(y + i), addend = load_pack<W>(x + i);
    Pack<T, W> out;
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      out.v[k] = from_acc<T>(BinaryMath<BinaryOp::Add>::value(to_acc(before.v[k]), to_acc(addend.v[k])));
    }
    store_pack<W>(y + i, out);
  });
}

}  // namespace

void accumulate(void* y, const void* x, int64_t n, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[accumulate] n = ", n, ", expected n >= 0");
  if (n == 0) return;
  dispatch_floating_cuda(dtype, "accumulate", [&]<class T>() {
    T* yt = static_cast<T*>(y);
    const T* xt = static_cast<const T*>(x);
    const int64_t head = pack_head<T>(n, yt, xt);
    const int64_t units = head < 0 ? n : (n + kPack<T> - 1) / kPack<T> + 1;
    launch(accumulate_kernel<T>, flat_grid(units), dim3(kFlatThreads), 0, stream, yt, xt, n, head);
  });
}

void binary_forward(BinaryOp op, const void* a, const int64_t* a_strides, const void* b, const int64_t* b_strides,
                    void* y, const int64_t* shape, int rank, DType dtype, Stream stream) {
  if (!strided_shape_has_elements("binary_forward", shape, rank)) return;
  const PairLayout layout = collapse_dimensions(shape, a_strides, b_strides, rank);
  int64_t total = 1;
  for (int d = 0; d < layout.rank; ++d) total *= layout.shape[d];
  dispatch_floating_cuda(dtype, "binary_forward", [&]<class T>() {
    using A = acc_t<T>;
    const T* at = static_cast<const T*>(a);
    const T* bt = static_cast<const T*>(b);
    T* yt = static_cast<T*>(y);
    if (layout.rank == 1 && layout.first[0] == 1 && layout.second[0] == 1) {
      with_op(op, [&]<BinaryOp kOp>() { map_elements(stream, total, Both<kOp, A>{}, yt, at, bt); });
      return;
    }
    if (layout.rank == 1 && (layout.first[0] == 0) != (layout.second[0] == 0) && (layout.first[0] == 1 || layout.second[0] == 1)) {
      const bool scalar_right = layout.second[0] == 0;
      const T* tensor = scalar_right ? at : bt;
      const T* scalar = scalar_right ? bt : at;
      const int64_t head = pack_head<T>(total, yt, tensor);
      const int64_t units = head < 0 ? total : (total + kPack<T> - 1) / kPack<T> + 1;
      with_op(op, [&]<BinaryOp kOp>() {
        launch(scalar_kernel<T, kOp>, flat_grid(units), dim3(kFlatThreads), 0, stream, tensor, scalar, scalar_right, yt,
               total, head);
      });
      return;
    }
    with_op(op, [&]<BinaryOp kOp>() {
      launch(broadcast_kernel<T, kOp>, flat_grid(total), dim3(kFlatThreads), 0, stream, at, bt, yt, layout, total);
    });
  });
}

}  // namespace hg::kernels::cuda
