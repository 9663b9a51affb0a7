// fill and cast between the eight dtypes (f32, f64, f16, bf16, i32, i64, the storage type u8 and bool).
//
// Math:
//   floating -> floating rounds to nearest, ties to even, with a single rounding. f32/f16/bf16
//     sources are exact in float, so they go through float. f64 (and integer) sources that target
//     f16/bf16 first round to float with round-to-odd (truncate, then set the last bit when anything
//     was dropped): float keeps >= 2 more bits than f16/bf16, so the final round-to-nearest-even in
//     half.h gives the same result as rounding the double directly (no double-rounding error).
//   integer -> floating goes through double (exact for |v| <= 2^53).
//   floating -> integer truncates toward zero (C semantics), saturates at the integer range and
//     maps NaN to 0, so no input is undefined behaviour.
//   anything -> bool is value != 0 (NaN is true, as in PyTorch); bool -> anything is 0 or 1.
//
// Parallel strategy: the element range is cut into fixed chunks; OpenMP splits the chunks over
// threads once n is large enough to pay for the fork. Casts among f32, f16 and bf16 go through
// convert.h's SIMD conversions (bit-identical to the scalar ones).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

constexpr int64_t kParallelMinElements = int64_t(1) << 16;

template <class T>
constexpr bool is_float_exact_v = std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

template <class T>
constexpr bool is_half_type_v = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// double -> float rounding toward zero, with the last mantissa bit set when the value was inexact.
float round_to_odd_float(double d) {
  float f = static_cast<float>(d);
  if (!std::isfinite(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <class I>
I saturating_truncate(double d) {
  if (std::isnan(d)) return I(0);
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  // 256, 2^31 or 2^63: the first value past the largest integer (exactly representable in double;
  // the largest i64 itself rounds up to 2^63 as a double, so adding 1 leaves it there).
  constexpr double hi_exclusive = static_cast<double>(std::numeric_limits<I>::max()) + 1.0;
  if (d <= lo) return std::numeric_limits<I>::min();
  if (d >= hi_exclusive) return std::numeric_limits<I>::max();
  return static_cast<I>(d);
}

// Converts a double (exact value of an f64 or integer source) to Y with one rounding.
template <class Y>
Y from_double(double d) {
  if constexpr (std::is_same_v<Y, double>) {
    return d;
  } else if constexpr (std::is_same_v<Y, float>) {
    return static_cast<float>(d);
  } else if constexpr (is_half_type_v<Y>) {
    return Y(round_to_odd_float(d));
  } else if constexpr (std::is_same_v<Y, bool>) {
    return d != 0.0;  // NaN != 0: true
  } else {
    return saturating_truncate<Y>(d);
  }
}

template <class X>
double to_double(X x) {
  if constexpr (is_half_type_v<X>) {
    return static_cast<double>(static_cast<float>(x));
  } else {
    return static_cast<double>(x);
  }
}

template <class X, class Y>
Y convert(X x) {
  if constexpr (std::is_same_v<X, Y>) {
    return x;
  } else if constexpr (is_float_exact_v<X> && is_float_exact_v<Y>) {
    return Y(static_cast<float>(x));
  } else {
    return from_double<Y>(to_double(x));
  }
}

// f32 <-> f16/bf16 and f16 <-> bf16: convert.h's SIMD conversions (bit-identical to convert<X, Y>),
// kChunk elements at a time, half <-> half through a float buffer on the stack.
template <class X, class Y>
void cast_through_float(const X* x, Y* y, int64_t n) {
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    if constexpr (std::is_same_v<X, float>) {
      from_float(x + begin, y + begin, count);
    } else if constexpr (std::is_same_v<Y, float>) {
      to_float(x + begin, y + begin, count);
    } else {
      float staged[kChunk];
      to_float(x + begin, staged, count);
      from_float(staged, y + begin, count);
    }
  }
}

template <class X, class Y>
void cast_typed(const X* __restrict x, Y* __restrict y, int64_t n) {
  if constexpr (std::is_same_v<X, Y>) {
    std::memcpy(y, x, size_t(n) * sizeof(X));
  } else if constexpr (is_float_exact_v<X> && is_float_exact_v<Y>) {
    cast_through_float(x, y, n);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) y[i] = convert<X, Y>(x[i]);
  }
}

}  // namespace

void fill(void* y, int64_t n, double value, DType dtype) {
  HG_CHECK(n >= 0, "[fill] n = ", n, ", expected n >= 0");
  dispatch_all(dtype, "fill", [&]<class T>() {
    const T v = from_double<T>(value);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      HG_CHECK(to_double(v) == value, "[fill] value ", value, " cannot be stored exactly in ", dtype_name(dtype),
               ", expected a whole number within its range");
    }
    T* out = static_cast<T*>(y);
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) out[i] = v;
  });
}

void cast(const void* x, DType x_dtype, void* y, DType y_dtype, int64_t n) {
  HG_CHECK(n >= 0, "[cast] n = ", n, ", expected n >= 0");
  if (n == 0) return;  // x and y may be null then (an empty std::vector's data())
  dispatch_all(x_dtype, "cast", [&]<class X>() {
    dispatch_all(y_dtype, "cast", [&]<class Y>() { cast_typed(static_cast<const X*>(x), static_cast<Y*>(y), n); });
  });
}

}  // namespace hg::kernels::cpu
