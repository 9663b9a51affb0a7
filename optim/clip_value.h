#pragma once
// Gradient clipping by value, as torch.nn.utils.clip_grad_value_:
//
//   grad(p)_i = min(max(grad(p)_i, -clip_value), clip_value)   for every parameter p with a gradient
//
// in place (the gradient tensors keep their identity: a data-parallel bucket stays aliased), in the
// gradient's own dtype. NaN stays NaN and +-inf becomes +-clip_value, as in PyTorch (torch.clamp_).
// Parameters without a gradient are skipped. Under loss scaling, clip after the scaler's unscale_ so
// that clip_value bounds the true gradients (train/trainer.h does: unscale_ -> clip -> step).
#include <vector>

#include "engine/tensor.h"

namespace hg::optim {

// clip_value must be finite and > 0 (hg::Error otherwise).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace hg::optim
