// Embedding lookup over weight [vocab, dim] and ids [n_ids] (i32 or i64).
//   forward:  y[i, :] = weight[ids[i], :]
//   backward: dweight[v, :] = sum over i with ids[i] == v of dy[i, :], in increasing i, in A =
//             acc_t<T>; rows no id points at are 0 (dweight is written, not accumulated into).
//
// Forward, parallel strategy: a pure copy of bits (templated on the element size). A grid-stride
// loop over (position, 16-byte pack of the row) units when dim fills whole packs and both y and
// weight are 16-byte aligned, over single elements otherwise. An id outside [0, vocab) copies nothing;
// its position is recorded with an integer atomicMin in a device status word, which the host reads
// after the kernel (a stream synchronisation, as the contract states) to throw hg::Error naming the
// first bad position, as the CPU backend does.
//
// Backward, deterministic without float atomics and without a sort:
//   1. count_ids_kernel: counts[v] = number of positions holding id v (integer atomicAdd: the same
//      counts in any order); an id outside [0, vocab) is flagged as in the forward pass, and the host
//      throws naming the first such position after the kernels (a stream synchronisation).
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

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/workspace.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kBackwardThreads = 128;

template <class E, class I, int W>
__global__ void embedding_forward_kernel(const E* __restrict__ weight, const I* __restrict__ ids, E* __restrict__ y,
                                         int64_t n_ids, int64_t vocab, int64_t dim, int* __restrict__ status) {
  // W divides dim. An empty row (dim == 0) still gets one unit, so its id is checked.
  const int64_t row_units = dim / W > 0 ? dim / W : 1;
  const int64_t units = n_ids * row_units;
  for (int64_t u = flat_worker(); u < units; u += flat_workers()) {
    const int64_t i = u / row_units, c = (u % row_units) * W;
    const int64_t id = int64_t(ids[i]);
    if (id < 0 || id >= vocab) {
      if (c == 0) atomicMin(status, int(i));
      continue;
    }
    if (c < dim) store_pack<W>(y + i * dim + c, load_pack<W>(weight + id * dim + c));
  }
}

// counts[v] = positions holding id v; an id outside [0, vocab) is flagged in *status instead.
template <class I>
__global__ void count_ids_kernel(const I* __restrict__ ids, int* __restrict__ counts, int64_t n_ids, int64_t vocab,
                                 int* __restrict__ status) {
  for (int64_t i = flat_worker(); i < n_ids; i += flat_workers()) {
    const int64_t id = int64_t(ids[i]);
    if (id >= 0 && id < vocab) {
      atomicAdd(&counts[id], 1);
    } else {
      atomicMin(status, int(i));
    }
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

// Reads the status word (the smallest position with a bad id, INT_MAX when none) once the stream's
// work is done, and throws hg::Error naming that position and its id, as the CPU backend does.
void check_ids_status(const char* op, const int* status, const void* ids, DType index_dtype, int64_t vocab,
                      cudaStream_t stream) {
  int host_status = INT_MAX;
  HG_CUDA_CHECK(cudaMemcpyAsync(&host_status, status, sizeof host_status, cudaMemcpyDeviceToHost, stream));
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host_status == INT_MAX) return;
  const int64_t position = host_status;
  int64_t bad_id = 0;
  dispatch_index_cuda(index_dtype, op, [&]<class I>() {
    I value{};
    HG_CUDA_CHECK(cudaMemcpy(&value, static_cast<const I*>(ids) + position, sizeof(I), cudaMemcpyDeviceToHost));
    bad_id = int64_t(value);
  });
  HG_FAIL("[", op, "] id ", bad_id, " at position ", position, " is out of range, expected 0 <= id < ", vocab);
}

}  // namespace

void embedding_forward(const void* weight, const void* ids, DType index_dtype, void* y, int64_t n_ids, int64_t vocab,
                       int64_t dim, DType dtype, Stream stream) {
  HG_CHECK(n_ids >= 0 && vocab >= 0 && dim >= 0, "[embedding_forward] n_ids = ", n_ids, ", vocab = ", vocab,
           ", dim = ", dim, ", expected all >= 0");
  HG_CHECK(is_floating(dtype), "[embedding_forward] expected a floating dtype, got ", dtype_name(dtype));
  HG_CHECK(n_ids < INT_MAX, "[embedding_forward] n_ids = ", n_ids, ", expected n_ids < ", INT_MAX);
  if (n_ids == 0) return;
  Workspace scratch(sizeof(int), stream);
  int* status = scratch.as<int>();
  int host_status = INT_MAX;
  HG_CUDA_CHECK(cudaMemcpyAsync(status, &host_status, sizeof host_status, cudaMemcpyHostToDevice, stream));
  dispatch_bits_cuda(dtype, "embedding_forward", [&]<class E>() {
    dispatch_index_cuda(index_dtype, "embedding_forward", [&]<class I>() {
      const E* w = static_cast<const E*>(weight);
      const I* id = static_cast<const I*>(ids);
      E* out = static_cast<E*>(y);
      constexpr int N = kPack<E>;
      const bool packed = dim % N == 0 && pack_head<E>(dim, w, out) == 0;
      if (packed && dim > 0) {
        launch(embedding_forward_kernel<E, I, N>, flat_grid(n_ids * (dim / N)), dim3(kFlatThreads), 0, stream, w, id,
               out, n_ids, vocab, dim, status);
      } else {
        launch(embedding_forward_kernel<E, I, 1>, flat_grid(n_ids * (dim > 0 ? dim : 1)), dim3(kFlatThreads), 0, stream,
               w, id, out, n_ids, vocab, dim, status);
      }
    });
  });
  check_ids_status("embedding_forward", status, ids, index_dtype, vocab, stream);
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
  // The status word, then counts[vocab].
  Workspace scratch(size_t(vocab + 1) * sizeof(int), stream);
  int* status = scratch.as<int>();
  int* counts = status + 1;
  const int no_bad_position = INT_MAX;
  HG_CUDA_CHECK(cudaMemcpyAsync(status, &no_bad_position, sizeof(int), cudaMemcpyHostToDevice, stream));
  if (vocab > 0) HG_CUDA_CHECK(cudaMemsetAsync(counts, 0, size_t(vocab) * sizeof(int), stream));
  dispatch_floating_cuda(dtype, "embedding_backward", [&]<class T>() {
    dispatch_index_cuda(index_dtype, "embedding_backward", [&]<class I>() {
      const I* id = static_cast<const I*>(ids);
      launch(count_ids_kernel<I>, flat_grid(n_ids), dim3(kFlatThreads), 0, stream, id, counts, n_ids, vocab, status);
      if (dim > 0) {
        launch(embedding_backward_kernel<T, I>, dim3(unsigned(vocab), unsigned(tiles)), dim3(kBackwardThreads), 0,
               stream, static_cast<const T*>(dy), id, counts, static_cast<T*>(dweight), n_ids, dim);
      }
    });
  });
  check_ids_status("embedding_backward", status, ids, index_dtype, vocab, stream);
}

}  // namespace hg::kernels::cuda
