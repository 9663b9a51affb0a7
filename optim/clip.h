#pragma once
// Global gradient-norm clipping (Pascanu et al. 2013), as torch.nn.utils.clip_grad_norm_:
//
//   norm = sqrt(sum over every parameter p with a gradient, sum_i grad(p)_i^2)    (in double)
//   coef = min(1, max_norm / (norm + 1e-6));   every gradient *= coef when coef < 1
//
// Returns the norm before clipping. The sum is accumulated in double, in a fixed order (parameters
// in the order given, each through the sum_of_squares kernel of its device), so it does not depend on the
// number of threads. Parameters without a gradient are skipped.
//
// A non-finite norm (an inf or NaN in some gradient, e.g. an fp16 overflow) is returned as is and
// the gradients are left untouched — unlike PyTorch, which scales anyway and so turns every gradient
// into NaN or 0. The caller (a loss scaler, or the training loop) sees the non-finite norm and skips
// the step; the untouched gradients remain available for inspection.
#include <vector>

#include "engine/tensor.h"

namespace hg::optim {

// max_norm must be finite and > 0.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// The global L2 norm of the gradients of `params` (the first half of clip_grad_norm).
double grad_norm(const std::vector<Tensor>& params);

// The device form (no host read; a captured step can hold it): sum_sq[0] = the sum of squares of
// every gradient (f64 scalar on the gradients' device, written: one sum_of_squares_into per
// gradient, added in parameter order as grad_norm adds them), then every gradient *= coef on the
// device when the norm sqrt(sum_sq) is finite and coef < 1 (kernels/unscale_math.h). The norm is
// sqrt(sum_sq[0]), read whenever the caller reports it. On the CPU the gradients and the norm are
// bit for bit those of clip_grad_norm.
void clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm, const Tensor& sum_sq);

}  // namespace hg::optim
