#pragma once
// One axis of a separable linear map of [H, W] planes (kernels/kernels.h: resample2d), as a sparse
// matrix in compressed-row form: output position i along the axis reads the taps
// offset[i] .. offset[i + 1] - 1, tap t reading input position index[t] with weight weight[t].
//
// Interpolation (nearest, linear), adaptive average pooling and, transposed, their backward passes
// are all such maps: the engine builds the tables (engine/ops/resample.cpp) and the kernels only
// apply them, so one kernel per backend serves every mode.
#include <cstdint>

namespace hg::kernels {

struct ResampleAxis {
  int64_t in = 0, out = 0;          // lengths of the axis in the input and the output
  const int64_t* offset = nullptr;  // [out + 1], offset[0] = 0, non-decreasing
  const int64_t* index = nullptr;   // [offset[out]], each in [0, in)
  const double* weight = nullptr;   // [offset[out]]
};

}  // namespace hg::kernels
