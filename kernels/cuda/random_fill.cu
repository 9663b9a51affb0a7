// Random fills on Philox words (philox.h), the same convention as kernels/cpu/random_fill.cpp. Word w
// of the stream at generator state (seed, offset) is word w % 4 of Philox block offset + w / 4.
//
// uniform_fill: element i uses word i:
//     u = bits_to_uniform(word i) in [0, 1) (24 random bits),  y = low + (high - low) * u   (acc_t)
//   rounded to the dtype; should that rounding reach `high`, the next value below `high` is taken,
//   so y stays in [low, high). The product and the sum are rounded one at a time (mul_rn / add_rn:
//   nvcc would otherwise fuse them into one fma), so the result is the CPU's bit for bit wherever
//   the CPU compiler did not fuse them either -- always when high - low is a power of two, where the
//   product is exact. A call of n elements consumes philox_blocks(n) blocks.
// normal_fill: element i uses words 2i and 2i + 1 (block offset + i / 2, words 2 (i % 2) and
//   2 (i % 2) + 1), with the cosine branch of Box-Muller:
//     u1 = ((word 2i >> 8) + 1) / 2^24 in (0, 1],  u2 = bits_to_uniform(word 2i + 1) in [0, 1)
//     y  = mean + std * sqrt(-2 log u1) * cos(2 pi u2)                                     (acc_t)
//   The words are the CPU's; log and cos are the device's (CUDA's logf/cosf are within 1-2 ulp of
//   glibc's), so on a GPU the values agree with the CPU's to a few ulp, not to the bit. A call of n
//   elements consumes philox_blocks(2 n) = ceil(n / 2) blocks.
//
// Parallel strategy: a grid-stride loop in which a thread owns one Philox block: four consecutive
// elements of uniform_fill, two of normal_fill. When y is aligned to the group (4 or 2 elements) a
// thread writes its group with ONE store (uniform_fill: 16 bytes for f32, 8 for f16/bf16; normal_fill:
// 8 bytes for f32, 4 for f16/bf16), so the lanes of a warp write one contiguous span and every
// 32-byte sector is written whole (the audit's store efficiency is 100%; element-by-element stores
// strided the lanes by the group and wrote 25% / 50% of each sector per instruction). When y is not
// so aligned (a view starting mid-group; whole tensors never are), and for the last, partial group,
// the elements are written one by one. Which thread writes an element never changes its value:
// element i is always computed from the words of block offset + i / 4 (or i / 2) as above.
// (f64 uniform_fill's 32-byte group is two 16-byte stores: each fills half of every sector it
// touches, the other half follows from the same thread; not audited.)
#include <cstdint>
#include <cstring>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/kernels_cuda.h"
#include "kernels/philox.h"

namespace hg::kernels::cuda {
namespace {

HG_DEVICE Philox4 philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10(Philox4{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}}, uint32_t(seed), uint32_t(seed >> 32));
}

// The largest value of T below the finite v (one step toward -infinity), on the sign-magnitude bits.
template <class T>
HG_DEVICE T next_below(T v) {
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
  constexpr Bits kSign = Bits(Bits(1) << (8 * sizeof(T) - 1));
  Bits bits;
  memcpy(&bits, static_cast<const void*>(&v), sizeof bits);
  if ((bits & Bits(~kSign)) == 0) {
    bits = Bits(kSign | 1u);  // +-0 -> the smallest negative subnormal
  } else {
    bits = (bits & kSign) ? Bits(bits + 1u) : Bits(bits - 1u);
  }
  memcpy(static_cast<void*>(&v), &bits, sizeof bits);
  return v;
}

// One uniform_fill element from its Philox word.
template <class T>
HG_DEVICE T uniform_value(uint32_t word, acc_t<T> base, acc_t<T> width, double high, bool clamp) {
  using A = acc_t<T>;
  T v = from_acc<T>(add_rn(base, mul_rn(width, A(bits_to_uniform(word)))));
  if (clamp && double(to_acc(v)) >= high) v = next_below(v);
  return v;
}

