#pragma once
// The CPU kernel tiers that the feature flags alone used to pick (issue 41), now timed once per
// process on the running CPU among the tiers it can run, by the rule of calibration_rule.h (the
// widest tier stays unless another is at least 5% faster):
//   - the conversions' tier (convert.h: scalar, avx2+f16c, avx512): to_float / from_float of f16 and
//     bf16 over 16K elements each way; every tier gives the same bits, so the choice is only speed;
//   - the row kernels' tier (vector_math.h: portable or avx512; softmax, GELU, LayerNorm): exp, tanh,
//     GELU and its slope over 4096 floats.
// Each takes well under a millisecond or two at the first use, so it is not cached. An explicit
// HG_VECTOR_MATH (or vector_math_force) still decides the row tier without timing.
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/vector_math.h"

namespace hg::kernels::cpu {

// The tier to_float / from_float take (the timed choice; settled at the first call).
ConvertIsa convert_default_isa();
// "avx512 (timed: avx512 0.004 ms, avx2+f16c 0.006 ms, scalar 0.051 ms)", or "scalar (the only tier)".
std::string convert_tier_description();
// The row kernels' default tier and why: "avx512 (timed: avx512 0.021 ms, portable 0.203 ms)",
// "portable (HG_VECTOR_MATH=portable)", "portable (the only tier)"; a forced tier is vector_math_active's.
std::string vector_math_description();

namespace detail {

// The seconds each tier took, in the order timed (widest first); empty when nothing was timed.
const std::vector<std::pair<ConvertIsa, double>>& convert_tier_timings();
const std::vector<std::pair<VectorMath, double>>& vector_math_timings();

}  // namespace detail
}  // namespace hg::kernels::cpu
