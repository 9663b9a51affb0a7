#pragma once
// The elementary layers: Linear, Embedding, LayerNorm, Dropout, GELU and Sequential.
#include <optional>

#include "kernels/options.h"
#include "layers/activation.h"
#include "layers/module.h"

namespace hg::nn {

// The sizes are required (constructor arguments); the rest are options, validated by Linear.
//   LinearOptions(768, 3072).bias(false)
struct LinearOptions {
  LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
  HG_OPTION(LinearOptions, int64_t, in_features, 0);
  HG_OPTION(LinearOptions, int64_t, out_features, 0);
  HG_OPTION(LinearOptions, bool, bias, true);
};

// y = x W^T + b with weight [out, in] (PyTorch's layout) and bias [out]. Initialised like PyTorch:
// U(-1/sqrt(in), 1/sqrt(in)) for both.
class Linear : public UnaryModule {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in, int64_t out, bool bias = true) : Linear(LinearOptions(in, out).bias(bias)) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;  // bias undefined without bias
  const LinearOptions options;
};

// y[..., :] = weight[ids[...], :], weight [num, dim] initialised N(0, 1). With padding_idx (negative:
// counted from the end), that row starts at zeros and gets no gradient from this layer (PyTorch's rule).
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;
  Tensor weight;
  const std::optional<int64_t> padding_idx;  // in [0, num_embeddings) once constructed
};

// Normalises the trailing dimensions normalized_shape (PyTorch's nn.LayerNorm): weight ones and bias
// zeros of that shape (none without elementwise_affine; no bias without `bias`, as PyTorch 2.1's).
// LayerNorm(dim) normalises the last dimension.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true) : LayerNorm(Shape{dim}, eps, affine) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;
  const double eps;
  const Shape normalized_shape;
};

// Active only in training mode.
class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return "p=" + repr_float(p) + ", inplace=False"; }
  const double p;
};

class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::Tanh) : approximation(approximation) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximation); }
  std::string extra_repr() const override {
    return approximation == GeluApproximation::Tanh ? "approximate='tanh'" : "approximate='none'";
  }
  const GeluApproximation approximation;
};

class ReLU : public Activation<relu> {};

// Applies its children in order; they are named "0", "1", ...
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> layers);
  Sequential& push_back(std::shared_ptr<UnaryModule> layer);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

}  // namespace hg::nn
