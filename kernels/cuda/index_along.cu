// index_gather and index_scatter_add: gather / index_select and scatter_add / index_add along one
// dimension of [outer, size, inner] (the math and the index layouts: kernels/kernels.h).
//
// Index checking, on the device (no host wait): a one-block index_check_kernel (kernels/cuda/
// device_errors.cu) finds the first bad flat position of the index and records it; the engine raises
// it as hg::Error -- the CPU backend's message -- at its next host read. The kernels below skip an
// out-of-range index (they never read or write outside their tensors); the outputs are then garbage.
//
// index_gather, parallel strategy: a pure copy of bits (templated on the element size), one thread
// per output element in a grid-stride loop in y's order, so the writes coalesce; the reads of x
// coalesce too when neighbouring k read the same row (always per slice, and per element whenever
// the index is constant along k).
//
// index_scatter_add, parallel strategy, deterministic without float atomics: one thread per OUTPUT
// element (o, j, k), in a grid-stride loop in y's order. The thread starts from base[o, j, k] and walks
// i = 0, 1, ..., m - 1, adding alpha * src[o, i, k] where idx(o, i, k) == j -- the CPU's order and
// rounding, each output written once by one thread (no zero-fill pass, no race). A warp's 32
// neighbouring k read neighbouring index and src elements (coalesced); per slice the index read is
// one broadcast address per warp. The cost is O(m) reads per output element, O(outer n m inner) in
// all: cheap for the backward of a gather that picks few elements (m small), and for index_add of
// modest m; a counting sort of the positions by target (as embedding_backward's count pass) would cut
// it to O(outer m inner) should large m along large n matter.
#include "kernels/cuda/device_errors.h"
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <class E, class I>
__global__ void index_gather_kernel(const E* __restrict__ x, const I* __restrict__ index, E* __restrict__ y,
                                    int64_t outer, int64_t n, int64_t m, int64_t inner, bool per_element) {
  const int64_t total = outer * m * inner;
  for (int64_t t = flat_worker(); t < total; t += flat_workers()) {
    const int64_t k = t % inner, i = (t / inner) % m, o = t / (inner * m);
    const int64_t j = int64_t(index[per_element ? t : i]);
    if (j < 0 || j >= n) continue;  // recorded by the index check
    y[t] = x[(o * n + j) * inner + k];
  }
}

template <class T, class I>
__global__ void index_scatter_add_kernel(const T* __restrict__ base, const T* __restrict__ src,
                                         const I* __restrict__ index, T* __restrict__ y, int64_t outer, int64_t n,
                                         int64_t m, int64_t inner, bool per_element, acc_t<T> alpha) {
  using A = acc_t<T>;
  const int64_t total = outer * n * inner;
  for (int64_t t = flat_worker(); t < total; t += flat_workers()) {
    const int64_t k = t % inner, j = (t / inner) % n, o = t / (inner * n);
    A acc = base != nullptr ? to_acc(base[t]) : A(0);
    const int64_t first = (o * m) * inner + k;  // src / per-element index position of (o, 0, k)
    for (int64_t i = 0; i < m; ++i) {
      const int64_t p = first + i * inner;
      if (int64_t(index[per_element ? p : i]) == j) acc = add_rn(acc, mul_rn(alpha, to_acc(src[p])));
    }
    y[t] = from_acc<T>(acc);
  }
}

void check_sizes(const char* op, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  HG_CHECK(outer >= 0 && n >= 0 && m >= 0 && inner >= 0, "[", op, "] outer = ", outer, ", n = ", n, ", m = ", m,
           ", inner = ", inner, ", expected all >= 0");
}

}  // namespace

void index_gather(const void* x, const void* index, DType index_dtype, void* y, int64_t outer, int64_t n, int64_t m,
                  int64_t inner, bool per_element, DType dtype, Stream stream) {
  const char* op = per_element ? "gather" : "index_select";
  check_sizes(op, outer, n, m, inner);
  const int64_t count = per_element ? outer * m * inner : m;
  enqueue_index_check(per_element ? DeviceErrorOp::gather : DeviceErrorOp::index_select, index, index_dtype, count, n,
                      false, 0, stream);
  const int64_t total = outer * m * inner;
  if (total == 0) return;
  dispatch_bits_cuda(dtype, op, [&]<class E>() {
    dispatch_index_cuda(index_dtype, op, [&]<class I>() {
      launch(index_gather_kernel<E, I>, flat_grid(total), dim3(kFlatThreads), 0, stream, static_cast<const E*>(x),
             static_cast<const I*>(index), static_cast<E*>(y), outer, n, m, inner, per_element);
    });
  });
}

void index_scatter_add(const void* base, const void* src, const void* index, DType index_dtype, void* y, int64_t outer,
                       int64_t n, int64_t m, int64_t inner, bool per_element, double alpha, DType dtype,
                       Stream stream) {
  const char* op = per_element ? "scatter_add" : "index_add";
  check_sizes(op, outer, n, m, inner);
  const int64_t count = per_element ? outer * m * inner : m;
  enqueue_index_check(per_element ? DeviceErrorOp::scatter_add : DeviceErrorOp::index_add, index, index_dtype, count, n,
                      false, 0, stream);
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  dispatch_floating_cuda(dtype, op, [&]<class T>() {
    dispatch_index_cuda(index_dtype, op, [&]<class I>() {
      launch(index_scatter_add_kernel<T, I>, flat_grid(total), dim3(kFlatThreads), 0, stream,
             static_cast<const T*>(base), static_cast<const T*>(src), static_cast<const I*>(index), static_cast<T*>(y),
             outer, n, m, inner, per_element, acc_t<T>(alpha));
    });
  });
}

}  // namespace hg::kernels::cuda
