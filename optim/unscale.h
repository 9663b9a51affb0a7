#pragma once
// Unscaling gradients after a scaled backward (optim/loss_scaler.h): every defined gradient of
// `params` is multiplied by inv_scale = 1 / S in place, and the pass reports whether any element is
// inf or NaN — one fused multi-tensor kernel per device (kernels::{cpu,cuda}::unscale_and_check over
// kernels::TensorSpan; the math is kernels/unscale_math.h), in the order the devices first appear.
//
// A non-contiguous gradient is replaced by a contiguous copy first (it is written in place).
#include <vector>

#include "engine/tensor.h"

namespace hg::optim {

// Returns true when some gradient holds an inf or NaN (after multiplying by inv_scale).
bool unscale_gradients(const std::vector<Tensor>& params, double inv_scale);

}  // namespace hg::optim
