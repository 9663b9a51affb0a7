#pragma once
// The activation modules beside GELU and ReLU (layers/basic.h), and Identity: each is its op
// (engine/ops.h) as a parameter-free module, with PyTorch's constructor arguments and printed form.
#include <cmath>

#include "layers/module.h"

namespace hg::nn {

class Identity : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

class LeakyReLU : public UnaryModule {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string extra_repr() const override { return "negative_slope=" + repr_float(negative_slope); }
  const double negative_slope;
};

// A parameter-free activation: its op as a module. Each is a class of its own, so it prints by its name.
template <Tensor (*op)(const Tensor&)>
class Activation : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) override { return op(x); }
};

class SiLU : public Activation<silu> {};  // x sigmoid(x)
class Tanh : public Activation<tanh> {};
class Sigmoid : public Activation<sigmoid> {};

// log(1 + exp(beta x)) / beta, x itself where beta x > threshold. PyTorch's arguments are ints by default
// and print as such ("beta=1, threshold=20"); a whole value prints without ".0" here too.
class Softplus : public UnaryModule {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta, threshold); }
  std::string extra_repr() const override { return "beta=" + whole(beta) + ", threshold=" + whole(threshold); }
  const double beta, threshold;

 private:
  static std::string whole(double v) { return v == std::floor(v) ? std::to_string(int64_t(v)) : repr_float(v); }
};

// x where x > 0, alpha (exp(x) - 1) elsewhere.
class ELU : public UnaryModule {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha); }
  std::string extra_repr() const override { return "alpha=" + repr_float(alpha); }
  const double alpha;
};

}  // namespace hg::nn
