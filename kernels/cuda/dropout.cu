// Dropout with a counter-based mask that is regenerated, never stored.
//   forward:  y[i]  = keep(i) ? x[i]  * scale : 0
//   backward: dx[i] = keep(i) ? dy[i] * scale : 0,      scale = 1 / (1 - p) (computed in double on the
//   host, rounded to acc_t<T>)
// keep(i) = philox.h's dropout_keep(seed, offset, i, p): element i uses word i % 4 of Philox block
// offset + i / 4 and is kept when its 24-bit uniform is >= p. The CPU backend evaluates the very
// same lines (philox4x32_10, bits_to_uniform), so both backends drop the same elements, and with
// one multiply per kept element (no fma to contract) they produce the same bits.
//
// Parallel strategy: a grid-stride loop in which a thread owns one Philox block, i.e. elements
// 4q .. 4q + 3: one philox4x32_10 evaluation gives its four mask bits. When x and y are aligned to
// four elements the four are moved with one load and one store (128-bit for f32), otherwise one by
// one; the last, partial block is always done one by one. A select, not a multiply by 0, so a
// dropped inf or NaN still gives 0.
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/philox.h"

namespace hg::kernels::cuda {
namespace {

template <class T>
__global__ void dropout_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n, float p, acc_t<T> scale,
                               uint64_t seed, uint64_t offset, bool packed) {
  using A = acc_t<T>;
  const int64_t blocks = (n + 3) / 4;
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int64_t q = flat_worker(); q < blocks; q += flat_workers()) {
    const uint64_t block = offset + uint64_t(q);
    const Philox4 words = philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, k0, k1);
    const int64_t i = q * 4;
    if (packed && i + 4 <= n) {
      const Pack<T, 4> x = load_pack<4>(in + i);
      Pack<T, 4> y;
      HG_UNROLL
      for (int w = 0; w < 4; ++w) {
        y.v[w] = from_acc<T>(bits_to_uniform(words.v[w]) >= p ? to_acc(x.v[w]) * scale : A(0));
      }
      store_pack<4>(out + i, y);
    } else {
      for (int w = 0; w < 4 && i + w < n; ++w) {
        out[i + w] = from_acc<T>(bits_to_uniform(words.v[w]) >= p ? to_acc(in[i + w]) * scale : A(0));
      }
    }
  }
}

void dropout(const char* op, const void* in, void* out, int64_t n, double p, uint64_t seed, uint64_t offset,
             DType dtype, cudaStream_t stream) {
  HG_CHECK(n >= 0, "[", op, "] n = ", n, ", expected n >= 0");
  HG_CHECK(p >= 0.0 && p < 1.0, "[", op, "] p = ", p, ", expected 0 <= p < 1");
  dispatch_floating_cuda(dtype, op, [&]<class T>() {
    using A = acc_t<T>;
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % (4 * sizeof(T)) == 0; };
    launch(dropout_kernel<T>, flat_grid((n + 3) / 4), dim3(kFlatThreads), 0, stream, static_cast<const T*>(in),
           static_cast<T*>(out), n, float(p), A(1.0 / (1.0 - p)), seed, offset, aligned(in) && aligned(out));
  });
}

}  // namespace

void dropout_forward(const void* x, void* y, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype,
                     Stream stream) {
  dropout("dropout_forward", x, y, n, p, seed, offset, dtype, stream);
}

void dropout_backward(const void* dy, void* dx, int64_t n, double p, uint64_t seed, uint64_t offset, DType dtype,
                      Stream stream) {
  dropout("dropout_backward", dy, dx, n, p, seed, offset, dtype, stream);
}

}  // namespace hg::kernels::cuda
