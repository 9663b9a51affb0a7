// RMSNorm over the last dimension of contiguous [rows, cols], forward and backward (the math:
// kernels/kernels.h, rms_norm_forward / rms_norm_backward; A = acc_t<T>, fp32 for half types).
//
// Forward, parallel strategy: a warp per row when cols <= kWarpRowLimit, a block per row otherwise
// (RowGroup, device_math.h). Two passes over the row, the second mostly from L1/L2: the sum of
// squares (a fixed-shape reduction) -> rstd, then y = x * rstd * w. Consecutive threads read
// consecutive elements (coalesced).
//
// Backward, deterministic two-stage reduction (no float atomics):
//   stage 1 (rms_norm_backward_kernel): the rows are cut into `blocks` contiguous ranges of at least
//     kMinRowsPerBlock rows (at most kMaxRowBlocks; the split depends on `rows` alone), one block of
//     kBackwardThreads threads per range, walking its rows in order. Per row it reduces sum g * xhat
//     over the block, writes dx, and adds dy * xhat into the block's partial dw row. Thread t owns the
//     columns t, t + blockDim, ... of that row, so the read-modify-writes never race and each column's
//     partial is the sum over the block's rows in row order. The partial row lives in shared memory
//     when cols fit kMaxSharedPartial (written to global scratch once at the end), else in the
//     global scratch row itself.
//   stage 2 (rms_norm_weight_grad_kernel): one thread per column adds the blocks' partials in block
//     order and writes dweight (rounded once). The same bits on every run.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/workspace.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int64_t kMaxRowBlocks = 512;
constexpr int64_t kMinRowsPerBlock = 16;
constexpr int kBackwardThreads = 256;
constexpr size_t kMaxSharedPartial = 32 * 1024;

template <class T, bool kWarpRows>
__global__ void __launch_bounds__(kMaxRowThreads)
    rms_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
                            acc_t<T>* __restrict__ rstd, int64_t rows, int64_t cols, acc_t<T> eps) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> group = RowGroup<kWarpRows>::make();
  if (group.row >= rows) return;  // whole warps (warp rows) or whole blocks: the reduction stays uniform
  const T* xr = x + group.row * cols;
  A squares = 0;
  for (int64_t c = group.worker; c < cols; c += group.size) {
    const A v = to_acc(xr[c]);
    squares += v * v;
  }
  squares = group.reduce(squares, SumOp{}, A(0), shared);
  const A inv = A(1) / sqrt_acc(squares / A(cols) + eps);
  if (rstd != nullptr && group.worker == 0) rstd[group.row] = inv;
  T* yr = y + group.row * cols;
  for (int64_t c = group.worker; c < cols; c += group.size) {
    const A w = weight != nullptr ? to_acc(weight[c]) : A(1);
    yr[c] = from_acc<T>(to_acc(xr[c]) * inv * w);
  }
}

template <class T>
__global__ void __launch_bounds__(kBackwardThreads)
    rms_norm_backward_kernel(const T* __restrict__ x, const T* __restrict__ weight, const acc_t<T>* __restrict__ rstd,
                             const T* __restrict__ dy, T* __restrict__ dx, acc_t<T>* __restrict__ partial,
                             bool partial_in_shared, int64_t rows, int64_t cols, int64_t blocks) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  HG_DYNAMIC_SHARED(A, shared_partial);
  const int64_t b = blockIdx.x;
  A* acc = partial == nullptr ? nullptr : partial_in_shared ? shared_partial : partial + b * cols;
  if (acc != nullptr)
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) acc[c] = A(0);
  const int64_t first = rows * b / blocks, last = rows * (b + 1) / blocks;
  for (int64_t r = first; r < last; ++r) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    const A inv = rstd[r];
    A dot = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A w = weight != nullptr ? to_acc(weight[c]) : A(1);
      dot += to_acc(dyr[c]) * w * to_acc(xr[c]) * inv;
    }
    dot = block_reduce(dot, SumOp{}, A(0), shared);
    const A mean_dot = dot / A(cols);
    T* dxr = dx + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A w = weight != nullptr ? to_acc(weight[c]) : A(1);
      const A g = to_acc(dyr[c]), xhat = to_acc(xr[c]) * inv;
      dxr[c] = from_acc<T>(inv * (g * w - xhat * mean_dot));
      if (acc != nullptr) acc[c] += g * xhat;
    }
  }
  if (acc != nullptr && partial_in_shared)
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) partial[b * cols + c] = acc[c];
}

