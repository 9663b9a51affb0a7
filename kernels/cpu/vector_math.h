#pragma once
// Which implementation the softmax and GELU kernels (softmax.cpp, elementwise.cpp's GELU,
// bias_gelu.cpp) run: their explicit AVX-512 loops (simd_math_avx512.h math, half rows converted in
// registers by convert_avx512.h) or the portable loops (std:: / glibc libmvec math, compiler
// vectorised, half rows through convert.h). Chosen once on the running CPU, whatever the build's
// -march: where it runs both (AVX-512 F/BW/VL + F16C, the same test as convert.h's avx512 tier), by
// timing them at the first use (tier_calibration.h); tests and benchmarks may force the portable
// tier to hold the two against each other.
//
// Also the vector math as array functions (exp, tanh, erf, GELU and its slope over n floats), so
// test_vector_math can measure their ulp errors against std:: on dense sweeps.
#include <cstdint>

namespace hg::kernels::cpu {

enum class VectorMath { portable, avx512 };

// The widest tier this CPU runs (cached after the first call).
VectorMath vector_math_best();
// The tier the kernels use now: the forced one, else HG_VECTOR_MATH=portable|avx512 (read at the first
// call; an hg::Error names a bad value), else (unset or auto) the timed choice of tier_calibration.h.
VectorMath vector_math_active();
// Forces a tier (hg::Error when the CPU cannot run it); not thread-safe against running kernels.
void vector_math_force(VectorMath tier);
// Back to the default (HG_VECTOR_MATH's tier, or the timed choice).
void vector_math_reset();
const char* vector_math_name(VectorMath tier);

// out[i] = f(in[i]) through one tier (portable: std::exp / std::tanh / std::erf and unary_math.h's
// GELU formulas in float).
enum class VectorFunction { exp, tanh, erf, gelu_tanh, gelu_tanh_slope, gelu_erf, gelu_erf_slope };
void vector_math_apply(VectorFunction f, const float* in, float* out, int64_t n, VectorMath tier);

}  // namespace hg::kernels::cpu
