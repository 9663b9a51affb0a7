#pragma once
// gradcheck: compares the analytic Jacobian that autograd computes with the numerical one from
// float64 central differences, over every (output element, input element) pair.
//   numeric  J[j][i] = (f(x + h e_i)[j] - f(x - h e_i)[j]) / 2h
//   analytic J[j][i] = d out_j / d x_i, one backward per output element with a one-hot gradient.
// Passes when |numeric - analytic| <= atol + rtol * |numeric| everywhere; on failure the message
// names the op, the input, the output element and both values.
#include <functional>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "kernels/options.h"

namespace hg::testing {

// The finite-difference step and the tolerances.
//   GradcheckOptions().step(1e-5).atol(1e-5).rtol(1e-4)
struct GradcheckOptions {
  HG_OPTION(GradcheckOptions, double, step, 1e-6);
  HG_OPTION(GradcheckOptions, double, atol, 1e-6);
  HG_OPTION(GradcheckOptions, double, rtol, 1e-5);
};

using OpFunction = std::function<Tensor(const std::vector<Tensor>&)>;

// inputs: contiguous f64 CPU leaves; those with requires_grad are checked. Returns "" when the
// Jacobians agree, else a description of the first disagreement.
std::string gradcheck(const std::string& name, const OpFunction& fn, const std::vector<Tensor>& inputs,
                      const GradcheckOptions& options = GradcheckOptions());

}  // namespace hg::testing
