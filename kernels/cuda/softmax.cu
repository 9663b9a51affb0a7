// Row-wise softmax and log-softmax over contiguous [rows, cols], forward and backward.
//
// Math, per row, over the visible columns c < v (v = cols, or with causal_rows > 0
// v = (r % causal_rows) + (cols - causal_rows) + 1), all in A = acc_t<T> (fp32 for half types):
//   m = max_c x[c],  s = sum_c exp(x[c] - m)            (max-subtracted: exp never overflows)
//   softmax:     y[c] = exp(x[c] - m) / s,   masked y = 0
//   log_softmax: y[c] = x[c] - m - log(s),   masked y = -inf
// Backward (no mask needed: masked softmax outputs are 0, so their dx is 0):
//   softmax:     dx = y * (dy - sum_c dy * y)
//   log_softmax: dx = dy - exp(y) * sum_c dy
// A NaN anywhere in a visible row makes the whole row NaN (it reaches s).
//
// Parallel strategy: a warp per row when cols <= kWarpRowLimit (8 rows per 256-thread block), else a
// block of 512 or 1024 threads per row (RowGroup, device_math.h). Nothing of the row is kept in
// shared memory; it is read from global memory twice (the second read mostly hits L2):
//   forward pass 1: each thread runs an online max/sum over its columns (16-byte packs where the
//     row is aligned; when a larger value arrives, the running sum is rescaled by exp(m_old - m_new)),
//     then the (m, s) pairs of the group are merged -- warp shuffles, plus one pair per warp in
//     shared memory for a block -- with s_a exp(m_a - m) + s_b exp(m_b - m);
//   forward pass 2: every thread writes its columns of y from x, m and s (masked columns too).
//   backward: pass 1 reduces sum dy*y (or sum dy) over the group, pass 2 writes dx.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/row_launch_bounds.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/online_softmax.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <class T, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols, bool log,
                           int64_t causal_rows) {
  using A = acc_t<T>;
  __shared__ MaxSum<A> shared[32];
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= rows) return;  // a whole warp (warp rows) or never (block rows: grid = rows)
  const T* xr = x + g.row * cols;
  T* yr = y + g.row * cols;
  const int64_t visible = causal_rows > 0 ? (g.row % causal_rows) + (cols - causal_rows) + 1 : cols;

  const MaxSum<A> identity = max_sum_identity<A>();
  MaxSum<A> acc = identity;
  for_packs<kPack<T>>(visible, pack_head<T>(visible, xr), g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(xr + c);
    HG_UNROLL
    for (int k = 0; k < W; ++k) online_add(acc, to_acc(p.v[k]));
  });
  acc = g.reduce(acc, MaxSumOp{}, identity, shared);
  const A m = acc.m, inv_s = A(1) / acc.s, log_s = log_acc(acc.s);

  for_packs<kPack<T>>(cols, pack_head<T>(cols, xr, yr), g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(xr + c);
    Pack<T, W> out;
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      const A v = to_acc(p.v[k]);
      A r;
      if (c + k < visible) {
        r = log ? (v - m) - log_s : exp_acc(v - m) * inv_s;
      } else {
        r = log ? neg_infinity<A>() : A(0);
      }
      out.v[k] = from_acc<T>(r);
    }
    store_pack<W>(yr + c, out);
  });
}

template <class T, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads, kRowMinBlocks<T>)
    softmax_backward_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                            int64_t cols, bool log) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= rows) return;
  const T* yr = y + g.row * cols;
  const T* dyr = dy + g.row * cols;
  T* dxr = dx + g.row * cols;
  const int64_t head = pack_head<T>(cols, yr, dyr, dxr);

  A s = 0;
  for_packs<kPack<T>>(cols, head, g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> yp = load_pack<W>(yr + c), gp = load_pack<W>(dyr + c);
    HG_UNROLL
    for (int k = 0; k < W; ++k) s += log ? to_acc(gp.v[k]) : to_acc(gp.v[k]) * to_acc(yp.v[k]);
  });
  s = g.reduce(s, SumOp{}, A(0), shared);

  for_packs<kPack<T>>(cols, head, g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> yp = load_pack<W>(yr + c), gp = load_pack<W>(dyr + c);
    Pack<T, W> out;
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      const A yv = to_acc(yp.v[k]), gv = to_acc(gp.v[k]);
      out.v[k] = from_acc<T>(log ? gv - exp_acc(yv) * s : yv * (gv - s));
    }
    store_pack<W>(dxr + c, out);
  });
}

}  // namespace

void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, bool log, int64_t causal_rows, DType dtype,
                     Stream stream) {
  HG_CHECK(rows >= 0 && cols >= 0, "[softmax_forward] rows = ", rows, ", cols = ", cols, ", expected both >= 0");
  HG_CHECK(causal_rows >= 0 && causal_rows <= cols, "[softmax_forward] causal_rows = ", causal_rows,
           ", expected 0 <= causal_rows <= cols = ", cols, " (every row must see at least one column)");
  if (rows == 0 || cols == 0) return;
  dispatch_floating_cuda(dtype, "softmax_forward", [&]<class T>() {
    const RowLaunch rl = row_launch(rows, cols);
    const auto kernel = rl.warp_rows ? softmax_forward_kernel<T, true> : softmax_forward_kernel<T, false>;
    launch(kernel, rl.grid, rl.block, 0, stream, static_cast<const T*>(x), static_cast<T*>(y), rows, cols, log,
           causal_rows);
  });
}

void softmax_backward(const void* y, const void* dy, void* dx, int64_t rows, int64_t cols, bool log, DType dtype,
                      Stream stream) {
  HG_CHECK(rows >= 0 && cols >= 0, "[softmax_backward] rows = ", rows, ", cols = ", cols, ", expected both >= 0");
  if (rows == 0 || cols == 0) return;
  dispatch_floating_cuda(dtype, "softmax_backward", [&]<class T>() {
    const RowLaunch rl = row_launch(rows, cols);
    const auto kernel = rl.warp_rows ? softmax_backward_kernel<T, true> : softmax_backward_kernel<T, false>;
    launch(kernel, rl.grid, rl.block, 0, stream, static_cast<const T*>(y), static_cast<const T*>(dy),
           static_cast<T*>(dx), rows, cols, log);
  });
}

}  // namespace hg::kernels::cuda
