// Embedding lookup over weight [vocab, dim] and ids [n_ids] (i32 or i64).
//   forward:  y[i, :] = weight[ids[i], :]
//   backward: dweight[v, :] = sum over i with ids[i] == v of dy[i, :], in increasing i, in A =
//             acc_t<T>; rows no id points at are 0 (dweight is written, not accumulated into).
//
// Forward, parallel strategy: a pure copy of bits (templated on the element size). A grid-stride
// loop over (position, 16-byte pack of the row) units when dim fills whole packs and both y and
// weight are 16-byte aligned, over single elements otherwise. An id outside [0, vocab) copies nothing.
//
// Id checking, on the device (no host wait): a one-block index_check_kernel (kernels/cuda/
// device_errors.cu) finds the first bad position and records it in the device's error record; the
// engine raises it as hg::Error -- the CPU backend's message -- at its next host read.
//
// Backward, deterministic without float atomics and without a sort:
//   1. count_ids_kernel: counts[v] = number of positions holding id v (integer atomicAdd: the same
//      counts in any order) in a workspace from the caching allocator (kernels/cuda/workspace.h); an
//      id outside [0, vocab) is skipped (no row is touched for it) and checked as in the forward.
//   2. embedding_backward_kernel: one block of kBackwardThreads threads per (vocab row v, tile of
//      kBackwardThreads columns); thread t owns column tile * kBackwardThreads + t and keeps its sum
//      in a register. A row with counts[v] == 0 writes zeros at once. Otherwise the block scans the
//      ids in chunks of blockDim: every thread tests one id, the warps' __ballot_sync masks go to
//      shared memory, and every thread walks the set bits warp by warp, lane by lane -- that is, the
//      matching positions in increasing i -- adding dy[i, column]. The scan stops as soon as
//      counts[v] positions were found. Each output element is summed by one thread in increasing i
//      (the CPU's order), so the result is the same bits on every run.
//   The scan costs O(distinct ids x n_ids) id reads (from L2); a counting sort of positions would
//   cut that to O(n_ids) should vocabularies and batches grow large enough to matter.
#include <climits>

#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/cuda/workspace.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kBackwardThreads = 128;

template <class E, class I, int W>
__global__ void embedding_forward_kernel(const E* __restrict__ weight, const I* __restrict__ ids, E* __restrict__ y,
                                         int64_t n_ids, int64_t vocab, int64_t dim) {
  // W divides dim; dim > 0 (the host launches nothing for empty rows).
  const int64_t row_units = dim / W;
  const int64_t units = n_ids * row_units;
  for (int64_t u = flat_worker(); u < units; u += flat_workers()) {
    const int64_t i = u / row_units, c = (u % row_units) * W;
    const int64_t id = int64_t(ids[i]);
    if (id < 0 || id >= vocab) continue;  // recorded by the index check
    store_pack<W>(y + i * dim + c, load_pack<W>(weight + id * dim + c));
  }
}

// counts[v] = positions holding id v; an id outside [0, vocab) is skipped (the index check reports it).
template <class I>
__global__ void count_ids_kernel(const I* __restrict__ ids, int* __restrict__ counts, int64_t n_ids, int64_t vocab) {
  for (int64_t i = flat_worker(); i < n_ids; i += flat_workers()) {
    const int64_t id = int64_t(ids[i]);
    if (id >= 0 && id < vocab) atomicAdd(&counts[id], 1);
  }
}

// Index of the lowest set bit of a non-zero mask.
HG_DEVICE int lowest_bit(unsigned mask) {
#if defined(__CUDA_ARCH__)
  return __ffs(int(mask)) - 1;
#else
  return __builtin_ctz(mask);
#endif
}

template <class T, class I>
__global__ void embedding_backward_kernel(const T* __restrict__ dy, const I* __restrict__ ids,
                                          const int* __restrict__ counts, T* __restrict__ dweight, int64_t n_ids,
                                          int64_t dim) {
  using A = acc_t<T>;
  __shared__ unsigned masks[kBackwardThreads / kWarpSize];
  const int64_t v = blockIdx.x;
  const int64_t column = int64_t(blockIdx.y) * kBackwardThreads + threadIdx.x;
  const int lane = int(threadIdx.x) % kWarpSize, warp = int(threadIdx.x) / kWarpSize;
  const int count = counts[v];
  A acc = 0;
  int found = 0;
  for (int64_t base = 0; base < n_ids && found < count; base += kBackwardThreads) {
    const int64_t i = base + threadIdx.x;
    const bool match = i < n_ids && int64_t(ids[i]) == v;
    const unsigned ballot = __ballot_sync(kFullMask, match);
    if (lane == 0) masks[warp] = ballot;
    __syncthreads();
    for (int w = 0; w < kBackwardThreads / kWarpSize; ++w) {
      for (unsigned m = masks[w]; m != 0; m &= m - 1) {
        const int64_t position = base + w * kWarpSize + lowest_bit(m);
        if (column < dim) acc += to_acc(dy[position * dim + column]);
        ++found;
      }
    }
    __syncthreads();  // masks is rewritten by the next chunk
  }
  if (column < dim) dweight[v * dim + column] = from_acc<T>(acc);
}

}  // namespace

