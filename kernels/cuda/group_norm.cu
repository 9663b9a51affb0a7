// GroupNorm over contiguous [N, C, S] in G groups, forward and backward (the math: kernels/kernels.h,
// group_norm_forward / group_norm_backward; A = acc_t<T>, fp32 for half types).
//
// Parallel strategy: one block of kThreads threads per (n, group); a group's (C / G) S elements are
// contiguous, so thread t reads elements t, t + blockDim, ... (coalesced).
//   forward: three passes over the group (the last two mostly from L1/L2): the sum -> mean, the sum of
//     squared deviations -> rstd (two passes, as the CPU), then y = (x - mean) rstd w[c] + b[c].
//   backward: per channel of the group, the block reduces sum dy and sum dy * xhat over the channel's S
//     elements; thread 0 stores the pair as the (n, c) partial of dbias / dweight, and every thread adds
//     w[c] times them into the group's sums of g and g * xhat (each thread holds the same reduced
//     values, so they agree). A last pass writes dx. Then group_norm_param_grads_kernel gives each
//     channel one thread that adds its N partials in order. Every reduction has a fixed shape: the same
//     bits on every run, no float atomics.
// A channel reduction per channel costs two block barriers; for small S (S < kThreads) threads idle in
// those reductions -- GroupNorm's usual inputs (feature maps of 64 elements and more) keep them busy.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/workspace.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
    group_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias,
                              T* __restrict__ y, acc_t<T>* __restrict__ mean, acc_t<T>* __restrict__ rstd,
                              int64_t channels, int64_t spatial, int64_t groups, acc_t<T> eps) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const int64_t ng = blockIdx.x, per_group = channels / groups, count = per_group * spatial;
  const int64_t first_channel = (ng % groups) * per_group;
  const T* xg = x + ng * count;
  A sum = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += to_acc(xg[i]);
  const A mu = block_reduce(sum, SumOp{}, A(0), shared) / A(count);
  A squares = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const A d = to_acc(xg[i]) - mu;
    squares += d * d;
  }
  const A inv = A(1) / sqrt_acc(block_reduce(squares, SumOp{}, A(0), shared) / A(count) + eps);
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[ng] = mu;
    if (rstd != nullptr) rstd[ng] = inv;
  }
  T* yg = y + ng * count;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t c = first_channel + i / spatial;
    const A w = weight != nullptr ? to_acc(weight[c]) : A(1), b = bias != nullptr ? to_acc(bias[c]) : A(0);
    yg[i] = from_acc<T>((to_acc(xg[i]) - mu) * inv * w + b);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    group_norm_backward_kernel(const T* __restrict__ x, const T* __restrict__ weight, const acc_t<T>* __restrict__ mean,
                               const acc_t<T>* __restrict__ rstd, const T* __restrict__ dy, T* __restrict__ dx,
                               acc_t<T>* __restrict__ partial, int64_t batch, int64_t channels, int64_t spatial,
                               int64_t groups) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const int64_t ng = blockIdx.x, n = ng / groups, per_group = channels / groups, count = per_group * spatial;
  const int64_t first_channel = (ng % groups) * per_group;
  const T* xg = x + ng * count;
  const T* dyg = dy + ng * count;
  const A mu = mean[ng], inv = rstd[ng];
  A sum_g = 0, sum_gx = 0;
  for (int64_t k = 0; k < per_group; ++k) {
    A sdy = 0, sdyx = 0;
    for (int64_t s = threadIdx.x; s < spatial; s += blockDim.x) {
      const int64_t i = k * spatial + s;
      const A g = to_acc(dyg[i]);
      sdy += g;
      sdyx += g * (to_acc(xg[i]) - mu) * inv;
    }
    sdy = block_reduce(sdy, SumOp{}, A(0), shared);
    sdyx = block_reduce(sdyx, SumOp{}, A(0), shared);
    const int64_t c = first_channel + k;
    if (partial != nullptr && threadIdx.x == 0) {  // two planes [N, C]: the dweight and dbias partials
      partial[n * channels + c] = sdyx;
      partial[(batch + n) * channels + c] = sdy;
    }
    const A w = weight != nullptr ? to_acc(weight[c]) : A(1);
    sum_g += w * sdy;
    sum_gx += w * sdyx;
  }
  const A mean_g = sum_g / A(count), mean_gx = sum_gx / A(count);
  T* dxg = dx + ng * count;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t c = first_channel + i / spatial;
    const A w = weight != nullptr ? to_acc(weight[c]) : A(1);
    const A xhat = (to_acc(xg[i]) - mu) * inv;
    dxg[i] = from_acc<T>(inv * (to_acc(dyg[i]) * w - mean_g - xhat * mean_gx));
  }
}

