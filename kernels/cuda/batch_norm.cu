// BatchNorm over contiguous [N, C, S], forward (training and eval) and backward (the math:
// kernels/kernels.h, batch_norm_forward / batch_norm_backward; A = acc_t<T>, fp32 for half types).
//
// Parallel strategy, two shapes:
//   - S > 1 (images): one block of kThreads threads per channel c. The channel's N S elements are N
//     runs of S contiguous elements; thread t takes flat positions t, t + blockDim, ... of the channel
//     (position p is element p % S of run p / S), so a warp reads 32 consecutive elements of a run
//     (coalesced while S >= 32). Forward: the sum -> mean, the sum of squared deviations -> var and
//     rstd (two passes, as the CPU; training), thread 0 writes save_mean / save_rstd and updates the
//     running statistics, then a pass writes y. Backward: the block reduces sum dy and sum dy * xhat,
//     thread 0 writes dweight / dbias, then a pass writes dx.
//   - S == 1 ([N, C], BatchNorm1d): one block per tile of 32 channels, 8 warps; warp g takes rows g,
//     g + 8, ... and its lane l channel l of the tile, so every row's loads and stores coalesce; the 8
//     partial sums of a channel are added in order through shared memory (column_sum). Each pass
//     walks only the tile's columns, which stay in L2 between the passes while the tiles in flight fit.
// Each channel's sums are one block's fixed-shape reduction or a fixed partition of rows added in order:
// the same bits on every run, no float atomics. With few channels and large N S (a ResNet's first
// layers) few blocks run; splitting a channel over several blocks would need a second reduction stage.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTileChannels = kWarpSize, kRowGroups = 8;  // S == 1: a block of 32 channels x 8 row groups

// The sum over the block's kRowGroups row groups of each channel's partial v, in group order (every
// thread of the channel gets it). Starts and ends with a barrier-safe pattern: partial may be reused.
template <class A>
HG_DEVICE A column_sum(A v, A (*partial)[kTileChannels], int group, int lane) {
  partial[group][lane] = v;
  __syncthreads();
  A sum = 0;
  for (int g = 0; g < kRowGroups; ++g) sum += partial[g][lane];
  __syncthreads();
  return sum;
}

template <class A>
HG_DEVICE void update_running(A* running_mean, A* running_var, int64_t c, A mean, A squares, int64_t count,
                              A momentum) {
  if (running_mean != nullptr) running_mean[c] = (A(1) - momentum) * running_mean[c] + momentum * mean;
  if (running_var != nullptr) running_var[c] = (A(1) - momentum) * running_var[c] + momentum * (squares / A(count - 1));
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    batch_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                              acc_t<T>* __restrict__ running_mean, acc_t<T>* __restrict__ running_var,
                              T* __restrict__ y, acc_t<T>* __restrict__ save_mean, acc_t<T>* __restrict__ save_rstd,
                              int64_t batch, int64_t channels, int64_t spatial, bool training, acc_t<T> momentum,
                              acc_t<T> eps) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const int64_t c = blockIdx.x, count = batch * spatial;
  auto at = [&](int64_t p) { return (p / spatial * channels + c) * spatial + p % spatial; };
  A mean = 0, inv = 0;
  if (training) {
    A sum = 0;
    for (int64_t p = threadIdx.x; p < count; p += blockDim.x) sum += to_acc(x[at(p)]);
    mean = block_reduce(sum, SumOp{}, A(0), shared) / A(count);
    A squares = 0;
    for (int64_t p = threadIdx.x; p < count; p += blockDim.x) {
      const A d = to_acc(x[at(p)]) - mean;
      squares += d * d;
    }
    squares = block_reduce(squares, SumOp{}, A(0), shared);
    inv = A(1) / sqrt_acc(squares / A(count) + eps);
    if (threadIdx.x == 0) update_running(running_mean, running_var, c, mean, squares, count, momentum);
  } else {
    mean = running_mean[c];
    inv = A(1) / sqrt_acc(running_var[c] + eps);
  }
  if (threadIdx.x == 0) {
    save_mean[c] = mean;
    save_rstd[c] = inv;
  }
  const A w = weight != nullptr ? to_acc(weight[c]) : A(1), b = bias != nullptr ? to_acc(bias[c]) : A(0);
  for (int64_t p = threadIdx.x; p < count; p += blockDim.x) {
    const int64_t i = at(p);
    y[i] = from_acc<T>((to_acc(x[i]) - mean) * inv * w + b);
  }
}

