// resample2d: a separable linear map of [H, W] planes (the math: kernels/kernels.h; the tables:
// kernels/resample_axis.h).
//
// Parallel strategy: one thread per output element (p, i, j), grid-stride over the flat output. The
// 32 lanes of a warp hold neighbouring j of one row, so the stores coalesce and the loads of a tap row
// fall in a few neighbouring cache lines (an upsampling's lanes read the same input elements, served by
// L1). A thread walks its column taps b in order and, for each, its row taps a in order:
//   y = sum_b w.weight[b] (sum_a h.weight[a] x[p, h.index[a], w.index[b]])
// -- the CPU kernel's order of sums -- in acc_t, and writes its output once: no atomics, no shared
// memory, the same bits on every run. The tables are small and stay in L1.
// Audit exemption (audit/exemptions.cpp, load efficiency): a gather by design. A tap table's lanes read
// every other 8-byte entry (two taps per output), and a transposed (backward) or pooling window's lanes
// read inputs 2 or more elements apart, so a warp request fills half its sectors; the neighbouring taps
// read the other half from L1, and DRAM stays within 1.2x the minimum. Planned: fixed-width (ELL) tables
// read tap by tap across the lanes, and input tiles staged in shared memory.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

template <class T>
__global__ void resample2d_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, ResampleAxis h,
                                  ResampleAxis w) {
  using A = acc_t<T>;
  const int64_t total = planes * h.out * w.out;
  for (int64_t e = flat_worker(); e < total; e += flat_workers()) {
    const int64_t j = e % w.out, row = e / w.out;
    const int64_t i = row % h.out, p = row / h.out;
    const T* plane = x + p * h.in * w.in;
    const int64_t a_begin = h.offset[i], a_end = h.offset[i + 1];
    const int64_t b_end = w.offset[j + 1];
    A sum = 0;
    for (int64_t b = w.offset[j]; b < b_end; ++b) {
      const T* column = plane + w.index[b];
      A column_sum = 0;
      for (int64_t a = a_begin; a < a_end; ++a) column_sum += A(h.weight[a]) * to_acc(column[h.index[a] * w.in]);
      sum += A(w.weight[b]) * column_sum;
    }
    y[e] = from_acc<T>(sum);
  }
}

}  // namespace

void resample2d(const void* x, void* y, int64_t planes, ResampleAxis h, ResampleAxis w, DType dtype, Stream stream) {
  HG_CHECK(planes >= 0 && h.in >= 0 && h.out >= 0 && w.in >= 0 && w.out >= 0, "[resample2d] planes = ", planes,
           ", input ", h.in, "x", w.in, ", output ", h.out, "x", w.out, ", expected all >= 0");
  const int64_t total = planes * h.out * w.out;
  if (total == 0) return;
  dispatch_floating_cuda(dtype, "resample2d", [&]<class T>() {
    launch(resample2d_kernel<T>, flat_grid(total), dim3(kFlatThreads), 0, stream, static_cast<const T*>(x),
           static_cast<T*>(y), planes, h, w);
  });
}

}  // namespace hg::kernels::cuda
