#include "support/op_cases.h"

#include <algorithm>
#include <cmath>

#include "engine/ops.h"
#include "engine/random.h"

namespace hg::testing {

namespace {

// `cases` and an OpCase for every row of unary_op_cases() with an engine op.
std::vector<OpCase> with_unary_op_cases(std::vector<OpCase> cases) {
  for (const UnaryOpCase& c : unary_op_cases()) {
    if (c.fn == nullptr) continue;
    cases.push_back(
        {c.name, {{2, 3}}, c.domain, [fn = c.fn, s = c.scalar](const std::vector<Tensor>& x) { return fn(x[0], s); }});
  }
  return cases;
}

// Index tensors on the device of the op's first input, so a case runs on any device.
Tensor ids(const std::vector<int64_t>& values, const Shape& shape, const Tensor& like) {
  return from_vector(values, shape, i64, like.device());
}

// A bool mask (nonzero values are true) on the device of `like`.
Tensor mask(const std::vector<int32_t>& values, const Shape& shape, const Tensor& like) {
  return ne(from_vector(values, shape, i32, like.device()), 0.0);
}

}  // namespace

std::vector<double> domain_values(const Shape& shape, Domain domain) {
  std::vector<double> v = randn(shape, f64).to_vector<double>();
  for (double& x : v) {
    if (domain == Domain::Positive) x = std::abs(x) + 0.5;
    if (domain == Domain::AwayFromZero) x = (x < 0 ? -1 : 1) * (std::abs(x) + 0.3);
  }
  return v;
}

const std::vector<OpCase>& op_cases() {
  using V = const std::vector<Tensor>&;
  static const std::vector<OpCase> kCases = {
      // ---- elementwise binary, with broadcasting and strided inputs ----
      {"add", {{2, 3}, {2, 3}}, Domain::Any, [](V x) { return x[0] + x[1]; }},
      {"add broadcast", {{2, 1, 3}, {4, 1}}, Domain::Any, [](V x) { return x[0] + x[1]; }},
      {"sub broadcast", {{3}, {2, 3}}, Domain::Any, [](V x) { return x[0] - x[1]; }},
      {"mul broadcast", {{2, 3, 1}, {1, 4}}, Domain::Any, [](V x) { return x[0] * x[1]; }},
      {"div broadcast", {{2, 3}, {3}}, Domain::AwayFromZero, [](V x) { return x[0] / x[1]; }},
      {"mul transposed", {{3, 2}, {2, 3}}, Domain::Any, [](V x) { return x[0].t() * x[1]; }},
      {"add scalar tensor", {{}, {2, 2}}, Domain::Any, [](V x) { return x[0] + x[1]; }},
      {"same tensor twice", {{2, 3}}, Domain::Any, [](V x) { return x[0] * x[0]; }},
      // ---- scalar forms ----
      {"affine", {{2, 3}}, Domain::Any, [](V x) { return 2.5 * x[0] - 1.0; }},
      {"scalar divided by", {{2, 3}}, Domain::AwayFromZero, [](V x) { return 3.0 / x[0]; }},
      {"neg", {{4}}, Domain::Any, [](V x) { return -x[0]; }},
      // ---- unary (every row of unary_op_cases() with an engine op is appended below) ----
      {"exp of strided", {{3, 4}}, Domain::Any, [](V x) { return exp(x[0].t()); }},
      // ---- reductions ----
      {"sum all", {{2, 3, 4}}, Domain::Any, [](V x) { return sum(x[0]); }},
      {"sum dim keepdim", {{2, 3, 4}}, Domain::Any, [](V x) { return sum(x[0], {1}, true); }},
      {"sum two dims", {{2, 3, 4}}, Domain::Any, [](V x) { return sum(x[0], {0, 2}); }},
      {"sum of strided", {{3, 4}}, Domain::Any, [](V x) { return sum(x[0].t(), {1}); }},
      {"mean dims", {{2, 3, 4}}, Domain::Any, [](V x) { return mean(x[0], {-1, 0}); }},
      {"mean all", {{5}}, Domain::Any, [](V x) { return mean(x[0]); }},
      {"max dim", {{3, 4}}, Domain::Any, [](V x) { return max(x[0], 1).first; }},
      {"max dim 0 keepdim", {{3, 4}}, Domain::Any, [](V x) { return max(x[0], 0, true).first; }},
      {"max all", {{2, 5}}, Domain::Any, [](V x) { return max(x[0]); }},
      // ---- matmul ----
      {"matmul 2d", {{3, 4}, {4, 2}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul batched", {{2, 3, 4}, {2, 4, 2}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul batch broadcast", {{2, 1, 3, 4}, {3, 4, 2}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul batched x 2d", {{2, 3, 4}, {4, 5}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul 2d x batched", {{3, 4}, {2, 4, 2}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul transposed operands", {{4, 3}, {2, 4}}, Domain::Any, [](V x) { return matmul(x[0].t(), x[1].t()); }},
      {"matmul vector vector", {{4}, {4}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul vector matrix", {{4}, {4, 3}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul matrix vector", {{3, 4}, {4}}, Domain::Any, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul permuted batch", {{3, 2, 4}, {2, 4, 3}}, Domain::Any,
       [](V x) { return matmul(x[0].permute({1, 0, 2}), x[1]); }},
      {"linear", {{4, 3}, {5, 3}, {5}}, Domain::Any, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear batched", {{2, 3, 4}, {5, 4}, {5}}, Domain::Any, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear without bias", {{3, 4}, {2, 4}}, Domain::Any, [](V x) { return linear(x[0], x[1], Tensor()); }},
      {"linear of strided", {{4, 3}, {5, 4}, {5}}, Domain::Any, [](V x) { return linear(x[0].t(), x[1], x[2]); }},
      // ---- softmax family and losses ----
      {"softmax last", {{3, 5}}, Domain::Any, [](V x) { return softmax(x[0], -1); }},
      {"softmax dim 0", {{3, 4}}, Domain::Any, [](V x) { return softmax(x[0], 0); }},
      {"log_softmax", {{2, 3, 4}}, Domain::Any, [](V x) { return log_softmax(x[0], -1); }},
      {"cross_entropy", {{4, 5}}, Domain::Any, [](V x) { return cross_entropy(x[0], ids({1, 0, 4, 2}, {4}, x[0])); }},
      {"cross_entropy ignore_index", {{4, 5}}, Domain::Any,
       [](V x) { return cross_entropy(x[0], ids({1, -100, 4, -100}, {4}, x[0])); }},
      {"cross_entropy single row", {{6}}, Domain::Any,
       [](V x) { return cross_entropy(x[0], from_vector(std::vector<int32_t>{3}, {}, i32, x[0].device())); }},
      {"layer_norm", {{3, 5}, {5}, {5}}, Domain::Any, [](V x) { return layer_norm(x[0], x[1], x[2]); }},
      {"bias_gelu tanh", {{2, 3, 5}, {5}}, Domain::Any,
       [](V x) { return bias_gelu(x[0], x[1], GeluApproximation::Tanh); }},
      {"bias_gelu erf", {{37, 4}, {4}}, Domain::Any, [](V x) { return bias_gelu(x[0], x[1], GeluApproximation::Erf); }},
      {"attention_qkv D 64", {{2, 5, 3 * 64}}, Domain::Any, [](V x) { return attention_qkv(x[0], 1); }},
      {"attention_qkv 2 heads", {{2, 4, 12}}, Domain::Any, [](V x) { return attention_qkv(x[0], 2); }},
      {"bias_gelu of strided", {{5, 3}, {5}}, Domain::Any, [](V x) { return bias_gelu(x[0].t(), x[1]); }},
      {"add_layer_norm both outputs", {{3, 5}, {3, 5}, {5}, {5}}, Domain::Any,
       [](V x) {
         const AddLayerNorm o = add_layer_norm(x[0], x[1], x[2], x[3]);
         return cat({o.sum, o.normalized}, 0);  // independent upstream gradients for the two outputs
       }},
      {"add_layer_norm normalized only", {{2, 3, 4}, {2, 3, 4}, {4}, {4}}, Domain::Any,
       [](V x) { return add_layer_norm(x[0], x[1], x[2], x[3], 1e-3).normalized; }},
      {"add_layer_norm sum only", {{3, 4}, {3, 4}}, Domain::Any,  // (the parameters would get no gradient)
       [](V x) { return add_layer_norm(x[0], x[1], Tensor(), Tensor()).sum * 1.5; }},
      {"add_layer_norm no affine, strided", {{5, 3}, {3, 5}}, Domain::Any,
       [](V x) {
         const AddLayerNorm o = add_layer_norm(x[0].t(), x[1], Tensor(), Tensor());
         return cat({o.normalized, o.sum}, 1);
       }},
      // ---- recurrence (every output reaches the check with its own upstream gradient) ----
      {"recurrence lstm", {{3, 2, 12}, {12, 3}, {12}, {2, 3}, {2, 3}}, Domain::Any,
       [](V x) {
         const Recurrence r = recurrence(RnnCell::Lstm, x[0], x[1], x[2], x[3], x[4]);
         return cat({r.output.reshape({-1}), r.h_n.reshape({-1}), r.c_n.reshape({-1})}, 0);
       }},
      {"recurrence lstm reverse, zero state", {{4, 2, 8}, {8, 2}}, Domain::Any,
       [](V x) {
         const Recurrence r = recurrence(RnnCell::Lstm, x[0], x[1], Tensor(), Tensor(), Tensor(), true);
         return cat({r.output.reshape({-1}), r.c_n.reshape({-1}) * 2.0}, 0);
       }},
      {"recurrence gru", {{3, 2, 9}, {9, 3}, {9}, {2, 3}}, Domain::Any,
       [](V x) {
         const Recurrence r = recurrence(RnnCell::Gru, x[0], x[1], x[2], x[3]);
         return cat({r.output.reshape({-1}), r.h_n.reshape({-1})}, 0);
       }},
      {"recurrence gru reverse, h_n only", {{3, 1, 6}, {6, 2}, {6}, {1, 2}}, Domain::Any,
       [](V x) { return recurrence(RnnCell::Gru, x[0], x[1], x[2], x[3], Tensor(), true).h_n; }},
      {"recurrence rnn_tanh", {{4, 3, 2}, {2, 2}, {2}, {3, 2}}, Domain::Any,
       [](V x) { return recurrence(RnnCell::RnnTanh, x[0], x[1], x[2], x[3]).output; }},
      {"layer_norm no affine", {{2, 2, 4}}, Domain::Any, [](V x) { return layer_norm(x[0], Tensor(), Tensor()); }},
      {"layer_norm of strided", {{5, 3}, {5}, {5}}, Domain::Any,
       [](V x) { return layer_norm(x[0].t(), x[1], x[2], 1e-3); }},
      {"embedding", {{5, 3}}, Domain::Any, [](V x) { return embedding(x[0], ids({4, 0, 4, 2, 1, 4}, {2, 3}, x[0])); }},
      {"dropout", {{4, 6}}, Domain::Any,
       [](V x) {
         default_generator().set_state({1234, 7});  // the same mask on every evaluation
         return dropout(x[0], 0.3);
       }},
      {"attention causal", {{2, 3, 4}, {2, 3, 4}, {2, 3, 2}}, Domain::Any,
       [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }},
      {"attention causal, fewer queries", {{1, 2, 3}, {1, 4, 3}, {1, 4, 2}}, Domain::Any,
       [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }},
      {"attention full", {{2, 3, 2}, {2, 4, 2}, {2, 4, 3}}, Domain::Any,
       [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }},
      {"attention key-padding mask, Tq != Tk", {{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}}, Domain::Any,
       [](V x) {
         const Tensor keep = mask({1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, {2, 1, 1, 5}, x[0]);
         return scaled_dot_product_attention(x[0], x[1], x[2], keep);
       }},
      {"attention additive mask and causal", {{1, 2, 3, 4}, {1, 2, 4, 4}, {1, 2, 4, 4}, {3, 4}}, Domain::Any,
       [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3], true); }},
      // ---- convolution and pooling (NCHW) ----
      {"conv2d", {{2, 3, 5, 5}, {4, 3, 3, 3}, {4}}, Domain::Any, [](V x) { return conv2d(x[0], x[1], x[2]); }},
      {"conv2d stride padding", {{1, 2, 6, 5}, {3, 2, 3, 2}, {3}}, Domain::Any,
       [](V x) { return conv2d(x[0], x[1], x[2], {2, 1}, {1, 1}); }},
      {"conv2d dilation without bias", {{2, 2, 7, 6}, {2, 2, 2, 3}}, Domain::Any,
       [](V x) { return conv2d(x[0], x[1], Tensor(), {1, 2}, {0, 2}, {2, 1}); }},
      {"conv2d groups", {{1, 4, 4, 3}, {6, 2, 3, 3}, {6}}, Domain::Any,
       [](V x) { return conv2d(x[0], x[1], x[2], {1, 1}, {1, 1}, {1, 1}, 2); }},
      {"conv2d 1x1 of strided", {{3, 4, 2, 3}, {5, 3, 1, 1}, {5}}, Domain::Any,
       [](V x) { return conv2d(x[0].permute({2, 3, 0, 1}), x[1], x[2]); }},
      {"conv1d", {{2, 3, 7}, {4, 3, 3}, {4}}, Domain::Any, [](V x) { return conv1d(x[0], x[1], x[2], 2, 1); }},
      {"conv_transpose2d", {{2, 3, 3, 2}, {3, 2, 3, 3}, {2}}, Domain::Any,
       [](V x) { return conv_transpose2d(x[0], x[1], x[2], {2, 2}, {1, 1}, {1, 1}); }},
      {"conv_transpose2d groups dilation of strided", {{2, 4, 3, 3}, {4, 1, 2, 2}}, Domain::Any,
       [](V x) {
         return conv_transpose2d(x[0].permute({0, 1, 3, 2}), x[1], Tensor(), {1, 2}, {0, 1}, {0, 1}, 2, {2, 1});
       }},
      {"conv_transpose2d output_padding past the stride", {{1, 2, 3, 3}, {2, 2, 2, 3}, {2}}, Domain::Any,
       [](V x) { return conv_transpose2d(x[0], x[1], x[2], {1, 2}, {1, 2}, {1, 2}, 1, {2, 3}); }},
      {"conv_transpose1d", {{1, 2, 4}, {2, 3, 2}, {3}}, Domain::Any,
       [](V x) { return conv_transpose1d(x[0], x[1], x[2], 3, 0, 1); }},
      {"interpolate nearest", {{2, 2, 3, 2}}, Domain::Any,
       [](V x) { return interpolate(x[0], InterpolateOptions().set_size({5, 4})); }},
      {"interpolate bilinear", {{1, 2, 3, 4}}, Domain::Any,
       [](V x) {
         return interpolate(x[0], InterpolateOptions().set_size({5, 3}).set_mode(InterpolateMode::Bilinear));
       }},
      {"interpolate bilinear align_corners of strided", {{2, 3, 2, 2}}, Domain::Any,
       [](V x) {
         return interpolate(x[0].permute({3, 2, 1, 0}), InterpolateOptions()
                                                            .set_scale_factor({2.0, 1.5})
                                                            .set_mode(InterpolateMode::Bilinear)
                                                            .set_align_corners(true));
       }},
      {"interpolate linear", {{2, 2, 5}}, Domain::Any,
       [](V x) { return interpolate(x[0], InterpolateOptions().set_size({8}).set_mode(InterpolateMode::Linear)); }},
      {"adaptive_avg_pool2d", {{2, 2, 5, 7}}, Domain::Any, [](V x) { return adaptive_avg_pool2d(x[0], {3, 2}); }},
      {"adaptive_avg_pool1d", {{2, 3, 5}}, Domain::Any, [](V x) { return adaptive_avg_pool1d(x[0], 3); }},
      {"pad reflect", {{2, 3, 4}}, Domain::Any, [](V x) { return pad(x[0], {2, 1, 1, 2}, PadMode::Reflect); }},
      {"pad replicate", {{2, 3, 2}}, Domain::Any, [](V x) { return pad(x[0], {3, 1, 0, 2}, PadMode::Replicate); }},
      {"max_pool2d", {{2, 3, 4, 4}}, Domain::Any, [](V x) { return max_pool2d(x[0], {2, 2}); }},
      {"max_pool2d overlapping padded", {{1, 2, 5, 6}}, Domain::Any,
       [](V x) { return max_pool2d(x[0], {3, 3}, {2, 2}, {1, 1}); }},
      {"avg_pool2d", {{2, 2, 5, 5}}, Domain::Any, [](V x) { return avg_pool2d(x[0], {3, 2}, {2, 1}, {1, 1}); }},
      {"conv relu pool", {{2, 1, 6, 6}, {3, 1, 3, 3}, {3}}, Domain::Any,
       [](V x) { return max_pool2d(relu(conv2d(x[0], x[1], x[2], {1, 1}, {1, 1})), {2, 2}); }},
      // ---- shape ----
      {"view", {{2, 6}}, Domain::Any, [](V x) { return x[0].view({3, 4}) * 2.0; }},
      {"reshape of strided", {{3, 4}}, Domain::Any, [](V x) { return x[0].t().reshape({-1}) * 2.0; }},
      {"transpose", {{2, 3, 4}}, Domain::Any, [](V x) { return exp(x[0].transpose(0, 2)); }},
      {"permute", {{2, 3, 4}}, Domain::Any, [](V x) { return exp(x[0].permute({2, 0, 1})); }},
      {"narrow", {{4, 5}}, Domain::Any, [](V x) { return exp(x[0].narrow(1, 1, 3)); }},
      {"select", {{4, 5}}, Domain::Any, [](V x) { return exp(x[0].select(0, -2)); }},
      {"unsqueeze squeeze", {{3, 4}}, Domain::Any, [](V x) { return x[0].unsqueeze(1).squeeze(1) * 3.0; }},
      {"expand", {{3, 1}}, Domain::Any, [](V x) { return x[0].expand({2, 3, 4}) * x[0].expand({2, 3, 4}); }},
      {"contiguous", {{3, 4}}, Domain::Any, [](V x) { return x[0].t().contiguous() * 2.0; }},
      {"cat", {{2, 3}, {2, 1}, {2, 2}}, Domain::Any, [](V x) { return exp(cat({x[0], x[1], x[2]}, 1)); }},
      {"clone", {{2, 2}}, Domain::Any, [](V x) { return x[0].clone() * x[0]; }},
      // ---- maximum, minimum, pow with a tensor exponent, clamp ----
      {"maximum broadcast", {{2, 3}, {3}}, Domain::Any, [](V x) { return maximum(x[0], x[1]); }},
      {"minimum broadcast", {{2, 1}, {2, 3}}, Domain::Any, [](V x) { return minimum(x[0], x[1]); }},
      {"pow tensor exponent", {{2, 3}, {2, 3}}, Domain::Positive, [](V x) { return pow(x[0], x[1]); }},
      {"pow tensor exponent broadcast", {{3}, {2, 1}}, Domain::Positive, [](V x) { return pow(x[0], x[1]); }},
      {"clamp scalars", {{3, 4}}, Domain::Any, [](V x) { return clamp(x[0], -0.5, 0.6); }},
      {"clamp max only", {{3, 4}}, Domain::Any, [](V x) { return clamp(x[0], std::nullopt, 0.2); }},
      {"clamp tensor bounds", {{3, 4}, {4}, {3, 1}}, Domain::Any,
       [](V x) { return clamp(x[0], x[1], x[2] + 1.0); }},
      {"softplus beta 2", {{3, 4}}, Domain::Any, [](V x) { return softplus(x[0], 2.0, 3.0); }},
      // ---- statistics and shapes composed from other ops ----
      {"min dim", {{3, 4}}, Domain::Any, [](V x) { return min(x[0], 1).first; }},
      {"var dims", {{3, 4, 2}}, Domain::Any, [](V x) { return var(x[0], {0, 2}); }},
      {"std keepdim", {{3, 4}}, Domain::Any, [](V x) { return std(x[0], {1}, 0.0, true); }},
      {"logsumexp", {{3, 5}}, Domain::Any, [](V x) { return logsumexp(x[0], {1}); }},
      {"stack", {{2, 3}, {2, 3}}, Domain::Any, [](V x) { return stack({x[0], x[1] * 2.0}, 1); }},
      {"chunk", {{5, 2}}, Domain::Any, [](V x) { return chunk(x[0], 2, 0)[1] * 3.0; }},
      {"repeat", {{2, 3}}, Domain::Any, [](V x) { return repeat(x[0], {2, 1, 2}) * repeat(x[0], {2, 1, 2}); }},
      {"pad", {{2, 3}}, Domain::Any, [](V x) { return exp(pad(x[0], {1, 2, -1, 0}, 0.5)); }},
      {"tril", {{3, 4}}, Domain::Any, [](V x) { return exp(tril(x[0], 1)); }},
      // ---- indexing along a dimension, the running sum ----
      {"gather", {{3, 4}}, Domain::Any, [](V x) { return gather(x[0], 1, ids({3, 0, 0, 2, 1, 1}, {2, 3}, x[0])); }},
      {"gather dim 0 transposed", {{4, 3}}, Domain::Any,
       [](V x) { return gather(x[0].t(), 0, ids({2, 0, 1, 2, 2, 0}, {2, 3}, x[0])); }},
      {"scatter_add", {{3, 4}, {2, 5}}, Domain::Any,
       [](V x) { return scatter_add(x[0], 1, ids({3, 0, 3, 1, 2, 2, 0, 1}, {2, 4}, x[0]), x[1]); }},
      {"scatter_add corner", {{4, 3}, {2, 2}}, Domain::Any,
       [](V x) { return scatter_add(x[0], 0, ids({3, 0, 3, 3}, {2, 2}, x[0]), x[1]) * x[0]; }},
      {"index_select", {{4, 3}}, Domain::Any, [](V x) { return index_select(x[0], 0, ids({3, 1, 3}, {3}, x[0])); }},
      {"index_select last dim", {{2, 3, 4}}, Domain::Any,
       [](V x) { return index_select(x[0], -1, ids({0, 3, 3, 2, 0}, {5}, x[0])); }},
      {"index_add", {{4, 3}, {5, 3}}, Domain::Any,
       [](V x) { return index_add(x[0], 0, ids({1, 3, 1, 0, 1}, {5}, x[0]), x[1], 0.5); }},
      {"index_add dim 1", {{2, 3, 2}, {2, 4, 2}}, Domain::Any,
       [](V x) { return index_add(x[0], 1, ids({2, 2, 0, 1}, {4}, x[0]), x[1]) * x[0]; }},
      {"flip", {{2, 3, 4}}, Domain::Any, [](V x) { return flip(x[0], {0, 2}) * x[0]; }},
      {"cumsum", {{3, 4}}, Domain::Any, [](V x) { return cumsum(x[0], 1) * x[0]; }},
      {"topk", {{3, 5}}, Domain::Any, [](V x) { return topk(x[0], 2, 1).first; }},
      {"topk smallest of strided", {{4, 3}}, Domain::Any, [](V x) { return topk(x[0].t(), 3, 0, false).first; }},
      {"cumsum dim 0", {{5, 3}}, Domain::Any, [](V x) { return cumsum(x[0].t(), 1); }},
      {"layer_norm two dims", {{2, 3, 4}, {3, 4}, {3, 4}}, Domain::Any,
       [](V x) { return layer_norm(x[0], {3, 4}, x[1], x[2]); }},
      // ---- normalisations (training-mode batch_norm: the output does not read the running stats it updates) ----
      {"rms_norm", {{3, 5}, {5}}, Domain::Any, [](V x) { return rms_norm(x[0], {5}, x[1], 1e-5); }},
      {"rms_norm two dims no weight", {{2, 3, 4}}, Domain::Any, [](V x) { return rms_norm(x[0], {3, 4}); }},
      {"group_norm", {{2, 4, 3}, {4}, {4}}, Domain::Any, [](V x) { return group_norm(x[0], 2, x[1], x[2]); }},
      {"group_norm one group 4d", {{2, 3, 2, 2}}, Domain::Any, [](V x) { return group_norm(x[0], 1); }},
      {"batch_norm train", {{3, 2, 4}, {2}, {2}}, Domain::Any,
       [](V x) {
         const Tensor rm = zeros({2}, accumulate_dtype(x[0].dtype()), x[0].device());
         const Tensor rv = ones({2}, accumulate_dtype(x[0].dtype()), x[0].device());
         return batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5);
       }},
      {"batch_norm train 2d", {{5, 3}}, Domain::Any,
       [](V x) { return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true); }},
      {"batch_norm eval", {{2, 3, 2}, {3}, {3}}, Domain::Any,
       [](V x) {
         const Tensor rm = full({3}, 0.25, accumulate_dtype(x[0].dtype()), x[0].device());
         const Tensor rv = full({3}, 1.5, accumulate_dtype(x[0].dtype()), x[0].device());
         return batch_norm(x[0], rm, rv, x[1], x[2], false);
       }},
      // ---- masks ----
      {"where", {{2, 3}, {2, 3}}, Domain::Any,
       [](V x) { return where(mask({1, 0, 0, 1, 1, 0}, {2, 3}, x[0]), x[0], x[1]); }},
      {"where broadcast", {{3}, {2, 1}}, Domain::Any,
       [](V x) { return where(mask({1, 0}, {2, 1}, x[0]), x[0], x[1]); }},
      {"where of comparison", {{3, 4}}, Domain::AwayFromZero, [](V x) { return where(x[0] > 0.0, x[0] * 2.0, -x[0]); }},
      {"masked_fill", {{2, 3}}, Domain::Any,
       [](V x) { return masked_fill(x[0].t(), mask({0, 1, 0}, {3, 1}, x[0]), -4.0) * x[0].t(); }},
      // ---- losses (torch.nn.functional) ----
      {"mse_loss", {{3, 4}, {3, 4}}, Domain::Any, [](V x) { return mse_loss(x[0], x[1]); }},
      {"mse_loss sum", {{5}, {5}}, Domain::Any, [](V x) { return mse_loss(x[0], x[1], Reduction::Sum); }},
      {"l1_loss none", {{2, 3}, {2, 3}}, Domain::Any, [](V x) { return l1_loss(x[0], x[1], Reduction::None); }},
      {"smooth_l1_loss", {{3, 4}, {3, 4}}, Domain::Any,
       [](V x) { return smooth_l1_loss(x[0], x[1], Reduction::Mean, 0.7); }},
      {"huber_loss", {{3, 4}, {3, 4}}, Domain::Any, [](V x) { return huber_loss(x[0], x[1], Reduction::Sum, 0.6); }},
      {"binary_cross_entropy", {{3, 4}, {3, 4}, {4}}, Domain::Any,
       [](V x) { return binary_cross_entropy(sigmoid(x[0]), sigmoid(x[1]), x[2]); }},
      {"binary_cross_entropy_with_logits", {{3, 4}, {3, 4}, {3, 4}, {4}}, Domain::Any,
       [](V x) { return binary_cross_entropy_with_logits(x[0], sigmoid(x[1]), x[2], exp(x[3])); }},
      {"nll_loss weighted", {{4, 5}, {5}}, Domain::Positive,
       [](V x) { return nll_loss(x[0], ids({1, 0, 4, 1}, {4}, x[0]), x[1]); }},
      {"nll_loss ignore_index none", {{4, 3}}, Domain::Any,
       [](V x) { return nll_loss(x[0], ids({2, -100, 0, 1}, {4}, x[0]), Tensor(), -100, Reduction::None); }},
      {"nll_loss spatial", {{2, 3, 2, 2}}, Domain::Any,
       [](V x) { return nll_loss(x[0], ids({0, 2, 1, 1, 2, 0, 0, 1}, {2, 2, 2}, x[0])); }},
      {"cross_entropy label smoothing weighted", {{4, 5}, {5}}, Domain::Positive,
       [](V x) {
         return cross_entropy(x[0], ids({1, 3, -100, 0}, {4}, x[0]),
                              CrossEntropyOptions().set_weight(x[1]).set_label_smoothing(0.2));
       }},
      {"cross_entropy probabilities", {{3, 5}, {3, 5}}, Domain::Any,
       [](V x) {
         return cross_entropy(x[0], softmax(x[1], 1), CrossEntropyOptions().set_label_smoothing(0.1));
       }},
      {"cross_entropy spatial sum", {{2, 3, 2, 2}}, Domain::Any,
       [](V x) {
         return cross_entropy(x[0], ids({0, 2, 1, 1, 2, 0, 0, 1}, {2, 2, 2}, x[0]),
                              CrossEntropyOptions().set_reduction(Reduction::Sum));
       }},
      {"kl_div", {{3, 4}, {3, 4}}, Domain::Any,
       [](V x) { return kl_div(log_softmax(x[0], 1), softmax(x[1], 1), Reduction::BatchMean); }},
      {"kl_div log_target", {{3, 4}, {3, 4}}, Domain::Any,
       [](V x) { return kl_div(log_softmax(x[0], 1), log_softmax(x[1], 1), Reduction::Sum, true); }},
      {"cosine_similarity", {{3, 5}, {3, 5}}, Domain::Any, [](V x) { return cosine_similarity(x[0], x[1]); }},
      {"triplet_margin_loss swap", {{4, 3}, {4, 3}, {4, 3}}, Domain::Any,
       [](V x) { return triplet_margin_loss(x[0], x[1], x[2], 3.0, 2.0, 1e-6, true); }},
      {"triplet_margin_loss p 1", {{4, 3}, {4, 3}, {4, 3}}, Domain::Any,
       [](V x) { return triplet_margin_loss(x[0], x[1], x[2], 3.0, 1.0, 1e-6, false, Reduction::Sum); }},
      // ---- composition: a tiny MLP layer with a loss ----
      {"mlp", {{4, 3}, {3, 5}, {5}}, Domain::Any,
       [](V x) { return cross_entropy(gelu(matmul(x[0], x[1]) + x[2]), ids({0, 4, 2, 1}, {4}, x[0])); }},
  };
  static const std::vector<OpCase> kWithUnary = with_unary_op_cases(kCases);
  return kWithUnary;
}

const std::vector<UnaryOpCase>& unary_op_cases() {
  using kernels::UnaryOp;
  constexpr double kPi = 3.141592653589793;
  using T = const Tensor&;
  static const std::vector<UnaryOpCase> kCases = {
      {UnaryOp::Neg, "neg", -3, 3, 0, [](double x, double) { return -x; }, [](double, double) { return -1.0; },
       Domain::Any, nullptr},  // the engine's neg is affine (x * -1)
      {UnaryOp::Exp, "exp", -3, 3, 0, [](double x, double) { return std::exp(x); },
       [](double x, double) { return std::exp(x); }, Domain::Any, [](T x, double) { return exp(x); }},
      {UnaryOp::Log, "log", 0.1, 5, 0, [](double x, double) { return std::log(x); },
       [](double x, double) { return 1 / x; }, Domain::Positive, [](T x, double) { return log(x); }},
      {UnaryOp::Sqrt, "sqrt", 0.1, 5, 0, [](double x, double) { return std::sqrt(x); },
       [](double x, double) { return 0.5 / std::sqrt(x); }, Domain::Positive, [](T x, double) { return sqrt(x); }},
      {UnaryOp::Tanh, "tanh", -3, 3, 0, [](double x, double) { return std::tanh(x); },
       [](double x, double) { return 1 / (std::cosh(x) * std::cosh(x)); }, Domain::Any,
       [](T x, double) { return tanh(x); }},
      {UnaryOp::Sigmoid, "sigmoid", -6, 6, 0, [](double x, double) { return 1 / (1 + std::exp(-x)); },
       [](double x, double) { return std::exp(-x) / ((1 + std::exp(-x)) * (1 + std::exp(-x))); }, Domain::Any,
       [](T x, double) { return sigmoid(x); }},
      {UnaryOp::Relu, "relu", -3, 3, 0, [](double x, double) { return std::max(x, 0.0); },
       [](double x, double) { return x > 0 ? 1.0 : 0.0; }, Domain::AwayFromZero, [](T x, double) { return relu(x); }},
      {UnaryOp::GeluTanh, "gelu tanh", -4, 4, 0,
       [](double x, double) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x))); },
       [](double x, double) {
         const double k = std::sqrt(2 / kPi), u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
         return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
       },
       Domain::Any, [](T x, double) { return gelu(x, GeluApproximation::Tanh); }},
      {UnaryOp::GeluErf, "gelu erf", -4, 4, 0,
       [](double x, double) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); },
       [](double x, double) {
         return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-x * x / 2) / std::sqrt(2 * kPi);
       },
       Domain::Any, [](T x, double) { return gelu(x, GeluApproximation::Erf); }},
      {UnaryOp::Silu, "silu", -5, 5, 0, [](double x, double) { return x / (1 + std::exp(-x)); },
       [](double x, double) {
         const double sg = 1 / (1 + std::exp(-x));
         return sg + x * sg * (1 - sg);
       },
       Domain::Any, [](T x, double) { return silu(x); }},
      {UnaryOp::Pow, "pow 2.5", 0.2, 3, 2.5, [](double x, double s) { return std::pow(x, s); },
       [](double x, double s) { return s * std::pow(x, s - 1); }, Domain::Positive,
       [](T x, double s) { return pow(x, s); }},
      {UnaryOp::Pow, "pow -1.5", 0.5, 3, -1.5, [](double x, double s) { return std::pow(x, s); },
       [](double x, double s) { return s * std::pow(x, s - 1); }, Domain::Positive,
       [](T x, double s) { return pow(x, s); }},
      {UnaryOp::Pow, "pow 3", -3, 3, 3, [](double x, double s) { return std::pow(x, s); },
       [](double x, double s) { return s * std::pow(x, s - 1); }, Domain::Any, [](T x, double s) { return pow(x, s); }},
      {UnaryOp::Pow, "pow 0.5", 0.2, 3, 0.5, [](double x, double s) { return std::pow(x, s); },
       [](double x, double s) { return s * std::pow(x, s - 1); }, Domain::Positive,
       [](T x, double s) { return pow(x, s); }},
      {UnaryOp::Abs, "abs", -3, 3, 0, [](double x, double) { return std::fabs(x); },
       [](double x, double) { return x > 0 ? 1.0 : -1.0; }, Domain::AwayFromZero, [](T x, double) { return abs(x); }},
      {UnaryOp::Sin, "sin", -3, 3, 0, [](double x, double) { return std::sin(x); },
       [](double x, double) { return std::cos(x); }, Domain::Any, [](T x, double) { return sin(x); }},
      {UnaryOp::Cos, "cos", -3, 3, 0, [](double x, double) { return std::cos(x); },
       [](double x, double) { return -std::sin(x); }, Domain::Any, [](T x, double) { return cos(x); }},
      {UnaryOp::Rsqrt, "rsqrt", 0.2, 5, 0, [](double x, double) { return 1 / std::sqrt(x); },
       [](double x, double) { return -0.5 / (x * std::sqrt(x)); }, Domain::Positive,
       [](T x, double) { return rsqrt(x); }},
      {UnaryOp::Erf, "erf", -3, 3, 0, [](double x, double) { return std::erf(x); },
       [](double x, double) { return 2 / std::sqrt(kPi) * std::exp(-x * x); }, Domain::Any,
       [](T x, double) { return erf(x); }},
      {UnaryOp::Sign, "sign", -3, 3, 0, [](double x, double) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); },
       [](double, double) { return 0.0; }, Domain::AwayFromZero, [](T x, double) { return sign(x); }},
      {UnaryOp::Floor, "floor", -3, 3, 0, [](double x, double) { return std::floor(x); },
       [](double, double) { return 0.0; }, Domain::Any, [](T x, double) { return floor(x); }},
      {UnaryOp::LeakyRelu, "leaky_relu 0.1", -3, 3, 0.1, [](double x, double s) { return x > 0 ? x : s * x; },
       [](double x, double s) { return x > 0 ? 1.0 : s; }, Domain::AwayFromZero,
       [](T x, double s) { return leaky_relu(x, s); }},
      {UnaryOp::Elu, "elu 0.7", -3, 3, 0.7, [](double x, double s) { return x > 0 ? x : s * (std::exp(x) - 1); },
       [](double x, double s) { return x > 0 ? 1.0 : s * std::exp(x); }, Domain::AwayFromZero,
       [](T x, double s) { return elu(x, s); }},
      {UnaryOp::Softplus, "softplus threshold 2", -5, 5, 2,
       [](double x, double s) { return x > s ? x : std::log(1 + std::exp(x)); },
       [](double x, double s) { return x > s ? 1.0 : 1 / (1 + std::exp(-x)); }, Domain::Any,
       [](T x, double s) { return softplus(x, 1.0, s); }},
      {UnaryOp::LogSigmoid, "log_sigmoid", -6, 6, 0, [](double x, double) { return -std::log(1 + std::exp(-x)); },
       [](double x, double) { return 1 / (1 + std::exp(x)); }, Domain::Any, [](T x, double) { return log_sigmoid(x); }},
      {UnaryOp::ClampMin, "clamp_min 0.3", -3, 3, 0.3, [](double x, double s) { return std::max(x, s); },
       [](double x, double s) { return x >= s ? 1.0 : 0.0; }, Domain::Any, [](T x, double s) { return clamp_min(x, s); }},
      {UnaryOp::ClampMax, "clamp_max 0.3", -3, 3, 0.3, [](double x, double s) { return std::min(x, s); },
       [](double x, double s) { return x <= s ? 1.0 : 0.0; }, Domain::Any, [](T x, double s) { return clamp_max(x, s); }},
  };
  return kCases;
}

const std::vector<BinaryOpCase>& binary_op_cases() {
  using kernels::BinaryOp;
  static const std::vector<BinaryOpCase> kCases = {
      {BinaryOp::Add, [](double a, double b) { return a + b; }},
      {BinaryOp::Sub, [](double a, double b) { return a - b; }},
      {BinaryOp::Mul, [](double a, double b) { return a * b; }},
      {BinaryOp::Div, [](double a, double b) { return a / b; }},
      {BinaryOp::Maximum, [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }},
      {BinaryOp::Minimum, [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }},
      {BinaryOp::Pow, [](double a, double b) { return std::pow(a, b); }},
  };
  return kCases;
}

}  // namespace hg::testing
