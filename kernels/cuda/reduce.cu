// reduce: x viewed as contiguous [outer, n, inner].
//   Sum: y[o, i] = scale * sum_j x[o, j, i], accumulated in acc_t<T> (n = 0 gives 0).
//   Max: y[o, i] = max_j x[o, j, i]; argmax[o, i] (nullable, i64) = the first j holding it.
//        NaN propagates: a NaN is larger than every number, so the first NaN is the maximum.
//
// Two layouts, two strategies:
//   inner == 1 (reducing the last dimension, rows of n contiguous elements): a warp per row when
//     n <= kWarpRowLimit (8 rows per 256-thread block), a block per row otherwise (RowGroup in
//     device_math.h). Each thread strides over the row in 16-byte packs (128-bit loads where the
//     row is aligned, single elements for the head and tail), keeping one partial; the group then
//     combines the partials with a shuffle butterfly (warp) or shuffles plus one value per warp in
//     shared memory (block). For Max the partial is (value, index) and the combination is a total
//     order -- NaN first, then larger value, then smaller index -- so the first index of the
//     maximum wins whatever order the partials meet in.
//   inner > 1: one thread per output column (o, i), walking j in increasing order; neighbouring
//     threads read neighbouring elements of each x[o, j, :] row, so loads coalesce. This is the
//     CPU's order, so these sums are the CPU's bits. (A column of huge n with few columns gets little
//     parallelism; a split-n two-stage variant would fix that if such shapes ever matter.)
// No atomics: every output is written by one thread, so results are deterministic.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/row_launch_bounds.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <class A>
struct MaxIndex {
  A value;
  int64_t index;
};

template <class A>
HG_DEVICE MaxIndex<A> shuffle_xor(MaxIndex<A> v, int lane_mask) {
  return {cuda::shuffle_xor(v.value, lane_mask), cuda::shuffle_xor(v.index, lane_mask)};
}

struct MaxIndexOp {
  template <class A>
  HG_DEVICE MaxIndex<A> operator()(MaxIndex<A> a, MaxIndex<A> b) const {
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan && a.value != b.value) return a.value > b.value ? a : b;
    return a.index <= b.index ? a : b;
  }
};

template <class T, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads, kRowMinBlocks<T>)
    sum_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n, acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= outer) return;  // a whole warp (warp rows) or never (block rows: grid = outer)
  const T* row = x + g.row * n;
  A acc = 0;
  for_packs<kPack<T>>(n, pack_head<T>(n, row), g.worker, g.size, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(row + j);
    HG_UNROLL
    for (int k = 0; k < W; ++k) acc += to_acc(p.v[k]);
  });
  acc = g.reduce(acc, SumOp{}, A(0), shared);
  if (g.worker == 0) y[g.row] = from_acc<T>(acc * scale);
}

template <class T, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads)
    max_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ argmax, int64_t outer,
                    int64_t n) {
  using A = acc_t<T>;
  __shared__ MaxIndex<A> shared[32];
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= outer) return;
  const T* row = x + g.row * n;
  const MaxIndex<A> identity{neg_infinity<A>(), INT64_MAX};
  MaxIndex<A> best = identity;
  for_packs<kPack<T>>(n, pack_head<T>(n, row), g.worker, g.size, [&](int64_t j, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(row + j);
    HG_UNROLL
    for (int k = 0; k < W; ++k) best = MaxIndexOp{}(best, MaxIndex<A>{to_acc(p.v[k]), j + k});
  });
  best = g.reduce(best, MaxIndexOp{}, identity, shared);
  if (g.worker == 0) {
    y[g.row] = from_acc<T>(best.value);
    if (argmax != nullptr) argmax[g.row] = best.index;
  }
}

template <class T>
__global__ void reduce_columns_kernel(ReduceOp op, const T* __restrict__ x, T* __restrict__ y,
                                      int64_t* __restrict__ argmax, int64_t outer, int64_t n, int64_t inner,
                                      acc_t<T> scale) {
  using A = acc_t<T>;
  for (int64_t t = flat_worker(); t < outer * inner; t += flat_workers()) {
    const int64_t o = t / inner, i = t % inner;
    const T* column = x + o * n * inner + i;
    if (op == ReduceOp::Sum) {
      A acc = n > 0 ? to_acc(column[0]) : A(0);
      for (int64_t j = 1; j < n; ++j) acc += to_acc(column[j * inner]);
      y[t] = from_acc<T>(n > 0 ? acc * scale : A(0));
    } else {
      A acc = to_acc(column[0]);
      int64_t index = 0;
      for (int64_t j = 1; j < n; ++j) {
        const A v = to_acc(column[j * inner]);
        if (v > acc || (is_nan(v) && !is_nan(acc))) {
          acc = v;
          index = j;
        }
      }
      y[t] = from_acc<T>(acc);
      if (argmax != nullptr) argmax[t] = index;
    }
  }
}

}  // namespace

void reduce(ReduceOp op, const void* x, void* y, int64_t* argmax, int64_t outer, int64_t n, int64_t inner, double scale,
            DType dtype, Stream stream) {
  HG_CHECK(outer >= 0 && n >= 0 && inner >= 0, "[reduce] sizes outer = ", outer, ", n = ", n, ", inner = ", inner,
           ", expected all >= 0");
  if (outer == 0 || inner == 0) return;
  HG_CHECK(op != ReduceOp::Max || n > 0, "[reduce] Max over an empty dimension (n = 0) of [", outer, ", 0, ", inner,
           "], expected n >= 1");
  dispatch_floating_cuda(dtype, "reduce", [&]<class T>() {
    using A = acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (inner > 1 || n == 0) {
      launch(reduce_columns_kernel<T>, flat_grid(outer * inner), dim3(kFlatThreads), 0, stream, op, xt, yt, argmax,
             outer, n, inner, A(scale));
      return;
    }
    const RowLaunch rl = row_launch(outer, n);
    if (op == ReduceOp::Sum) {
      if (rl.warp_rows) {
        launch(sum_rows_kernel<T, true>, rl.grid, rl.block, 0, stream, xt, yt, outer, n, A(scale));
      } else {
        launch(sum_rows_kernel<T, false>, rl.grid, rl.block, 0, stream, xt, yt, outer, n, A(scale));
      }
    } else if (rl.warp_rows) {
      launch(max_rows_kernel<T, true>, rl.grid, rl.block, 0, stream, xt, yt, argmax, outer, n);
    } else {
      launch(max_rows_kernel<T, false>, rl.grid, rl.block, 0, stream, xt, yt, argmax, outer, n);
    }
  });
}

}  // namespace hg::kernels::cuda