// dweight[c] = sum over n of the dweight plane's (n, c), dbias of the dbias plane's, in increasing n.
template <class T>
__global__ void group_norm_param_grads_kernel(const acc_t<T>* __restrict__ partial, T* __restrict__ dweight,
                                              T* __restrict__ dbias, int64_t batch, int64_t channels) {
  using A = acc_t<T>;
  for (int64_t c = flat_worker(); c < channels; c += flat_workers()) {
    A dw = 0, db = 0;
    for (int64_t n = 0; n < batch; ++n) {
      dw += partial[n * channels + c];
      db += partial[(batch + n) * channels + c];
    }
    if (dweight != nullptr) dweight[c] = from_acc<T>(dw);
    if (dbias != nullptr) dbias[c] = from_acc<T>(db);
  }
}

void check_groups(const char* op, int64_t batch, int64_t channels, int64_t spatial, int64_t groups) {
  HG_CHECK(batch >= 0 && channels >= 0 && spatial >= 0, "[", op, "] batch = ", batch, ", channels = ", channels,
           ", spatial = ", spatial, ", expected all >= 0");
  HG_CHECK(groups > 0 && channels % groups == 0, "[", op, "] ", channels, " channels in ", groups,
           " groups; expected groups > 0 dividing the channels");
  HG_CHECK(batch * groups < (int64_t(1) << 31), "[", op, "] ", batch * groups, " groups exceed the grid");
}

}  // namespace

void group_norm_forward(const void* x, const void* weight, const void* bias, void* y, void* mean, void* rstd,
                        int64_t batch, int64_t channels, int64_t spatial, int64_t groups, double eps, DType dtype,
                        Stream stream) {
  check_groups("group_norm_forward", batch, channels, spatial, groups);
  if (batch == 0 || channels == 0) return;
  dispatch_floating_cuda(dtype, "group_norm_forward", [&]<class T>() {
    using A = acc_t<T>;
    launch(group_norm_forward_kernel<T>, dim3(unsigned(batch * groups)), dim3(kThreads), 0, stream,
           static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<T*>(y),
           static_cast<A*>(mean), static_cast<A*>(rstd), channels, spatial, groups, A(eps));
  });
}

void group_norm_backward(const void* x, const void* weight, const void* mean, const void* rstd, const void* dy,
                         void* dx, void* dweight, void* dbias, int64_t batch, int64_t channels, int64_t spatial,
                         int64_t groups, DType dtype, Stream stream) {
  check_groups("group_norm_backward", batch, channels, spatial, groups);
  if (channels == 0) return;
  const bool want_params = dweight != nullptr || dbias != nullptr;
  dispatch_floating_cuda(dtype, "group_norm_backward", [&]<class T>() {
    using A = acc_t<T>;
    if (batch == 0) {  // the parameter gradients are sums over nothing
      if (dweight != nullptr) HG_CUDA_CHECK(cudaMemsetAsync(dweight, 0, size_t(channels) * sizeof(T), stream));
      if (dbias != nullptr) HG_CUDA_CHECK(cudaMemsetAsync(dbias, 0, size_t(channels) * sizeof(T), stream));
      return;
    }
    Workspace scratch(want_params ? size_t(2 * batch * channels) * sizeof(A) : 0, stream);
    launch(group_norm_backward_kernel<T>, dim3(unsigned(batch * groups)), dim3(kThreads), 0, stream,
           static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const A*>(mean),
           static_cast<const A*>(rstd), static_cast<const T*>(dy), static_cast<T*>(dx),
           want_params ? scratch.as<A>() : nullptr, batch, channels, spatial, groups);
    if (want_params) {
      launch(group_norm_param_grads_kernel<T>, flat_grid(channels), dim3(kFlatThreads), 0, stream,
             scratch.as<const A>(), static_cast<T*>(dweight), static_cast<T*>(dbias), batch, channels);
    }
  });
}

}  // namespace hg::kernels::cuda