void embedding_forward(const void* weight, const void* ids, DType index_dtype, void* y, int64_t n_ids, int64_t vocab,
                       int64_t dim, DType dtype, Stream stream) {
  HG_CHECK(n_ids >= 0 && vocab >= 0 && dim >= 0, "[embedding_forward] n_ids = ", n_ids, ", vocab = ", vocab,
           ", dim = ", dim, ", expected all >= 0");
  HG_CHECK(is_floating(dtype), "[embedding_forward] expected a floating dtype, got ", dtype_name(dtype));
  HG_CHECK(n_ids < INT_MAX, "[embedding_forward] n_ids = ", n_ids, ", expected n_ids < ", INT_MAX);
  if (n_ids == 0) return;
  enqueue_index_check(DeviceErrorOp::embedding_forward, ids, index_dtype, n_ids, vocab, false, 0, stream);
  if (dim == 0) return;
  dispatch_bits_cuda(dtype, "embedding_forward", [&]<class E>() {
    dispatch_index_cuda(index_dtype, "embedding_forward", [&]<class I>() {
      const E* w = static_cast<const E*>(weight);
      const I* id = static_cast<const I*>(ids);
      E* out = static_cast<E*>(y);
      constexpr int N = kPack<E>;
      const bool packed = dim % N == 0 && pack_head<E>(dim, w, out) == 0;
      if (packed) {
        launch(embedding_forward_kernel<E, I, N>, flat_grid(n_ids * (dim / N)), dim3(kFlatThreads), 0, stream, w, id,
               out, n_ids, vocab, dim);
      } else {
        launch(embedding_forward_kernel<E, I, 1>, flat_grid(n_ids * dim), dim3(kFlatThreads), 0, stream, w, id, out,
               n_ids, vocab, dim);
      }
    });
  });
}

void embedding_backward(const void* dy, const void* ids, DType index_dtype, void* dweight, int64_t n_ids, int64_t vocab,
                        int64_t dim, DType dtype, Stream stream) {
  HG_CHECK(n_ids >= 0 && vocab >= 0 && dim >= 0, "[embedding_backward] n_ids = ", n_ids, ", vocab = ", vocab,
           ", dim = ", dim, ", expected all >= 0");
  HG_CHECK(n_ids < INT_MAX, "[embedding_backward] n_ids = ", n_ids, ", expected n_ids < ", INT_MAX);
  HG_CHECK(vocab < INT_MAX, "[embedding_backward] vocab = ", vocab, ", expected vocab < ", INT_MAX);
  if (n_ids == 0 && (vocab == 0 || dim == 0)) return;
  const int64_t tiles = (dim + kBackwardThreads - 1) / kBackwardThreads;
  HG_CHECK(tiles <= 65535, "[embedding_backward] dim = ", dim, " exceeds ", 65535 * kBackwardThreads, " columns");
  enqueue_index_check(DeviceErrorOp::embedding_backward, ids, index_dtype, n_ids, vocab, false, 0, stream);
  // counts[vocab], stream-ordered: handed back right after the launches below are enqueued.
  Workspace workspace(size_t(vocab) * sizeof(int), stream);
  int* counts = workspace.as<int>();
  if (vocab > 0) HG_CUDA_CHECK(cudaMemsetAsync(counts, 0, size_t(vocab) * sizeof(int), stream));
  dispatch_floating_cuda(dtype, "embedding_backward", [&]<class T>() {
    dispatch_index_cuda(index_dtype, "embedding_backward", [&]<class I>() {
      const I* id = static_cast<const I*>(ids);
      launch(count_ids_kernel<I>, flat_grid(n_ids), dim3(kFlatThreads), 0, stream, id, counts, n_ids, vocab);
      if (dim > 0) {
        launch(embedding_backward_kernel<T, I>, dim3(unsigned(vocab), unsigned(tiles)), dim3(kBackwardThreads), 0,
               stream, static_cast<const T*>(dy), id, counts, static_cast<T*>(dweight), n_ids, dim);
      }
    });
  });
}

}  // namespace hg::kernels::cuda
