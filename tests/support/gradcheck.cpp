#include "support/gradcheck.h"

#include <cmath>
#include <sstream>

namespace hg::testing {

namespace {

std::vector<double> evaluate(const OpFunction& fn, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  return fn(inputs).to_vector<double>();
}

}  // namespace

std::string gradcheck(const std::string& name, const OpFunction& fn, const std::vector<Tensor>& inputs,
                      const GradcheckOptions& options) {
  const Tensor probe = fn(inputs);
  const int64_t outputs = probe.numel();
  if (!probe.requires_grad()) return name + ": output does not require grad (the op recorded no graph)";

  for (size_t which = 0; which < inputs.size(); ++which) {
    const Tensor& input = inputs[which];
    if (!input.requires_grad()) continue;
    if (input.dtype() != f64 || !input.is_contiguous()) return name + ": gradcheck inputs must be contiguous f64";
    double* data = input.data<double>();
    const int64_t n = input.numel();

    // Numerical Jacobian, one input element (column) at a time.
    std::vector<std::vector<double>> numeric(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const double saved = data[i];
      data[i] = saved + options.step();
      const std::vector<double> plus = evaluate(fn, inputs);
      data[i] = saved - options.step();
      const std::vector<double> minus = evaluate(fn, inputs);
      data[i] = saved;
      numeric[size_t(i)].resize(size_t(outputs));
      for (int64_t j = 0; j < outputs; ++j)
        numeric[size_t(i)][size_t(j)] = (plus[size_t(j)] - minus[size_t(j)]) / (2 * options.step());
    }

    // Analytic Jacobian, one output element (row) at a time.
    for (int64_t j = 0; j < outputs; ++j) {
      for (const Tensor& t : inputs)
        if (t.requires_grad()) t.set_grad(Tensor());
      const Tensor out = fn(inputs);
      std::vector<double> seed(static_cast<size_t>(outputs), 0.0);
      seed[size_t(j)] = 1.0;
      out.backward(from_vector(seed, out.shape(), out.dtype()));
      const Tensor grad = input.grad();
      const std::vector<double> analytic =
          grad.defined() ? grad.to_vector<double>() : std::vector<double>(static_cast<size_t>(n), 0.0);
      for (int64_t i = 0; i < n; ++i) {
        const double expected = numeric[size_t(i)][size_t(j)], got = analytic[size_t(i)];
        if (!(std::abs(expected - got) <= options.atol() + options.rtol() * std::abs(expected))) {
          std::ostringstream message;
          message << name << ": d output[" << j << "] / d input" << which << "[" << i << "] analytic " << got
                  << " vs numeric " << expected;
          return message.str();
        }
      }
    }
  }
  return "";
}

}  // namespace hg::testing
