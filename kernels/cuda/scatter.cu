// scatter_along: x viewed as [outer, inner], index [outer, inner] (i64, values in [0, n)):
//   y[o, index[o, i], i] = x[o, i];  every other element of y ([outer, n, inner]) is 0.
// The backward of max over a dimension.
//
// Parallel strategy: one thread per element of y (a grid-stride loop in y's order, so the writes
// coalesce): y[o, j, i] = index[o, i] == j ? x[o, i] : 0. Every element of y is written exactly once,
// by one thread, with no separate zero-fill pass and no race. An index outside [0, n) matches no j:
// its column stays 0 and nothing outside y is touched (the CPU backend throws there; checking on the
// device would need a read-back and a stream synchronisation, and the indices come from reduce's
// argmax, which is always in range).
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <class T>
__global__ void scatter_along_kernel(const T* __restrict__ x, const int64_t* __restrict__ index, T* __restrict__ y,
                                     int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * n * inner;
  for (int64_t t = flat_worker(); t < total; t += flat_workers()) {
    const int64_t i = t % inner;
    const int64_t j = (t / inner) % n;
    const int64_t o = t / (inner * n);
    const int64_t column = o * inner + i;
    y[t] = index[column] == j ? x[column] : from_acc<T>(acc_t<T>(0));
  }
}

}  // namespace

void scatter_along(const void* x, const int64_t* index, void* y, int64_t outer, int64_t n, int64_t inner, DType dtype,
                   Stream stream) {
  HG_CHECK(outer >= 0 && n >= 0 && inner >= 0, "[scatter_along] negative size");
  dispatch_floating_cuda(dtype, "scatter_along", [&]<class T>() {
    launch(scatter_along_kernel<T>, flat_grid(outer * n * inner), dim3(kFlatThreads), 0, stream,
           static_cast<const T*>(x), index, static_cast<T*>(y), outer, n, inner);
  });
}

}  // namespace hg::kernels::cuda
