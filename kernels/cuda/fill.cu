// fill and cast on the device: kernels_cuda.h's twins of kernels::cpu::fill / cast
// (kernels/cpu/cast.cpp holds the reference math).
//
// Math:
//   fill: y[i] = value for i < n. The value is converted to the dtype once, on the host, by the CPU
//     backend itself (cpu::fill of one element), so both backends store the same bits and reject the
//     same values (an integer fill that is not a whole number within range). The kernel only
//     replicates those bits.
//   cast: y[i] = convert(x[i]), the CPU backend's rules:
//     - f32/f16/bf16 -> f32/f16/bf16: through float, one round to nearest even;
//     - f64 and integer sources -> f16/bf16: the exact value (a double: integers convert exactly up
//       to 2^53) is first rounded to float with round-to-odd (__double2float_rz, then the last
//       mantissa bit set when anything was dropped); float keeps more than 2 extra bits, so the final
//       round to nearest even gives the correctly rounded half (no double-rounding error);
//     - integer -> f32/f64: through double, rounded once;
//     - floating -> integer: truncation toward zero, saturating at the integer's range, NaN -> 0;
//     - anything -> bool: value != 0 (NaN is true); bool -> anything: 0 or 1;
//     - the same dtype: a device-to-device copy.
//
// Parallel strategy: a flat grid-stride loop (device_math.h: kFlatThreads threads per block, at most
// kMaxFlatBlocks blocks, each thread a worker).
//   fill: the value's bits are replicated into a 16-byte pack; a worker stores one pack (one 128-bit
//     store) at a time over the 16-byte-aligned middle of y, and single elements over the unaligned
//     head and the tail (for_packs).
//   cast: one element per worker per step (source and destination widths differ, so their packs do
//     not line up; the cast is rare and memory-bound either way).
#include <cstring>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/dispatch_cuda.h"
#include "kernels/dispatch.h"
#include "kernels/kernels_cuda.h"

namespace hg::kernels::cuda {
namespace {

// E: the unsigned integer of the element's size (fill only moves bits).
template <class E>
__global__ void fill_kernel(E* __restrict__ y, int64_t n, int64_t head, Pack<E, kPack<E>> pattern) {
  for_packs<kPack<E>>(n, head, flat_worker(), flat_workers(), [&](int64_t i, auto width) {
    constexpr int W = decltype(width)::value;
    if constexpr (W == 1) {
      y[i] = pattern.v[0];
    } else {
      store_pack<W>(y + i, pattern);
    }
  });
}

template <class T>
inline constexpr bool is_device_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The exact value of an f64 or integer element, as a double.
template <class X>
HG_DEVICE double exact_double(X x) {
  return static_cast<double>(x);
}

// double -> float with round-to-odd: truncate, then set the last bit when the value was inexact.
HG_DEVICE float round_to_odd_float(double d) {
  const float f = __double2float_rz(d);
  if (d != d || static_cast<double>(f) == d) return f;  // NaN, or exact
  return __int_as_float(__float_as_int(f) | 1);
}

// double -> integer: truncation toward zero, saturating, NaN -> 0 (no input is undefined behaviour).
template <class I>
HG_DEVICE I saturating_truncate(double d) {
  // [lo, hi): the range that truncates to a value of I (hi is the first value past its largest).
  constexpr bool is_u8 = std::is_same_v<I, uint8_t>;
  constexpr double lo = is_u8 ? 0.0 : std::is_same_v<I, int32_t> ? -2147483648.0 : -9223372036854775808.0;
  constexpr double hi = is_u8 ? 256.0 : -lo;
  constexpr I min = is_u8 ? I(0) : std::is_same_v<I, int32_t> ? I(-2147483647 - 1) : I(-9223372036854775807LL - 1);
  constexpr I max = is_u8 ? I(255) : std::is_same_v<I, int32_t> ? I(2147483647) : I(9223372036854775807LL);
  if (d != d) return I(0);  // NaN
  if (d <= lo) return min;
  if (d >= hi) return max;
  return static_cast<I>(d);
}

template <class Y>
HG_DEVICE Y from_double(double d) {
  if constexpr (std::is_same_v<Y, double>) {
    return d;
  } else if constexpr (std::is_same_v<Y, float>) {
    return static_cast<float>(d);
  } else if constexpr (std::is_same_v<Y, __half>) {
    return __float2half_rn(round_to_odd_float(d));
  } else if constexpr (std::is_same_v<Y, __nv_bfloat16>) {
    return __float2bfloat16_rn(round_to_odd_float(d));
  } else if constexpr (std::is_same_v<Y, bool>) {
    return d != 0.0;  // NaN != 0: true
  } else {
    return saturating_truncate<Y>(d);
  }
}

template <class X, class Y>
HG_DEVICE Y convert(X x) {
  constexpr bool x_float_exact = std::is_same_v<X, float> || is_device_half_v<X>;
  constexpr bool y_float_exact = std::is_same_v<Y, float> || is_device_half_v<Y>;
  if constexpr (x_float_exact && y_float_exact) {
    return from_acc<Y>(to_acc(x));  // through float, one rounding
  } else if constexpr (x_float_exact) {
    return from_double<Y>(static_cast<double>(to_acc(x)));
  } else {
    return from_double<Y>(exact_double(x));
  }
}

template <class X, class Y>
__global__ void cast_kernel(const X* __restrict__ x, Y* __restrict__ y, int64_t n) {
  for (int64_t i = flat_worker(); i < n; i += flat_workers()) y[i] = convert<X, Y>(x[i]);
}

}  // namespace

void fill(void* y, int64_t n, double value, DType dtype, Stream stream) {
  HG_CHECK(n >= 0, "[cuda::fill] n = ", n, ", expected n >= 0");
  uint64_t bits = 0;
  cpu::fill(&bits, 1, value, dtype);  // the CPU backend's conversion (and its check of integer values)
  if (n == 0) return;
  dispatch_bits_cuda(dtype, "cuda::fill", [&]<class E>() {
    Pack<E, kPack<E>> pattern;
    for (E& e : pattern.v) std::memcpy(&e, &bits, sizeof e);
    E* out = static_cast<E*>(y);
    const int64_t head = pack_head<E>(n, out);
    const int64_t units = head < 0 ? n : (n + kPack<E> - 1) / kPack<E> + 1;
    launch(fill_kernel<E>, flat_grid(units), dim3(kFlatThreads), 0, stream, out, n, head, pattern);
  });
}

void cast(const void* x, DType x_dtype, void* y, DType y_dtype, int64_t n, Stream stream) {
  HG_CHECK(n >= 0, "[cuda::cast] n = ", n, ", expected n >= 0");
  if (n == 0) return;
  if (x_dtype == y_dtype) {
    HG_CUDA_CHECK(cudaMemcpyAsync(y, x, size_t(n) * dtype_size(x_dtype), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  dispatch_all_cuda(x_dtype, "cuda::cast", [&]<class X>() {
    dispatch_all_cuda(y_dtype, "cuda::cast", [&]<class Y>() {
      launch(cast_kernel<X, Y>, flat_grid(n), dim3(kFlatThreads), 0, stream, static_cast<const X*>(x),
             static_cast<Y*>(y), n);
    });
  });
}

}  // namespace hg::kernels::cuda