template <class T>
__global__ void rms_norm_weight_grad_kernel(const acc_t<T>* __restrict__ partial, T* __restrict__ dweight,
                                            int64_t blocks, int64_t cols) {
  using A = acc_t<T>;
  for (int64_t c = flat_worker(); c < cols; c += flat_workers()) {
    A sum = 0;
    for (int64_t b = 0; b < blocks; ++b) sum += partial[b * cols + c];
    dweight[c] = from_acc<T>(sum);
  }
}

}  // namespace

void rms_norm_forward(const void* x, const void* weight, void* y, void* rstd, int64_t rows, int64_t cols, double eps,
                      DType dtype, Stream stream) {
  HG_CHECK(rows >= 0 && cols >= 0, "[rms_norm_forward] rows = ", rows, ", cols = ", cols, ", expected both >= 0");
  if (rows == 0 || cols == 0) return;
  dispatch_floating_cuda(dtype, "rms_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    const RowLaunch l = row_launch(rows, cols);
    const auto kernel = l.warp_rows ? rms_norm_forward_kernel<T, true> : rms_norm_forward_kernel<T, false>;
    launch(kernel, l.grid, l.block, 0, stream, static_cast<const T*>(x), static_cast<const T*>(weight),
           static_cast<T*>(y), static_cast<A*>(rstd), rows, cols, A(eps));
  });
}

void rms_norm_backward(const void* x, const void* weight, const void* rstd, const void* dy, void* dx, void* dweight,
                       int64_t rows, int64_t cols, DType dtype, Stream stream) {
  HG_CHECK(rows >= 0 && cols >= 0, "[rms_norm_backward] rows = ", rows, ", cols = ", cols, ", expected both >= 0");
  if (cols == 0) return;
  const bool want_dw = dweight != nullptr && weight != nullptr;
  dispatch_floating_cuda(dtype, "rms_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    const int64_t wanted = (rows + kMinRowsPerBlock - 1) / kMinRowsPerBlock;
    const int64_t blocks = wanted < kMaxRowBlocks ? wanted : kMaxRowBlocks;
    if (blocks == 0) {  // no rows: dweight, a sum over nothing, is 0
      if (want_dw) HG_CUDA_CHECK(cudaMemsetAsync(dweight, 0, size_t(cols) * dtype_size(dtype), stream));
      return;
    }
    Workspace scratch(want_dw ? size_t(blocks * cols) * sizeof(A) : 0, stream);
    const bool in_shared = size_t(cols) * sizeof(A) <= kMaxSharedPartial;
    launch(rms_norm_backward_kernel<T>, dim3(unsigned(blocks)), dim3(kBackwardThreads),
           want_dw && in_shared ? size_t(cols) * sizeof(A) : 0, stream, static_cast<const T*>(x),
           static_cast<const T*>(weight), static_cast<const A*>(rstd), static_cast<const T*>(dy), static_cast<T*>(dx),
           want_dw ? scratch.as<A>() : nullptr, in_shared, rows, cols, blocks);
    if (want_dw) {
      launch(rms_norm_weight_grad_kernel<T>, flat_grid(cols), dim3(kFlatThreads), 0, stream, scratch.as<const A>(),
             static_cast<T*>(dweight), blocks, cols);
    }
  });
}

}  // namespace hg::kernels::cuda