// packed: y is aligned to 4 elements, so each full group of four is one store.
template <class T>
__global__ void uniform_fill_kernel(T* __restrict__ y, int64_t n, acc_t<T> base, acc_t<T> width, double high,
                                    bool clamp, uint64_t seed, uint64_t offset, bool packed) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t q = flat_worker(); q < blocks; q += flat_workers()) {
    const Philox4 words = philox_block(seed, offset + uint64_t(q));
    const int64_t i = q * 4;
    if (packed && i + 4 <= n) {
      Pack<T, 4> v;
      HG_UNROLL
      for (int w = 0; w < 4; ++w) v.v[w] = uniform_value<T>(words.v[w], base, width, high, clamp);
      store_pack<4>(y + i, v);
    } else {
      for (int w = 0; w < 4 && i + w < n; ++w) y[i + w] = uniform_value<T>(words.v[w], base, width, high, clamp);
    }
  }
}

template <class A>
HG_DEVICE A box_muller(uint32_t word1, uint32_t word2) {
  constexpr A kTwoPi = A(6.283185307179586);
  const A u1 = A((word1 >> 8) + 1u) * A(1.0 / 16777216.0);
  const A u2 = A(bits_to_uniform(word2));
  if constexpr (std::is_same_v<A, double>) {
    return sqrt(A(-2) * log(u1)) * cos(kTwoPi * u2);
  } else {
    return sqrtf(A(-2) * logf(u1)) * cosf(kTwoPi * u2);
  }
}

// packed: y is aligned to 2 elements, so each full pair is one store.
template <class T>
__global__ void normal_fill_kernel(T* __restrict__ y, int64_t n, acc_t<T> mean, acc_t<T> std_dev, uint64_t seed,
                                   uint64_t offset, bool packed) {
  using A = acc_t<T>;
  const int64_t blocks = (n + 1) / 2;
  for (int64_t q = flat_worker(); q < blocks; q += flat_workers()) {
    const Philox4 words = philox_block(seed, offset + uint64_t(q));
    const int64_t i = q * 2;
    Pack<T, 2> v;
    v.v[0] = from_acc<T>(mean + std_dev * box_muller<A>(words.v[0], words.v[1]));
    if (packed && i + 2 <= n) {
      v.v[1] = from_acc<T>(mean + std_dev * box_muller<A>(words.v[2], words.v[3]));
      store_pack<2>(y + i, v);
    } else {
      y[i] = v.v[0];
      if (i + 1 < n) y[i + 1] = from_acc<T>(mean + std_dev * box_muller<A>(words.v[2], words.v[3]));
    }
  }
}

// Whether p is aligned to a group of `elements` elements of T (one Pack<T, elements>).
template <class T>
bool group_aligned(const void* p, int elements) {
  return reinterpret_cast<uintptr_t>(p) % (uintptr_t(elements) * sizeof(T)) == 0;
}

}  // namespace

void uniform_fill(void* y, int64_t n, double low, double high, uint64_t seed, uint64_t offset, DType dtype,
                  Stream stream) {
  HG_CHECK(n >= 0, "[uniform_fill] n = ", n, ", expected n >= 0");
  HG_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high, "[uniform_fill] low = ", low, ", high = ", high,
           ", expected finite bounds with low <= high");
  dispatch_floating_cuda(dtype, "uniform_fill", [&]<class T>() {
    using A = acc_t<T>;
    launch(uniform_fill_kernel<T>, flat_grid((n + 3) / 4), dim3(kFlatThreads), 0, stream, static_cast<T*>(y), n, A(low),
           A(high - low), high, high > low, seed, offset, group_aligned<T>(y, 4));
  });
}

void normal_fill(void* y, int64_t n, double mean, double std, uint64_t seed, uint64_t offset, DType dtype,
                 Stream stream) {
  HG_CHECK(n >= 0, "[normal_fill] n = ", n, ", expected n >= 0");
  HG_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, "[normal_fill] mean = ", mean, ", std = ", std,
           ", expected finite values with std >= 0");
  dispatch_floating_cuda(dtype, "normal_fill", [&]<class T>() {
    using A = acc_t<T>;
    launch(normal_fill_kernel<T>, flat_grid((n + 1) / 2), dim3(kFlatThreads), 0, stream, static_cast<T*>(y), n, A(mean),
           A(std), seed, offset, group_aligned<T>(y, 2));
  });
}

}  // namespace hg::kernels::cuda
