// sum_of_squares: sum_i x[i]^2 over n contiguous elements, the reduction behind global
// gradient-norm clipping. Accumulated in double, like the CPU backend (a norm over 1e9 fp32
// elements keeps ~16 digits where an fp32 sum would lose several); inf/NaN propagate.
//
// Deterministic two-stage reduction (no float atomics):
//   stage 1 (partial_squares_kernel): a grid of `blocks` blocks, the count chosen from n alone.
//     Thread t of the grid owns, in a grid-stride loop, the 16-byte packs t, t + grid, ... of x (the
//     few elements before the first aligned address and after the last whole pack go one per
//     thread), adding value^2 in double into a register; the block then sums its threads' values
//     with a fixed shuffle butterfly plus one double per warp in shared memory, and writes
//     partial[block].
//   stage 2 (total_squares_kernel): one block of kThreads threads adds the partials in a fixed
//     order (thread t: partials t, t + kThreads, ...; then the same butterfly) into result[0].
// Every addition happens in an order fixed by n, so the value is the same bits on every run (it
// differs from the CPU's chunked sum only by rounding). sum_of_squares copies the value to the host,
// which synchronises the stream; sum_of_squares_into has stage 2 add it to a double in device memory
// instead (*accumulator += total: one thread, in call order), so global clipping reads nothing back.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/workspace.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/step_kernels.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

template <class T>
__global__ void partial_squares_kernel(const T* __restrict__ x, int64_t n, int64_t head, double* __restrict__ partial) {
  __shared__ double shared[32];
  double sum = 0.0;
  for_packs<kPack<T>>(n, head, flat_worker(), flat_workers(), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    const Pack<T, W> p = load_pack<W>(x + i);
    HG_UNROLL
    for (int k = 0; k < W; ++k) {
      const double v = double(to_acc(p.v[k]));
      sum += v * v;
    }
  });
  sum = block_reduce(sum, SumOp{}, 0.0, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void total_squares_kernel(const double* __restrict__ partial, int64_t blocks, double* __restrict__ result,
                                     bool accumulate) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) sum += partial[b];
  sum = block_reduce(sum, SumOp{}, 0.0, shared);
  if (threadIdx.x == 0) result[0] = accumulate ? result[0] + sum : sum;
}

// Stage 1 into a workspace, stage 2 into `result` (= or +=).
void squares(const void* x, int64_t n, DType dtype, double* result, bool accumulate, Stream stream) {
  const int64_t per_block = int64_t(kThreads) * 16;  // ~16 packs per thread before blocks are capped
  const int64_t wanted = (n + per_block - 1) / per_block;
  const int64_t blocks = wanted < kMaxBlocks ? wanted : kMaxBlocks;
  Workspace scratch(size_t(blocks) * sizeof(double), stream);
  double* partial = scratch.as<double>();
  dispatch_floating_cuda(dtype, "sum_of_squares", [&]<class T>() {
    const T* xt = static_cast<const T*>(x);
    launch(partial_squares_kernel<T>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, xt, n, pack_head<T>(n, xt),
           partial);
  });
  launch(total_squares_kernel, dim3(1), dim3(kThreads), 0, stream, partial, blocks, result, accumulate);
}

}  // namespace

double sum_of_squares(const void* x, int64_t n, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[sum_of_squares] expected n >= 0, got ", n);
  if (n == 0) return 0.0;
  HG_CHECK(x != nullptr, "[sum_of_squares] null input for n = ", n);
  Workspace result(sizeof(double), stream);
  squares(x, n, dtype, result.as<double>(), /*accumulate=*/false, stream);
  double total = 0.0;
  HG_CUDA_CHECK(cudaMemcpyAsync(&total, result.as<double>(), sizeof total, cudaMemcpyDeviceToHost, stream));
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  return total;
}

void sum_of_squares_into(const void* x, int64_t n, DType dtype, double* accumulator, Stream stream) {
  HG_CHECK(n >= 0, "[sum_of_squares_into] expected n >= 0, got ", n);
  HG_CHECK(accumulator != nullptr, "[sum_of_squares_into] null accumulator");
  if (n == 0) return;
  HG_CHECK(x != nullptr, "[sum_of_squares_into] null input for n = ", n);
  squares(x, n, dtype, accumulator, /*accumulate=*/true, stream);
}

}  // namespace hg::kernels::cuda