// S == 1: a block owns a tile of kTileChannels channels of x [N, C]; its warp g sums rows g, g + 8, ...
// (lane = channel: a warp reads 32 neighbouring channels of one row, coalesced), and column_sum adds
// the kRowGroups partials of a channel in order.
template <class T>
__global__ void __launch_bounds__(kTileChannels* kRowGroups)
    batch_norm_forward_columns_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                                      acc_t<T>* __restrict__ running_mean, acc_t<T>* __restrict__ running_var,
                                      T* __restrict__ y, acc_t<T>* __restrict__ save_mean,
                                      acc_t<T>* __restrict__ save_rstd, int64_t batch, int64_t channels, bool training,
                                      acc_t<T> momentum, acc_t<T> eps) {
  using A = acc_t<T>;
  __shared__ A partial[kRowGroups][kTileChannels];
  const int lane = int(threadIdx.x) % kTileChannels, group = int(threadIdx.x) / kTileChannels;
  const int64_t c = int64_t(blockIdx.x) * kTileChannels + lane;
  const bool active = c < channels;  // inactive lanes still take part in the barriers
  A mean = 0, inv = 0;
  if (training) {
    A sum = 0;
    if (active)
      for (int64_t n = group; n < batch; n += kRowGroups) sum += to_acc(x[n * channels + c]);
    mean = column_sum(sum, partial, group, lane) / A(batch);
    A squares = 0;
    if (active)
      for (int64_t n = group; n < batch; n += kRowGroups) {
        const A d = to_acc(x[n * channels + c]) - mean;
        squares += d * d;
      }
    squares = column_sum(squares, partial, group, lane);
    inv = A(1) / sqrt_acc(squares / A(batch) + eps);
    if (active && group == 0) update_running(running_mean, running_var, c, mean, squares, batch, momentum);
  } else if (active) {
    mean = running_mean[c];
    inv = A(1) / sqrt_acc(running_var[c] + eps);
  }
  if (!active) return;  // no barrier follows
  if (group == 0) {
    save_mean[c] = mean;
    save_rstd[c] = inv;
  }
  const A w = weight != nullptr ? to_acc(weight[c]) : A(1), b = bias != nullptr ? to_acc(bias[c]) : A(0);
  for (int64_t n = group; n < batch; n += kRowGroups)
    y[n * channels + c] = from_acc<T>((to_acc(x[n * channels + c]) - mean) * inv * w + b);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    batch_norm_backward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                               const acc_t<T>* __restrict__ save_mean, const acc_t<T>* __restrict__ save_rstd,
                               const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ dweight,
                               T* __restrict__ dbias, int64_t batch, int64_t channels, int64_t spatial, bool training) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const int64_t c = blockIdx.x, count = batch * spatial;
  auto at = [&](int64_t p) { return (p / spatial * channels + c) * spatial + p % spatial; };
  const A mean = save_mean[c], inv = save_rstd[c];
  A sdy = 0, sdyx = 0;
  for (int64_t p = threadIdx.x; p < count; p += blockDim.x) {
    const int64_t i = at(p);
    const A g = to_acc(dy[i]);
    sdy += g;
    sdyx += g * (to_acc(x[i]) - mean) * inv;
  }
  sdy = block_reduce(sdy, SumOp{}, A(0), shared);
  sdyx = block_reduce(sdyx, SumOp{}, A(0), shared);
  if (threadIdx.x == 0) {
    if (dweight != nullptr) dweight[c] = from_acc<T>(sdyx);
    if (dbias != nullptr) dbias[c] = from_acc<T>(sdy);
  }
  if (dx == nullptr) return;
  const A w = weight != nullptr ? to_acc(weight[c]) : A(1);
  const A mean_g = training ? w * sdy / A(count) : A(0), mean_gx = training ? w * sdyx / A(count) : A(0);
  for (int64_t p = threadIdx.x; p < count; p += blockDim.x) {
    const int64_t i = at(p);
    dx[i] = from_acc<T>(inv * (to_acc(dy[i]) * w - mean_g - (to_acc(x[i]) - mean) * inv * mean_gx));
  }
}

template <class T>
__global__ void __launch_bounds__(kTileChannels* kRowGroups)
    batch_norm_backward_columns_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                       const acc_t<T>* __restrict__ save_mean, const acc_t<T>* __restrict__ save_rstd,
                                       const T* __restrict__ dy, T* __restrict__ dx, T* __restrict__ dweight,
                                       T* __restrict__ dbias, int64_t batch, int64_t channels, bool training) {
  using A = acc_t<T>;
  __shared__ A partial[kRowGroups][kTileChannels];
  const int lane = int(threadIdx.x) % kTileChannels, group = int(threadIdx.x) / kTileChannels;
  const int64_t c = int64_t(blockIdx.x) * kTileChannels + lane;
  const bool active = c < channels;
  const A mean = active ? save_mean[c] : A(0), inv = active ? save_rstd[c] : A(0);
  A sdy = 0, sdyx = 0;
  if (active)
    for (int64_t n = group; n < batch; n += kRowGroups) {
      const A g = to_acc(dy[n * channels + c]);
      sdy += g;
      sdyx += g * (to_acc(x[n * channels + c]) - mean) * inv;
    }
  sdy = column_sum(sdy, partial, group, lane);
  sdyx = column_sum(sdyx, partial, group, lane);
  if (!active) return;  // no barrier follows
  if (group == 0) {
    if (dweight != nullptr) dweight[c] = from_acc<T>(sdyx);
    if (dbias != nullptr) dbias[c] = from_acc<T>(sdy);
  }
  if (dx == nullptr) return;
  const A w = weight != nullptr ? to_acc(weight[c]) : A(1);
  const A mean_g = training ? w * sdy / A(batch) : A(0), mean_gx = training ? w * sdyx / A(batch) : A(0);
  for (int64_t n = group; n < batch; n += kRowGroups) {
    const int64_t i = n * channels + c;
    dx[i] = from_acc<T>(inv * (to_acc(dy[i]) * w - mean_g - (to_acc(x[i]) - mean) * inv * mean_gx));
  }
}

