#include "layers/basic.h"

#include <algorithm>
#include <cmath>

#include "layers/init.h"

namespace hg::nn {

Linear::Linear(const LinearOptions& opts) : options(opts) {
  HG_CHECK(opts.in_features() > 0 && opts.out_features() > 0,
           "[Linear] expected positive sizes, got in_features = ", opts.in_features(),
           ", out_features = ", opts.out_features());
  const double bound = 1.0 / std::sqrt(double(opts.in_features()));
  weight = register_parameter("weight", empty({opts.out_features(), opts.in_features()}));
  init::uniform_(weight, -bound, bound);
  if (opts.bias()) {
    bias = register_parameter("bias", empty({opts.out_features()}));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) {
  ModuleScope scope(*this);
  HG_CHECK(x.dim() >= 1 && x.size(-1) == options.in_features(), "[Linear] input ", x.describe(),
           " does not match in_features = ", options.in_features(), "; expected [..., ", options.in_features(), "]");
  return linear(x, weight, bias);
}

namespace {
std::optional<int64_t> padding_row(std::optional<int64_t> padding_idx, int64_t num_embeddings) {
  if (!padding_idx) return std::nullopt;
  HG_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings, "[Embedding] padding_idx ", *padding_idx,
           " is outside [-", num_embeddings, ", ", num_embeddings, ")");
  return *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
}
}  // namespace

Embedding::Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding)
    : padding_idx(padding_row(padding, num_embeddings)) {
  HG_CHECK(num_embeddings > 0 && dim > 0, "[Embedding] expected positive sizes, got num_embeddings = ",
           num_embeddings, ", dim = ", dim);
  weight = register_parameter("weight", empty({num_embeddings, dim}));
  init::normal_(weight, 0.0, 1.0);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.narrow(0, *padding_idx, 1).fill_(0.0);
  }
}

Tensor Embedding::forward(const Tensor& ids) {
  ModuleScope scope(*this);
  if (!padding_idx) return embedding(weight, ids);
  // The padding positions read the same row through a detached weight, so no gradient reaches it.
  const Tensor is_padding = eq(ids, double(*padding_idx)).unsqueeze(-1);
  return where(is_padding, embedding(weight.detach(), ids), embedding(weight, ids));
}

LayerNorm::LayerNorm(Shape shape, double eps_, bool elementwise_affine, bool with_bias)
    : eps(eps_), normalized_shape(std::move(shape)) {
  HG_CHECK(!normalized_shape.empty() && std::all_of(normalized_shape.begin(), normalized_shape.end(),
                                                    [](int64_t d) { return d > 0; }),
           "[LayerNorm] expected a normalized_shape of positive sizes, got ", shape_str(normalized_shape));
  HG_CHECK(eps_ > 0, "[LayerNorm] expected eps > 0, got ", eps_);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    if (with_bias) bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  ModuleScope scope(*this);
  if (normalized_shape.size() == 1) return layer_norm(x, weight, bias, eps);  // the last dimension's kernels
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

Dropout::Dropout(double p_) : p(p_) {
  HG_CHECK(p_ >= 0.0 && p_ < 1.0, "[Dropout] probability ", p_, " is outside [0, 1)");
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Linear::extra_repr() const {
  return detail::concat("in_features=", options.in_features(), ", out_features=", options.out_features(),
                        ", bias=", repr_bool(options.bias()));
}

std::string Embedding::extra_repr() const {
  return detail::concat(weight.size(0), ", ", weight.size(1)) +
         (padding_idx ? ", padding_idx=" + std::to_string(*padding_idx) : "");
}

std::string LayerNorm::extra_repr() const {
  return tuple_repr(normalized_shape) + ", eps=" + repr_float(eps) +
         ", elementwise_affine=" + repr_bool(weight.defined());
}

Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> layers) {
  for (auto& layer : layers) push_back(std::move(layer));
}

Sequential& Sequential::push_back(std::shared_ptr<UnaryModule> layer) {
  HG_CHECK(layer != nullptr, "[Sequential] cannot add a null layer");
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  ModuleScope scope(*this);
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace hg::nn
