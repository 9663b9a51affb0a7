// Fused log-softmax + negative log-likelihood over logits [rows, cols] and targets [rows].
//
// Math, per row r with target t (A = acc_t<T>; loss, lse and dloss are in A):
//   m = max_c x[c],  lse = m + log(sum_c exp(x[c] - m)),  loss = lse - x[t]
//   dlogits[c] = dloss * (exp(x[c] - lse) - [c == t])
// Rows whose target is ignore_index get loss = 0 and dlogits = 0 (their lse is still written).
// Probabilities are never stored: the forward pass writes two numbers per row, and the backward
// pass recomputes exp(x - lse) from the lse the forward saved and writes dlogits directly.
//
// Parallel strategy: a warp per row when cols <= kWarpRowLimit (8 rows per 256-thread block), a
// block of 512 or 1024 threads per row otherwise (RowGroup, device_math.h).
//   forward: ONE pass over the logits: each thread keeps an online (max, sum of exp(x - max)) over
//     its columns (16-byte packs where the row is aligned), the group merges the pairs (shuffles,
//     plus one pair per warp in shared memory for a block), and the group's thread 0 reads x[t]
//     and writes loss and lse.
//   backward: one pass, every thread writes its columns of dlogits; no reduction.
// The mean (cross_entropy_mean_kernel, one block of kMeanThreads): sums the non-ignored rows' losses
// (each thread a strided subset, then a block reduction: a fixed order, the same bits on every run),
// counts them, and writes mean = sum * inv_count and inv_count = 1 / count (NaN when no row counts),
// so the loss op never reads the count on the host.
// Target checking, on the device (no host wait): the forward kernel gives a bad row (a target
// outside [0, cols), not ignore_index) loss 0 and never reads outside its row; the mean kernel finds
// the smallest such row while counting and records it in the device's error record
// (kernels/cuda/device_errors.h), which the engine raises as hg::Error -- the CPU backend's message
// -- at its next host read. The backward pass does not check again (its forward did); an
// out-of-range target there matches no column, so nothing outside dlogits is touched.
#include <climits>

#include "kernels/cuda/device_error_record.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/row_launch_bounds.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/online_softmax.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kMeanThreads = 1024;

template <class T, class I, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_forward_kernel(const T* __restrict__ x, const I* __restrict__ targets, acc_t<T>* __restrict__ loss,
                                 acc_t<T>* __restrict__ lse, int64_t rows, int64_t cols, int64_t ignore_index) {
  using A = acc_t<T>;
  __shared__ MaxSum<A> shared[32];
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= rows) return;  // a whole warp (warp rows) or never (block rows: grid = rows)
  const T* xr = x + g.row * cols;

  const MaxSum<A> identity = max_sum_identity<A>();
  MaxSum<A> acc = identity;
  for_packs<kPack<T>>(cols, pack_head<T>(cols, xr), g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(xr + c);
    HG_UNROLL
    for (int k = 0; k < W; ++k) online_add(acc, to_acc(p.v[k]));
  });
  acc = g.reduce(acc, MaxSumOp{}, identity, shared);

  if (g.worker == 0) {
    const A row_lse = acc.m + log_acc(acc.s);
    const int64_t t = int64_t(targets[g.row]);
    lse[g.row] = row_lse;
    // An ignored row, or a bad one (reported by the mean kernel): loss 0, nothing read outside the row.
    loss[g.row] = t == ignore_index || t < 0 || t >= cols ? A(0) : row_lse - to_acc(xr[t]);
  }
}

// mean = (sum of the counted rows' losses) * inv_count, inv_count = 1 / count; records the smallest
// row with a bad target.
template <class A, class I>
__global__ void __launch_bounds__(kMeanThreads)
    cross_entropy_mean_kernel(const A* __restrict__ loss, const I* __restrict__ targets, A* __restrict__ mean,
                              A* __restrict__ inv_count, int64_t rows, int64_t cols, int64_t ignore_index,
                              DeviceErrorRecord* __restrict__ record) {
  __shared__ A shared_sum[32];
  __shared__ long long shared_ll[32];
  A sum = 0;
  long long counted = 0, first_bad = rows;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = int64_t(targets[r]);
    if (t == ignore_index) continue;
    if (t < 0 || t >= cols) {
      if (first_bad == rows) first_bad = r;  // this thread's rows increase: its first is its smallest
      continue;
    }
    sum += loss[r];
    ++counted;
  }
  sum = block_reduce(sum, SumOp{}, A(0), shared_sum);
  counted = block_reduce(counted, SumOp{}, 0LL, shared_ll);
  first_bad = block_reduce(first_bad, MinOp{}, (long long)rows, shared_ll);
  if (threadIdx.x == 0) {
    if (first_bad < rows) {
      record_device_error(record, DeviceErrorOp::cross_entropy_forward, first_bad, (long long)targets[first_bad], cols,
                          ignore_index);
    }
    const A inv = counted > 0 ? A(1) / A(counted) : A(NAN);
    *inv_count = inv;
    *mean = sum * inv;
  }
}

