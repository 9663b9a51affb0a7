#pragma once
// Array conversions between float and the half types for the CPU kernels: every f16/bf16 load and
// store of a CPU kernel goes through these, so they are the one place the SIMD conversions live.
// Results are bit-identical to hg::half / hg::bfloat16's scalar conversions (kernels/half.h): round
// to nearest even, subnormals kept (never flushed), overflow to infinity, every NaN to the canonical
// NaN of half.h (0x7fff in f16 and bf16, 0x7fffffff when widening f16). Overloads for float (a copy)
// let templated kernels call them for every dtype. Not parallel: callers split rows over their
// OpenMP threads.
//
// The instruction set is chosen once, at the first call, from the running CPU (convert.cpp:
// AVX-512 F/BW/VL + F16C, else AVX2 + F16C, else scalar), whatever the build's -march. The
// ConvertIsa overloads run one tier directly, so tests can hold every tier to the scalar one.
#include <cstdint>
#include <type_traits>

#include "kernels/half.h"

namespace hg::kernels::cpu {

// dst[i] = float(src[i]) for i < n.
void to_float(const half* src, float* dst, int64_t n);
void to_float(const bfloat16* src, float* dst, int64_t n);
void to_float(const float* src, float* dst, int64_t n);

// dst[i] = T(src[i]) for i < n, rounded to nearest even.
void from_float(const float* src, half* dst, int64_t n);
void from_float(const float* src, bfloat16* dst, int64_t n);
void from_float(const float* src, float* dst, int64_t n);

// The conversion tiers, in increasing order of width. scalar is half.h's loop, the reference.
enum class ConvertIsa { scalar, avx2, avx512 };

// The widest tier this CPU runs (cached after the first call).
ConvertIsa convert_best_isa();
const char* convert_isa_name(ConvertIsa isa);

// The same conversions through one given tier; hg::Error when the CPU cannot run it.
void to_float(const half* src, float* dst, int64_t n, ConvertIsa isa);
void to_float(const bfloat16* src, float* dst, int64_t n, ConvertIsa isa);
void from_float(const float* src, half* dst, int64_t n, ConvertIsa isa);
void from_float(const float* src, bfloat16* dst, int64_t n, ConvertIsa isa);

// bf16 converts with a shift (widen) and three integer ops (narrow), which the compiler vectorises
// inside a kernel's own math loop when the build targets AVX2 or better (HALFGRAD_NATIVE on such a
// machine). There, converting inline in one fused pass beats a separate pass through a buffer (an
// extra trip through L1 per operand), so kernels keep bf16 inline: kFuseConversion<T> says so. The
// result is the same bits either way (half.h's conversion). f16 (whose scalar conversion does not
// vectorise) and baseline builds go through the functions above.
#if defined(__AVX2__)
inline constexpr bool kBf16InlineVectorises = true;
#else
inline constexpr bool kBf16InlineVectorises = false;
#endif
template <class T>
inline constexpr bool kFuseConversion = std::is_same_v<T, bfloat16> && kBf16InlineVectorises;

}  // namespace hg::kernels::cpu
