// Stochastic rounding float -> f16 / bf16 on CUDA (math: kernels/stochastic_round.h), the very same
// per-element function as the CPU backend: element i rounds up with probability
// (|x| - |lo|) / (|hi| - |lo|), deciding with word i % 4 of Philox block offset + i / 4. The
// probability is one IEEE subtraction pair and one division (no fma to contract), so both backends
// produce the same bits.
//
// Parallel strategy: a grid-stride loop in which a thread owns one Philox block, i.e. elements
// 4q .. 4q + 3: one philox4x32_10 evaluation gives their four random words. When x is aligned to 16
// bytes and y to 8 (four elements each; whole tensors always are), the thread moves its four with ONE
// 16-byte load and ONE 8-byte store, so a warp's lanes read and write contiguous spans and every
// 32-byte sector is used whole (element-by-element accesses strided the lanes by four elements and
// used 25% of each sector per instruction). Otherwise, and for the last, partial block, element by
// element. Which thread handles an element never changes its value (word i % 4 of block
// offset + i / 4).
#include "kernels/cuda/device_math.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernels_cuda.h"
#include "kernels/stochastic_round.h"

namespace hg::kernels::cuda {
namespace {

// packed: x and y are aligned to four elements, so each full block's elements are one load and one store.
template <class Bits>
__global__ void stochastic_round_kernel(const float* __restrict__ x, uint16_t* __restrict__ y, int64_t n,
                                        uint64_t seed, uint64_t offset, bool packed) {
  const int64_t blocks = (n + 3) / 4;
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int64_t q = flat_worker(); q < blocks; q += flat_workers()) {
    const uint64_t block = offset + uint64_t(q);
    const Philox4 words = philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, k0, k1);
    const int64_t i = q * 4;
    if (packed && i + 4 <= n) {
      const Pack<float, 4> in = load_pack<4>(x + i);
      Pack<uint16_t, 4> out;
      HG_UNROLL
      for (int w = 0; w < 4; ++w) out.v[w] = stochastic_round_bits<Bits>(in.v[w], words.v[w]);
      store_pack<4>(y + i, out);
    } else {
      for (int w = 0; w < 4 && i + w < n; ++w) y[i + w] = stochastic_round_bits<Bits>(x[i + w], words.v[w]);
    }
  }
}

}  // namespace

void stochastic_round(const float* x, void* y, int64_t n, uint64_t seed, uint64_t offset, DType dtype,
                      Stream stream) {
  HG_CHECK(n >= 0, "[stochastic_round] n = ", n, ", expected n >= 0");
  HG_CHECK(dtype == DType::f16 || dtype == DType::bf16, "[stochastic_round] cannot round to ", dtype_name(dtype),
           "; expected f16 or bf16");
  if (n == 0) return;
  uint16_t* out = static_cast<uint16_t*>(y);
  const bool packed = reinterpret_cast<uintptr_t>(x) % (4 * sizeof(float)) == 0 &&
                      reinterpret_cast<uintptr_t>(out) % (4 * sizeof(uint16_t)) == 0;
  if (dtype == DType::f16) {
    launch(stochastic_round_kernel<HalfBits>, flat_grid((n + 3) / 4), dim3(kFlatThreads), 0, stream, x, out, n, seed,
           offset, packed);
  } else {
    launch(stochastic_round_kernel<BFloat16Bits>, flat_grid((n + 3) / 4), dim3(kFlatThreads), 0, stream, x, out, n,
           seed, offset, packed);
  }
}

}  // namespace hg::kernels::cuda
