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

}  // namespace hg::kernels::cpu
