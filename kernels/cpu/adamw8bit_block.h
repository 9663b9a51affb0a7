#pragma once
// The step of one quantisation block of 8-bit AdamW on the CPU (kernels/adamw8bit_math.h), in its scalar
// form and its AVX-512 form; kernels/cpu/adamw8bit.cpp stages a block's theta and g as float and calls one.
//   theta[i] (in/out), g[i]: count <= kAdamW8BitBlock staged elements;
//   code_m, code_v (in/out): the block's codes; absmax_m, absmax_v (in/out): its two scales.
// Both perform the same float operations in the same order; the AVX-512 form fuses the multiply-adds,
// the scalar form only where the compiler contracts them (it does with HALFGRAD_NATIVE=ON, not with
// OFF), so their m, v and theta may differ by an ulp. For equal unquantised moments they write the same
// codes (the quantisation is bit for bit the same).
#include <cstdint>

#include "kernels/adamw_math.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {

using AdamW8BitBlockFn = void (*)(float* theta, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                                  float* absmax_v, int64_t count, const AdamWCoefficients<float>& c);

void adamw8bit_block_scalar(float* theta, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                            float* absmax_v, int64_t count, const AdamWCoefficients<float>& c);
void adamw8bit_block_avx512(float* theta, const float* g, uint8_t* code_m, uint8_t* code_v, float* absmax_m,
                            float* absmax_v, int64_t count, const AdamWCoefficients<float>& c);

// The widest path this CPU runs: avx512 (F, BW, VL) or scalar (8-bit AdamW has no AVX2 path).
AdamWIsa adamw8bit_best_isa();

// Narrows the path adamw8bit_step_device and adamw8bit_offload_step take (tests, bench) to at most `isa`
// (never wider than the CPU has); returns the previous setting. Process-wide; not for concurrent calls.
AdamWIsa set_adamw8bit_isa(AdamWIsa isa);

// Requantisation alone, on n values already scaled into the map's range (tests compare the paths).
void adamw8bit_quantise_scalar(const float* x, uint8_t* codes, int64_t n, bool is_signed);
void adamw8bit_quantise_avx512(const float* x, uint8_t* codes, int64_t n, bool is_signed);

}  // namespace hg::kernels::cpu
