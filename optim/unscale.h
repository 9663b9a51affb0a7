#pragma once
// Unscaling gradients after a scaled backward (optim/loss_scaler.h): every defined gradient of
// `params` is multiplied by inv_scale = 1 / S in place, and the pass reports whether any element is
// inf or NaN — one fused multi-tensor kernel per device (kernels::{cpu,cuda}::unscale_and_check over
// kernels::TensorSpan; the math is kernels/unscale_math.h), in the order the devices first appear.
//
// A non-contiguous gradient is replaced by a contiguous copy first (it is written in place).
#include <vector>

#include "engine/tensor.h"
#include "kernels/kernels.h"

namespace hg::optim {

// Returns true when some gradient holds an inf or NaN (after multiplying by inv_scale).
bool unscale_gradients(const std::vector<Tensor>& params, double inv_scale);

// The device form (no host read; kernels::*::scale_gradients): every gradient *= 1 / scale[0] and
// found_inf[0] = 1 when some gradient holds an inf or NaN, else 0. scale and found_inf are f32
// scalars on the gradients' device (one device for all of them).
void unscale_gradients_on_device(const std::vector<Tensor>& params, const Tensor& scale, const Tensor& found_inf);

// The defined gradients of `params` as spans on `device` (an hg::Error naming `who` and the
// parameter for a gradient that is not floating or lives elsewhere); a non-contiguous gradient is
// replaced by a contiguous copy first (they are written in place).
std::vector<kernels::TensorSpan> gradient_spans(const std::vector<Tensor>& params, const Device& device,
                                                const char* who);

}  // namespace hg::optim
