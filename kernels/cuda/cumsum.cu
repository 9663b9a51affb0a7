// cumsum over [outer, n, inner] (the math: kernels/kernels.h), forward or reverse.
//
// Parallel strategy, two shapes:
//   - inner == 1 (a scan along the last dimension, rows of n contiguous elements): one warp per row,
//     grid-stride over the rows. The warp reads the row 32 elements at a time (coalesced; from the
//     end when reverse), forms the inclusive scan of the 32 with five __shfl_up_sync steps of a fixed
//     shape, adds the carry of the chunks before, and takes the new carry from the last lane.
//   - inner > 1: one thread per column (o, k), grid-stride, walking i in order with its running sum in
//     a register; the 32 lanes of a warp hold 32 neighbouring k, so every step's loads and stores
//     coalesce.
// Sums in acc_t, each output rounded once from the running sum. Both shapes add in a fixed order, so
// the result is the same bits on every run; the warp scan adds in a tree within each chunk, so its
// last bits may differ from the CPU's sequential order.
#include <algorithm>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

constexpr int kRowThreads = 256;

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    cumsum_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t n, bool reverse) {
  using A = acc_t<T>;
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t warps_per_block = kRowThreads / kWarpSize;
  const int64_t first_row = int64_t(blockIdx.x) * warps_per_block + int(threadIdx.x) / kWarpSize;
  for (int64_t row = first_row; row < rows; row += int64_t(gridDim.x) * warps_per_block) {
    const T* in = x + row * n;
    T* out = y + row * n;
    A carry = 0;
    for (int64_t chunk = 0; chunk < n; chunk += kWarpSize) {
      const int64_t step = chunk + lane;
      const int64_t i = reverse ? n - 1 - step : step;
      A v = step < n ? to_acc(in[i]) : A(0);
      for (int delta = 1; delta < kWarpSize; delta <<= 1) {
        const A up = __shfl_up_sync(kFullMask, v, delta);
        if (lane >= delta) v = add_rn(v, up);
      }
      v = add_rn(v, carry);
      if (step < n) out[i] = from_acc<T>(v);
      carry = __shfl_sync(kFullMask, v, kWarpSize - 1);
    }
  }
}

template <class T>
__global__ void cumsum_columns_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                                      int64_t inner, bool reverse) {
  using A = acc_t<T>;
  for (int64_t c = flat_worker(); c < outer * inner; c += flat_workers()) {
    const int64_t o = c / inner, k = c % inner;
    A running = 0;
    for (int64_t step = 0; step < n; ++step) {
      const int64_t p = (o * n + (reverse ? n - 1 - step : step)) * inner + k;
      running = add_rn(running, to_acc(x[p]));
      y[p] = from_acc<T>(running);
    }
  }
}

}  // namespace

void cumsum(const void* x, void* y, int64_t outer, int64_t n, int64_t inner, bool reverse, DType dtype, Stream stream) {
  HG_CHECK(outer >= 0 && n >= 0 && inner >= 0, "[cumsum] outer = ", outer, ", n = ", n, ", inner = ", inner,
           ", expected all >= 0");
  if (outer * n * inner == 0) return;
  dispatch_floating_cuda(dtype, "cumsum", [&]<class T>() {
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    if (inner == 1) {
      constexpr int64_t kWarpsPerBlock = kRowThreads / kWarpSize;
      const int64_t blocks = std::min<int64_t>((outer + kWarpsPerBlock - 1) / kWarpsPerBlock, 65535);
      launch(cumsum_rows_kernel<T>, dim3(unsigned(blocks)), dim3(kRowThreads), 0, stream, in, out, outer, n, reverse);
    } else {
      launch(cumsum_columns_kernel<T>, flat_grid(outer * inner), dim3(kFlatThreads), 0, stream, in, out, outer, n,
             inner, reverse);
    }
  });
}

}  // namespace hg::kernels::cuda