void check_sizes(const char* op, int64_t batch, int64_t channels, int64_t spatial) {
  HG_CHECK(batch >= 0 && channels >= 0 && spatial >= 0, "[", op, "] batch = ", batch, ", channels = ", channels,
           ", spatial = ", spatial, ", expected all >= 0");
  HG_CHECK(channels < (int64_t(1) << 31), "[", op, "] ", channels, " channels exceed the grid");
}

}  // namespace

void batch_norm_forward(const void* x, const void* weight, const void* bias, void* running_mean, void* running_var,
                        void* y, void* save_mean, void* save_rstd, int64_t batch, int64_t channels, int64_t spatial,
                        bool training, double momentum, double eps, DType dtype, Stream stream) {
  check_sizes("batch_norm_forward", batch, channels, spatial);
  HG_CHECK(!training || batch * spatial >= 2, "[batch_norm_forward] ", batch * spatial,
           " value(s) per channel in training; expected at least 2 (the batch statistics need them)");
  HG_CHECK(training || (running_mean != nullptr && running_var != nullptr),
           "[batch_norm_forward] eval mode needs running_mean and running_var");
  if (channels == 0 || batch * spatial == 0) return;
  dispatch_floating_cuda(dtype, "batch_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    if (spatial == 1) {
      launch(batch_norm_forward_columns_kernel<T>, dim3(unsigned((channels + kTileChannels - 1) / kTileChannels)),
             dim3(kTileChannels * kRowGroups), 0, stream, static_cast<const T*>(x), static_cast<const T*>(weight),
             static_cast<const T*>(bias), static_cast<A*>(running_mean), static_cast<A*>(running_var),
             static_cast<T*>(y), static_cast<A*>(save_mean), static_cast<A*>(save_rstd), batch, channels, training,
             A(momentum), A(eps));
    } else {
      launch(batch_norm_forward_kernel<T>, dim3(unsigned(channels)), dim3(kThreads), 0, stream,
             static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias),
             static_cast<A*>(running_mean), static_cast<A*>(running_var), static_cast<T*>(y),
             static_cast<A*>(save_mean), static_cast<A*>(save_rstd), batch, channels, spatial, training, A(momentum),
             A(eps));
    }
  });
}

void batch_norm_backward(const void* x, const void* weight, const void* save_mean, const void* save_rstd,
                         const void* dy, void* dx, void* dweight, void* dbias, int64_t batch, int64_t channels,
                         int64_t spatial, bool training, DType dtype, Stream stream) {
  check_sizes("batch_norm_backward", batch, channels, spatial);
  if (channels == 0) return;
  dispatch_floating_cuda(dtype, "batch_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    if (batch * spatial == 0) {  // sums over nothing
      if (dweight != nullptr) HG_CUDA_CHECK(cudaMemsetAsync(dweight, 0, size_t(channels) * sizeof(T), stream));
      if (dbias != nullptr) HG_CUDA_CHECK(cudaMemsetAsync(dbias, 0, size_t(channels) * sizeof(T), stream));
      return;
    }
    if (spatial == 1) {
      launch(batch_norm_backward_columns_kernel<T>, dim3(unsigned((channels + kTileChannels - 1) / kTileChannels)),
             dim3(kTileChannels * kRowGroups), 0, stream, static_cast<const T*>(x), static_cast<const T*>(weight),
             static_cast<const A*>(save_mean), static_cast<const A*>(save_rstd), static_cast<const T*>(dy),
             static_cast<T*>(dx), static_cast<T*>(dweight), static_cast<T*>(dbias), batch, channels, training);
    } else {
      launch(batch_norm_backward_kernel<T>, dim3(unsigned(channels)), dim3(kThreads), 0, stream,
             static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const A*>(save_mean),
             static_cast<const A*>(save_rstd), static_cast<const T*>(dy), static_cast<T*>(dx), static_cast<T*>(dweight),
             static_cast<T*>(dbias), batch, channels, spatial, training);
    }
  });
}

}  // namespace hg::kernels::cuda
