// topk over the rows of contiguous x [rows, n] (the math and the order: kernels/kernels.h,
// kernels/topk_key.h), by bitonic sorting of (key, index) pairs: the order is total (ties by index),
// so every path gives the same output, which is the CPU's.
//
// Parallel strategy, two shapes:
//   - n <= kSharedCapacity (2048): one block of kThreads threads per row (grid-stride over the rows).
//     The row's keys and indices go to shared memory, padded to P = the next power of two with keys
//     that sort last; the bitonic network runs in place, log2(P) (log2(P) + 1) / 2 steps. In a step each
//     thread owns elements e = t, t + kThreads, ...: it reads e and its partner e ^ stride (consecutive
//     addresses across a warp and a permutation of them: no bank conflicts), keeps the one e's place
//     takes, and writes it after a barrier. The first k are written out.
//   - longer rows: the same network over [rows, P] pairs in `workspace` (global memory), one launch
//     per step with one thread per compare-exchange (the lower element of the pair), then the first k
//     are written out. Correct for any size; log2(P)^2 / 2 passes over the workspace, so this path is
//     for the occasional long row, not for speed.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/topk_key.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSharedCapacity = 2048;
constexpr int kPerThread = int(kSharedCapacity / kThreads);
constexpr uint64_t kPaddingKey = 0;  // with an index >= n: after every element of the row

int64_t padded_length(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Where element e goes in one bitonic step of (size, stride): the pair (e, e ^ stride) is ordered
// forward when (lower & size) == 0, backward otherwise; e keeps the first of the two if it is the lower.
HG_DEVICE bool keeps_first(int64_t e, int64_t stride, int64_t size) {
  const int64_t lower = e & ~stride;
  const bool forward = (lower & size) == 0;
  return (e == lower) == forward;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    topk_shared_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices, int64_t rows,
                       int64_t n, int64_t k, int64_t p, bool largest) {
  __shared__ uint64_t keys[kSharedCapacity];
  __shared__ int32_t order[kSharedCapacity];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * n;
    for (int64_t e = threadIdx.x; e < p; e += kThreads) {
      keys[e] = e < n ? topk_key(double(to_acc(in[e])), largest) : kPaddingKey;
      order[e] = int32_t(e);
    }
    __syncthreads();
    for (int64_t size = 2; size <= p; size <<= 1) {
      for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
        uint64_t new_key[kPerThread];
        int32_t new_index[kPerThread];
        for (int slot = 0; slot < kPerThread; ++slot) {
          const int64_t e = threadIdx.x + int64_t(slot) * kThreads;
          if (e >= p) break;
          const int64_t partner = e ^ stride;
          const uint64_t ke = keys[e], kp = keys[partner];
          const int32_t ie = order[e], ip = order[partner];
          const bool e_first = topk_before(ke, ie, kp, ip);
          const bool take_e = e_first == keeps_first(e, stride, size);
          new_key[slot] = take_e ? ke : kp;
          new_index[slot] = take_e ? ie : ip;
        }
        __syncthreads();
        for (int slot = 0; slot < kPerThread; ++slot) {
          const int64_t e = threadIdx.x + int64_t(slot) * kThreads;
          if (e >= p) break;
          keys[e] = new_key[slot];
          order[e] = new_index[slot];
        }
        __syncthreads();
      }
    }
    for (int64_t j = threadIdx.x; j < k; j += kThreads) {
      const int32_t i = order[j];
      values[r * k + j] = in[i];
      indices[r * k + j] = i;
    }
    __syncthreads();  // the next row overwrites keys and order
  }
}

template <class T>
__global__ void topk_init_kernel(const T* __restrict__ x, uint64_t* __restrict__ keys, int64_t* __restrict__ order,
                                 int64_t rows, int64_t n, int64_t p, bool largest) {
  for (int64_t e = flat_worker(); e < rows * p; e += flat_workers()) {
    const int64_t r = e / p, i = e % p;
    keys[e] = i < n ? topk_key(double(to_acc(x[r * n + i])), largest) : kPaddingKey;
    order[e] = i;
  }
}

__global__ void topk_step_kernel(uint64_t* __restrict__ keys, int64_t* __restrict__ order, int64_t rows, int64_t p,
                                 int64_t size, int64_t stride) {
  const int64_t half = p / 2;
  for (int64_t c = flat_worker(); c < rows * half; c += flat_workers()) {
    const int64_t r = c / half, t = c % half;
    const int64_t lower = 2 * t - (t & (stride - 1)), upper = lower + stride;
    uint64_t* row_keys = keys + r * p;
    int64_t* row_order = order + r * p;
    const bool forward = (lower & size) == 0;
    const uint64_t kl = row_keys[lower], ku = row_keys[upper];
    const int64_t il = row_order[lower], iu = row_order[upper];
    if (topk_before(kl, il, ku, iu) != forward) {
      row_keys[lower] = ku, row_keys[upper] = kl;
      row_order[lower] = iu, row_order[upper] = il;
    }
  }
}

template <class T>
__global__ void topk_gather_kernel(const T* __restrict__ x, const int64_t* __restrict__ order, T* __restrict__ values,
                                   int64_t* __restrict__ indices, int64_t rows, int64_t n, int64_t k, int64_t p) {
  for (int64_t e = flat_worker(); e < rows * k; e += flat_workers()) {
    const int64_t r = e / k, j = e % k;
    const int64_t i = order[r * p + j];
    values[e] = x[r * n + i];
    indices[e] = i;
  }
}

}  // namespace

size_t topk_workspace_bytes(int64_t rows, int64_t n, Stream) {
  if (n <= kSharedCapacity) return 0;
  return size_t(rows * padded_length(n)) * (sizeof(uint64_t) + sizeof(int64_t));
}

void topk(const void* x, void* values, int64_t* indices, int64_t rows, int64_t n, int64_t k, bool largest,
          void* workspace, size_t workspace_bytes, DType dtype, Stream stream) {
  HG_CHECK(rows >= 0 && n >= 0 && k >= 0 && k <= n, "[topk] rows = ", rows, ", n = ", n, ", k = ", k,
           ", expected rows >= 0 and 0 <= k <= n");
  if (rows * k == 0) return;
  const int64_t p = padded_length(n);
  dispatch_floating_cuda(dtype, "topk", [&]<class T>() {
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(values);
    if (n <= kSharedCapacity) {
      const int64_t blocks = rows < 65535 ? rows : 65535;
      launch(topk_shared_kernel<T>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, in, out, indices, rows, n, k, p,
             largest);
      return;
    }
    const size_t needed = topk_workspace_bytes(rows, n, stream);
    HG_CHECK(workspace != nullptr && workspace_bytes >= needed, "[topk] rows of ", n, " need a workspace of ", needed,
             " bytes, got ", workspace_bytes);
    auto* keys = static_cast<uint64_t*>(workspace);
    auto* order = reinterpret_cast<int64_t*>(keys + rows * p);
    launch(topk_init_kernel<T>, flat_grid(rows * p), dim3(kFlatThreads), 0, stream, in, keys, order, rows, n, p,
           largest);
    for (int64_t size = 2; size <= p; size <<= 1)
      for (int64_t stride = size >> 1; stride > 0; stride >>= 1)
        launch(topk_step_kernel, flat_grid(rows * p / 2), dim3(kFlatThreads), 0, stream, keys, order, rows, p, size,
               stride);
    launch(topk_gather_kernel<T>, flat_grid(rows * k), dim3(kFlatThreads), 0, stream, in, order, out, indices, rows, n,
           k, p);
  });
}

}  // namespace hg::kernels::cuda
