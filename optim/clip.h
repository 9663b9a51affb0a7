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

}  // namespace hg::optim