template <class T, class I, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads, kRowMinBlocks<T>)
    cross_entropy_backward_kernel(const T* __restrict__ x, const I* __restrict__ targets,
                                  const acc_t<T>* __restrict__ lse, const acc_t<T>* __restrict__ dloss,
                                  T* __restrict__ dx, int64_t rows, int64_t cols, int64_t ignore_index) {
  using A = acc_t<T>;
  const RowGroup<kWarpRows> g = RowGroup<kWarpRows>::make();
  if (g.row >= rows) return;
  const T* xr = x + g.row * cols;
  T* dxr = dx + g.row * cols;
  const int64_t t = int64_t(targets[g.row]);
  const bool ignored = t == ignore_index;
  const A gain = ignored ? A(0) : dloss[g.row];
  const A row_lse = lse[g.row];

  for_packs<kPack<T>>(cols, pack_head<T>(cols, xr, dxr), g.worker, g.size, [&](int64_t c, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(xr + c);
    Pack<T, W> out;
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      const A e = exp_acc(to_acc(p.v[k]) - row_lse);
      out.v[k] = from_acc<T>(ignored ? A(0) : gain * (c + k == t ? e - A(1) : e));
    }
    store_pack<W>(dxr + c, out);
  });
}

}  // namespace

void cross_entropy_forward(const void* logits, const void* targets, DType index_dtype, void* loss, void* lse,
                           void* mean, void* inv_count, int64_t rows, int64_t cols, int64_t ignore_index, DType dtype,
                           Stream stream) {
  HG_CHECK(rows >= 0 && cols > 0, "[cross_entropy_forward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  HG_CHECK(rows < INT_MAX, "[cross_entropy_forward] rows = ", rows, ", expected rows < ", INT_MAX);
  // rows == 0: no row can be bad, and the mean kernel still writes NaN (a mean over no rows).
  DeviceErrorRecord* record = rows > 0 ? device_error_record_for_check() : nullptr;
  dispatch_floating_cuda(dtype, "cross_entropy_forward", [&]<class T>() {
    dispatch_index_cuda(index_dtype, "cross_entropy_forward", [&]<class I>() {
      using A = acc_t<T>;
      const RowLaunch rl = row_launch(rows, cols);
      const auto kernel =
          rl.warp_rows ? cross_entropy_forward_kernel<T, I, true> : cross_entropy_forward_kernel<T, I, false>;
      launch(kernel, rl.grid, rl.block, 0, stream, static_cast<const T*>(logits), static_cast<const I*>(targets),
             static_cast<A*>(loss), static_cast<A*>(lse), rows, cols, ignore_index);
      launch(cross_entropy_mean_kernel<A, I>, dim3(1), dim3(kMeanThreads), 0, stream, static_cast<const A*>(loss),
             static_cast<const I*>(targets), static_cast<A*>(mean), static_cast<A*>(inv_count), rows, cols,
             ignore_index, record);
    });
  });
}

void cross_entropy_backward(const void* logits, const void* targets, DType index_dtype, const void* lse,
                            const void* dloss, void* dlogits, int64_t rows, int64_t cols, int64_t ignore_index,
                            DType dtype, Stream stream) {
  HG_CHECK(rows >= 0 && cols > 0, "[cross_entropy_backward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  if (rows == 0) return;
  dispatch_floating_cuda(dtype, "cross_entropy_backward", [&]<class T>() {
    dispatch_index_cuda(index_dtype, "cross_entropy_backward", [&]<class I>() {
      using A = acc_t<T>;
      const RowLaunch rl = row_launch(rows, cols);
      const auto kernel =
          rl.warp_rows ? cross_entropy_backward_kernel<T, I, true> : cross_entropy_backward_kernel<T, I, false>;
      launch(kernel, rl.grid, rl.block, 0, stream, static_cast<const T*>(logits), static_cast<const I*>(targets),
             static_cast<const A*>(lse), static_cast<const A*>(dloss), static_cast<T*>(dlogits), rows, cols,
             ignore_index);
    });
  });
}

}  // namespace hg::kernels::cuda
