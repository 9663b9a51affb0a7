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
// Target checking: the forward kernel records the smallest row with an out-of-range target (and
// neither ignore_index) with an integer atomicMin in a device status word, and counts the
// non-ignored rows with an integer atomicAdd (integer atomics: the same result in any order). The
// host reads both back after the kernel (a stream synchronisation, which the contract states) and
// throws hg::Error naming the row, as the CPU backend does. A bad row never reads outside its row.
// The backward pass does not check again (its forward did); an out-of-range target there matches no
// column, so nothing outside dlogits is touched.
#include <climits>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/workspace.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/online_softmax.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

// status[0]: smallest row with a bad target (INT_MAX when none); status[1]: non-ignored rows.
template <class T, class I, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_forward_kernel(const T* __restrict__ x, const I* __restrict__ targets, acc_t<T>* __restrict__ loss,
                                 acc_t<T>* __restrict__ lse, int64_t rows, int64_t cols, int64_t ignore_index,
                                 int* __restrict__ status) {
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
    if (t == ignore_index) {
      loss[g.row] = A(0);
    } else if (t < 0 || t >= cols) {
      loss[g.row] = A(0);
      atomicMin(&status[0], int(g.row));
    } else {
      loss[g.row] = row_lse - to_acc(xr[t]);
      atomicAdd(&status[1], 1);
    }
  }
}

template <class T, class I, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads)
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

int64_t cross_entropy_forward(const void* logits, const void* targets, DType index_dtype, void* loss, void* lse,
                              int64_t rows, int64_t cols, int64_t ignore_index, DType dtype, Stream stream) {
  HG_CHECK(rows >= 0 && cols > 0, "[cross_entropy_forward] rows = ", rows, ", cols = ", cols,
           ", expected rows >= 0 and cols >= 1");
  HG_CHECK(rows < INT_MAX, "[cross_entropy_forward] rows = ", rows, ", expected rows < ", INT_MAX);
  if (rows == 0) return 0;
  Workspace scratch(2 * sizeof(int), stream);
  int* status = scratch.as<int>();
  int host_status[2] = {INT_MAX, 0};
  HG_CUDA_CHECK(cudaMemcpyAsync(status, host_status, sizeof host_status, cudaMemcpyHostToDevice, stream));
  dispatch_floating_cuda(dtype, "cross_entropy_forward", [&]<class T>() {
    dispatch_index_cuda(index_dtype, "cross_entropy_forward", [&]<class I>() {
      using A = acc_t<T>;
      const RowLaunch rl = row_launch(rows, cols);
      const auto kernel =
          rl.warp_rows ? cross_entropy_forward_kernel<T, I, true> : cross_entropy_forward_kernel<T, I, false>;
      launch(kernel, rl.grid, rl.block, 0, stream, static_cast<const T*>(logits), static_cast<const I*>(targets),
             static_cast<A*>(loss), static_cast<A*>(lse), rows, cols, ignore_index, status);
    });
  });
  HG_CUDA_CHECK(cudaMemcpyAsync(host_status, status, sizeof host_status, cudaMemcpyDeviceToHost, stream));
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host_status[0] != INT_MAX) {
    const int64_t row = host_status[0];
    int64_t target = 0;
    dispatch_index_cuda(index_dtype, "cross_entropy_forward", [&]<class I>() {
      I value{};
      HG_CUDA_CHECK(cudaMemcpy(&value, static_cast<const I*>(targets) + row, sizeof(I), cudaMemcpyDeviceToHost));
      target = int64_t(value);
    });
    HG_FAIL("[cross_entropy_forward] target ", target, " at row ", row, " is out of range, expected 0 <= target < ",
            cols, " (or ignore_index = ", ignore_index, ")");
  }
  return host_status[1];
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
