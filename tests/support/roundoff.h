#pragma once
// Rounding bounds of the floating dtypes, for tolerances derived from the arithmetic rather than picked:
// the unit roundoff of a result stored in a dtype, and that of the fp32 (f64 for f64) accumulation the
// kernels do. The list of floating dtypes every kernel test sweeps.
#include "kernels/dtype.h"

namespace hg::testing {

inline constexpr DType kFloatingTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// Half the distance from 1 to the next representable value of t (f32's for the non-floating dtypes).
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::f64:
      return 0x1p-53;
    case DType::f16:
      return 0x1p-11;
    case DType::bf16:
      return 0x1p-8;
    default:
      return 0x1p-24;
  }
}

// The unit roundoff of the accumulator: f64 for f64 data, fp32 for every other dtype.
inline double accumulate_roundoff(DType t) { return t == DType::f64 ? 0x1p-53 : 0x1p-24; }

}  // namespace hg::testing
