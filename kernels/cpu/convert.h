#pragma once
// Array conversions between float and the half types for the CPU kernels: every f16/bf16 load and
// store of a CPU kernel goes through these, so they are the one place the SIMD conversions live.
// Results are bit-identical to hg::half / hg::bfloat16's scalar conversions (kernels/half.h): round
// to nearest even, subnormals kept (never flushed), overflow to infinity, every NaN to the canonical
// NaN of half.h (0x7fff in f16 and bf16, 0x7fffffff when widening f16). Overloads for float (a copy)
// let templated kernels call them for every dtype. Not parallel: callers split rows over their
// OpenMP threads.
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

}  // namespace hg::kernels::cpu
