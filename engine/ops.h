#pragma once
// The differentiable ops of halfgrad. Each one checks its inputs (throwing hg::Error that names the
// op, the shapes/dtypes/devices it got and what it expected), runs the kernel for the tensors'
// device, and records its backward (written next to its forward in engine/ops/<area>.cpp; the
// elementwise ops' derivatives are their rows in kernels/unary_math.h and kernels/binary_math.h).
// Adding an op: docs/adding_an_op.md.
//
// Binary ops need equal dtypes and devices and broadcast shapes NumPy-style.
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "kernels/rnn_cell.h"

namespace hg {

// ---- elementwise: engine/ops/elementwise.cpp ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// y = alpha * x + beta (the scalar forms of + - * /).
Tensor affine(const Tensor& x, double alpha, double beta);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximation { Tanh, Erf };
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::Tanh);
Tensor silu(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor erf(const Tensor& x);
// sign and floor: their gradient is zero (as PyTorch's). sign(NaN) = 0.
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
// x > 0 ? x : negative_slope x
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// x > 0 ? x : alpha (exp(x) - 1)
Tensor elu(const Tensor& x, double alpha = 1.0);
// log(1 + exp(beta x)) / beta, or x itself where beta x > threshold (PyTorch's softplus). beta = 1
// is one pass; another beta scales before and after it (three passes).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
// log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), finite for every finite x.
Tensor log_sigmoid(const Tensor& x);
// x ^ exponent elementwise, with broadcasting; gradients to both (PyTorch's: the base's is 0 where the
// exponent is 0, the exponent's is 0 where the base is 0 and the exponent >= 0).
Tensor pow(const Tensor& x, const Tensor& exponent);
// Elementwise maximum / minimum with broadcasting; NaN in either operand gives NaN. The gradient goes
// to the larger (smaller) operand; at a tie each gets half (PyTorch's rule).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// min(max(x, min), max) with either bound optional (not both absent): the gradient passes where
// min <= x <= max; NaN stays NaN. Scalar bounds are one pass per bound (clamp_min, clamp_max);
// tensor bounds (undefined: absent) broadcast against x and receive gradients where they are chosen.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);
Tensor clamp_min(const Tensor& x, double min);
Tensor clamp_max(const Tensor& x, double max);
// gelu(x + bias) for x [..., N], bias [N]: the MLP's activation after a GEMM without its bias
// (engine/ops/bias_gelu.cpp). One pass forward; backward gives dx and the bias gradient in one pass.
Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApproximation approximation = GeluApproximation::Tanh);
// gelu(linear(x, weight, bias)), the MLP's first layer and its activation, fused the way the device
// runs it fastest (engine/ops/bias_gelu.cpp): on the CPU the GEMM without its bias, then bias_gelu (one
// pass each way); on CUDA cuBLASLt's bias epilogue, then the GELU kernel. The same values either way.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   GeluApproximation approximation = GeluApproximation::Tanh);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
Tensor operator/(double s, const Tensor& a);

// ---- comparisons, logic and masks: engine/ops/compare.cpp ----
// Comparisons give bool (b8) tensors, with broadcasting. Both operands have one dtype (any: floating,
// i32, i64, u8, bool) and device; a scalar compares in the tensor's dtype when it is floating or the
// scalar is a whole number it holds, else both in f64 (PyTorch promotes to f32 there; f64 is exact for
// every i32, u8 and bool). No gradient flows through them.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
// Any dtype, nonzero (and NaN) is true; bool results, with broadcasting. Operands of different dtypes
// are each cast to bool first.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
Tensor operator&(const Tensor& a, const Tensor& b);  // bool operands: logical_and
Tensor operator|(const Tensor& a, const Tensor& b);  // bool operands: logical_or
Tensor operator^(const Tensor& a, const Tensor& b);  // bool operands: logical_xor
// Whether any / all elements are nonzero, over `dims` (empty: all); bool results. Over no elements:
// any is false, all is true.
Tensor any(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
// cond ? a : b elementwise, cond bool, the three broadcast together; a and b share dtype and device.
// Gradients: where(cond, g, 0) to a, where(cond, 0, g) to b (summed to their shapes). A NaN in the
// operand not chosen does not reach the output or the gradient.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with `value` where mask (bool, broadcast to x's shape) is true; the gradient is zero there.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// The shape a and b broadcast to; throws naming both shapes when they don't.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums `grad` down to `shape` (the backward of broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);

// ---- reductions: engine/ops/reduce.cpp ----
// Over `dims` (empty: all dimensions). Sums accumulate in fp32 (f64 for f64).
Tensor sum(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
// Maximum over one dimension: (values, indices i64). The gradient flows to the first maximum.
std::pair<Tensor, Tensor> max(const Tensor& x, int dim, bool keepdim = false);
// Maximum of all elements (gradient to the first maximum).
Tensor max(const Tensor& x);

// ---- statistics over dimensions, composed from the reductions above: engine/ops/statistics.cpp ----
// Minimum over one dimension: (values, indices i64), the first minimum; NaN is the minimum (propagates).
std::pair<Tensor, Tensor> min(const Tensor& x, int dim, bool keepdim = false);
// Minimum of all elements.
Tensor min(const Tensor& x);
// The index (i64) of the first maximum / minimum along dim; no gradient.
Tensor argmax(const Tensor& x, int dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int dim, bool keepdim = false);
// sum((x - mean)^2) / (N - correction) over `dims` (empty: all); correction 1 is the unbiased estimate.
// N - correction <= 0 gives inf or NaN, as PyTorch.
Tensor var(const Tensor& x, const std::vector<int>& dims = {}, double correction = 1.0, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int>& dims = {}, double correction = 1.0, bool keepdim = false);
// log(sum(exp(x))) over `dims` (empty: all), shifted by the maximum (finite for any finite x; -inf
// where every element is -inf). The gradient is softmax(x) over the reduced elements.
Tensor logsumexp(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);

// ---- indexing along one dimension, and the running sum: engine/ops/indexing.cpp ----
// Indices are i32 or i64. An index outside its dimension is an hg::Error naming the op, the flat
// position in the index and the bound; on CUDA it is raised at the next host read (as embedding).
// For dim 0: y[i][j][k] = x[index[i][j][k]][j][k]; y has index's shape, and index has x's rank with
// sizes at most x's beyond dim. Any dtype; floating x gets its gradient by a scatter_add.
Tensor gather(const Tensor& x, int dim, const Tensor& index);
// self with src[i][j][k] added at [index[i][j][k]][j][k] (for dim 0): PyTorch's out-of-place
// Tensor.scatter_add. index has self's rank, sizes at most src's, and beyond dim at most self's.
// Sums run in fp32 (f64 for f64) in increasing source position: the same bits on every run.
Tensor scatter_add(const Tensor& self, int dim, const Tensor& index, const Tensor& src);
// The slices index[0], index[1], ... of x along dim (index 1-D). Any dtype.
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
// self with alpha * source's slice i added to slice index[i] along dim (out-of-place Tensor.index_add);
// source is self's shape with dimension dim of index's length. Deterministic, as scatter_add.
Tensor index_add(const Tensor& self, int dim, const Tensor& index, const Tensor& source, double alpha = 1.0);
// x reversed along each of `dims` (a copy). Any dtype.
Tensor flip(const Tensor& x, const std::vector<int>& dims);
// The running sum along dim, kept in fp32 (f64 for f64); floating x only (PyTorch also sums integers
// into i64). The gradient is the reversed running sum of the gradient.
Tensor cumsum(const Tensor& x, int dim);

// The k largest (or smallest) elements along dim, as (values, indices i64), in order: descending for
// largest, ascending otherwise, ties by increasing index; NaN counts as larger than any number (as
// PyTorch). sorted = false is accepted and gives the same sorted order (PyTorch leaves it unspecified).
// 0 <= k <= size(dim). The gradient scatters into the chosen positions (engine/ops/topk.cpp).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int dim = -1, bool largest = true, bool sorted = true);

// ---- linear algebra: engine/ops/matmul.cpp ----
// [.., m, k] @ [.., k, n] with broadcasting batch dimensions; 1-D operands as in NumPy.
Tensor matmul(const Tensor& a, const Tensor& b);

// y = x W^T + b for x [..., in], weight [out, in], bias [out] (may be undefined): one GEMM with a
// bias epilogue (engine/ops/linear.cpp).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// ---- normalisation and losses ----
Tensor softmax(const Tensor& x, int dim = -1);
Tensor log_softmax(const Tensor& x, int dim = -1);
// Fused log-softmax + negative log-likelihood. logits [N, C] (or [C]), targets [N] i32/i64.
// Mean over targets != ignore_index; the loss is f32 (f64 for f64 logits). A target outside [0, C)
// that is not ignore_index is an hg::Error naming the row; on CUDA the check runs on the device and
// the error is raised LATER, at the next host read (.item(), .to(kCPU), cuda::synchronize), as CUDA
// reports its own kernel errors (docs/cuda.md).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// ---- losses (PyTorch's torch.nn.functional names): engine/ops/losses.cpp ----
// How a loss reduces its per-element values: None keeps them, Mean and Sum reduce to a scalar.
// BatchMean (kl_div only) is the sum divided by the first dimension's size.
enum class Reduction { None, Mean, Sum, BatchMean };
const char* reduction_name(Reduction reduction);
// input and target of one shape (no broadcasting: a mismatch is an error), floating, one dtype.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);  // (x - t)^2
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);   // |x - t|
// |d| < beta ? 0.5 d^2 / beta : |d| - 0.5 beta  (beta = 0: l1_loss)
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);
// |d| < delta ? 0.5 d^2 : delta (|d| - 0.5 delta)
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, double delta = 1.0);
// -weight (t log(x) + (1 - t) log(1 - x)), each log clamped at >= -100 (PyTorch's), x in [0, 1]
// (checked: an input outside it is an error). weight (optional) broadcasts to the input.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::Mean);
// The stable form on logits: weight ((1 - t) x - (1 + (pos_weight - 1) t) log_sigmoid(x)); pos_weight
// (optional) broadcasts over the last dimension (one per class), weight to the input.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(), Reduction reduction = Reduction::Mean);
// Negative log-likelihood of log-probabilities input [N, C] (or [C], or [N, C, d1, ...]) at class
// indices target [N] (or [], or [N, d1, ...]), i32/i64: loss_i = -weight[t_i] input[i, t_i], 0 where
// t_i == ignore_index; Mean divides by the sum of weight[t_i] over the counted elements (NaN if none).
// A target outside [0, C) that is not ignore_index is an error naming it (a host read, on any device).
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(), int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);
// cross_entropy with PyTorch's options. Class-index targets (i32/i64, shapes as nll_loss) or class
// probabilities (floating, the input's shape). label_smoothing mixes the target with the uniform
// distribution; weight [C] scales each class. The default options on [N, C] or [C] logits with index
// targets run the fused cross_entropy above; anything else is log_softmax and the nll / sum form.
struct CrossEntropyOptions {
  Tensor weight;
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
  CrossEntropyOptions& set_weight(const Tensor& w) { weight = w; return *this; }
  CrossEntropyOptions& set_ignore_index(int64_t i) { ignore_index = i; return *this; }
  CrossEntropyOptions& set_reduction(Reduction r) { reduction = r; return *this; }
  CrossEntropyOptions& set_label_smoothing(double e) { label_smoothing = e; return *this; }
};
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options);
// Kullback-Leibler divergence with input = log q: target (log p when log_target) * (log p - input),
// 0 where p == 0. Reduction::BatchMean divides the sum by input.size(0) (the mathematically right one).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean, bool log_target = false);
// sum(x1 x2, dim) / (max(||x1||, eps) max(||x2||, eps)), x1 and x2 broadcast together.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int dim = 1, double eps = 1e-8);
// ||x1 - x2 + eps||_p over the last dimension (PyTorch's pairwise_distance); p > 0, or infinity (max |.|).
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6);
// max(d(a, p) - d(a, n) + margin, 0) with d = pairwise_distance(., ., p, eps); swap uses
// min(d(a, n), d(p, n)) as the negative distance.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative, double margin = 1.0,
                           double p = 2.0, double eps = 1e-6, bool swap = false, Reduction reduction = Reduction::Mean);
// The fused classifier (engine/ops/linear_cross_entropy.cpp): cross_entropy(x weight^T, targets)
// for x [N, C], weight [V, C] (a tied lm_head), targets [N] i32/i64, with the same loss, dtype,
// NaN-when-nothing-counts and target errors, computed in chunks of chunk_rows rows (0: choose, see
// linear_cross_entropy_chunk_rows) so that the logits [N, V] and their gradient are never stored
// whole: a gradient needed is computed in the forward pass, chunk by chunk, and kept as dx [N, C] and
// dW [V, C] (fp32 for half weights); the backward scales them. Gradients flow to x and weight.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& targets, int64_t ignore_index = -100,
                            int64_t chunk_rows = 0);
// The chunk linear_cross_entropy chooses for N = rows, C = features, V = classes: the rows whose
// logits fit in max(bytes of x, 8 MiB), at least 1 and at most N, a multiple of 16 above 16.
int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t features, int64_t classes, DType dtype);
// Over the last dimension, statistics in fp32. weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// Over the trailing dimensions `normalized_shape` (PyTorch's F.layer_norm): x's last dimensions must
// equal it, and weight/bias (either may be undefined) have that shape. The same kernels, on x seen as
// [rows, prod(normalized_shape)].
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5);
// ---- normalisations with fused kernels: engine/ops/normalization.cpp ----
// RMSNorm over the trailing dimensions `normalized_shape` (PyTorch 2.4's F.rms_norm):
// y = x / sqrt(mean(x^2) + eps) * weight; weight of normalized_shape or undefined; eps unset is the
// dtype's machine epsilon (as PyTorch). Statistics in fp32.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
// GroupNorm of x [N, C, *] in num_groups groups of C / num_groups channels (F.group_norm); weight and
// bias [C] or undefined.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
// BatchNorm of x [N, C] or [N, C, *] over each channel (F.batch_norm). training: normalises by the
// batch's statistics and, where running_mean / running_var are defined, updates them in place,
// running = (1 - momentum) running + momentum * batch statistic (the unbiased variance for
// running_var). Eval: normalises by the running statistics (required). Running statistics are
// contiguous [C] buffers in fp32 (f64 for f64 inputs), without gradient; weight / bias [C] or undefined.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
// The residual add fused with the LayerNorm after it (engine/ops/add_layer_norm.cpp): both outputs of
// one op, sum = x + residual and normalized = layer_norm(sum, weight, bias, eps), bit-identical to the
// composed forward. x and residual: equal shapes (no broadcasting), dtype and device; weight/bias may
// be undefined. One pass per row each way; the backward adds sum's gradient to the LayerNorm's dx.
struct AddLayerNorm {
  Tensor sum;
  Tensor normalized;
};
AddLayerNorm add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                            double eps = 1e-5);
// One recurrent layer, one direction, over a whole sequence (engine/ops/recurrence.cpp; nn::RNN, LSTM,
// GRU and the cells are built on it). cell: RnnCell::RnnTanh, RnnRelu, Lstm or Gru, with G gates
// (1, 1, 4, 3; PyTorch's order). x_proj [T, B, G H]: every step's input projection x_t W_ih^T + b_ih,
// which the caller computes as one GEMM over the sequence; w_hh [G H, H]; b_hh [G H] (undefined: none);
// h0, c0 [B, H] (undefined: zeros; c0 for Lstm only). reverse runs the steps t = T-1 .. 0. Each step is
// one GEMM (h_prev W_hh^T) and one fused pointwise kernel (the math: kernels/kernels.h rnn_cell_forward).
// output [T, B, H] holds h_t at t; h_n and c_n (Lstm; else undefined) the states after the last step.
// The backward walks the steps back, one GEMM and one fused kernel each, then forms dW_hh as one GEMM
// over the sequence; it is not differentiable again.
using kernels::RnnCell;
struct Recurrence {
  Tensor output;
  Tensor h_n;
  Tensor c_n;
};
Recurrence recurrence(RnnCell cell, const Tensor& x_proj, const Tensor& w_hh, const Tensor& b_hh = Tensor(),
                      const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor(), bool reverse = false);
// weight [V, D], ids i32/i64 of any shape -> [ids.shape, D]. Deterministic backward. An id outside
// [0, V) is an hg::Error naming its position; on CUDA raised at the next host read (as cross_entropy).
Tensor embedding(const Tensor& weight, const Tensor& ids);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training; the mask is
// drawn from the default generator's Philox stream and regenerated (not stored) for backward.
Tensor dropout(const Tensor& x, double p, bool training = true);
// Which implementation scaled_dot_product_attention runs (engine/ops/attention*.cpp):
//   Fused:    the FlashAttention-2 kernels (kernels/attention_problem.h): saves O and the row
//             log-sum-exp, never the T x T probabilities. CPU: every floating dtype and head dimension;
//             CUDA: cuda_attention_supports(D, dtype) (D 64 or 128; f16, bf16, f32). Also needs
//             q, k, v with equal leading dimensions and D == Dv; an hg::Error says which is missing.
//   Composed: batched GEMM, the (causal) softmax kernel, dropout, batched GEMM: the reference.
//   Auto:     Fused where it applies, else Composed.
enum class AttentionImpl { Auto, Fused, Composed };
const char* attention_impl_name(AttentionImpl impl);
// "auto", "fused" or "composed"; anything else is an hg::Error naming the choices.
AttentionImpl parse_attention_impl(const std::string& name);
// Scaled-dot-product attention: q [.., Tq, D], k [.., Tk, D], v [.., Tk, Dv] ->
//   dropout(softmax(q k^T / sqrt(D) + causal mask), p) v                   [.., Tq, Dv]
// causal: query i sees keys j <= i + (Tk - Tq). dropout_p > 0 drops probabilities (pass 0 when not
// training), drawn from the default generator's Philox stream; the fused and composed paths drop the
// same ones. The fused result of a [B, H, Tq, D] problem is a [B, Tq, H, D] buffer seen through a
// transpose, so merging the heads afterwards (transpose(1, 2).reshape) is a view.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                                    double dropout_p = 0.0, AttentionImpl impl = AttentionImpl::Auto);
// With attn_mask, which broadcasts to the scores [.., Tq, Tk]: bool (true: the key is seen; a query
// that sees no key gets NaN, as PyTorch) or additive (q's dtype, added to the scores; -inf hides), on
// top of `causal` (false by default here, as PyTorch's is_causal). A key-padding mask [B, Tk] is passed
// as attn_mask.view({B, 1, 1, Tk}), read through stride-0 broadcasting (no [B, H, Tq, Tk] mask is built).
// The fused CPU kernels apply the mask inside their tiles; the CUDA kernels take none yet, nor a mask
// that requires a gradient: Auto then runs the composed path (AttentionImpl::Fused is an error).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool causal = false, double dropout_p = 0.0,
                                    AttentionImpl impl = AttentionImpl::Auto);
// Causal self-attention from the packed projection qkv [B, T, 3C] (q | k | v, n_head heads of
// D = C / n_head) to y [B, T, C], heads merged: the fused kernels read q, k, v in place and write the
// gradients of all three into one [B, T, 3C] tensor, with no head-split or merge copy either way
// (engine/ops/attention_qkv.cpp). Where the fused kernels refuse, scaled_dot_product_attention (Auto).
Tensor attention_qkv(const Tensor& qkv, int64_t n_head, bool causal = true, double dropout_p = 0.0);
// The implementation Auto picks for these operands (and why the fused kernels refuse them, when they do).
AttentionImpl attention_impl_for(const Tensor& q, const Tensor& k, const Tensor& v, std::string* why_not_fused = nullptr);

// ---- convolution and pooling over NCHW: engine/ops/conv.cpp ----
using Size2d = std::array<int64_t, 2>;  // (height, width)
// x [N, C, H, W], weight [OC, C / groups, KH, KW], bias [OC] (may be undefined) -> [N, OC, OH, OW]
// with OH = (H + 2 padding - dilation (KH - 1) - 1) / stride + 1 (cross-correlation, as PyTorch).
// CPU: im2col + GEMM; CUDA: cuDNN (im2col + GEMM on the emulator or without cuDNN).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride = {1, 1},
              Size2d padding = {0, 0}, Size2d dilation = {1, 1}, int64_t groups = 1);
// Window maximum / mean over each plane of x [N, C, H, W]; stride {0, 0} means stride = kernel;
// padding at most half the kernel. avg_pool2d divides by KH KW (padding counts as zeros).
Tensor max_pool2d(const Tensor& x, Size2d kernel, Size2d stride = {0, 0}, Size2d padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, Size2d kernel, Size2d stride = {0, 0}, Size2d padding = {0, 0});
// x [N, C, L], weight [OC, C / groups, K] -> [N, OC, OL]: conv2d over [N, C, 1, L] (PyTorch's conv1d).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
// The transposed convolution (PyTorch's conv_transpose2d: the gradient of conv2d with respect to its
// input, as a layer): x [N, C, H, W], weight [C, OC / groups, KH, KW], bias [OC] (may be undefined)
// -> [N, OC, OH, OW] with OH = (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding + 1.
// It runs conv2d's backward-data kernel forward, and conv2d's forward and backward-filter kernels
// backward (cuDNN on a GPU). output_padding must be below the stride (PyTorch also allows it below
// the dilation; that is refused here).
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Size2d stride = {1, 1},
                        Size2d padding = {0, 0}, Size2d output_padding = {0, 0}, int64_t groups = 1,
                        Size2d dilation = {1, 1});
// x [N, C, L], weight [C, OC / groups, K] -> [N, OC, (L - 1) stride - 2 padding + dilation (K - 1) +
// output_padding + 1]: conv_transpose2d over [N, C, 1, L].
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);

// ---- resampling: engine/ops/resample.cpp (one separable-map kernel, kernels/resample_axis.h) ----
// The mean over each of out_size windows of each plane of x [..., H, W] (PyTorch's adaptive_avg_pool2d):
// output row i averages input rows floor(i H / OH) .. ceil((i + 1) H / OH) - 1, and likewise columns.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2d output_size);
// x [..., L] -> [..., output_size], as above along one dimension.
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size);
// PyTorch's interpolate modes. Nearest: source floor(i scale) (PyTorch's "nearest", with its float
// arithmetic); NearestExact: floor((i + 0.5) scale); Linear (x [N, C, L]) and Bilinear (x [N, C, H, W]):
// the two neighbours of the source position (i + 0.5) scale - 0.5 (clamped at 0), or i (in - 1) / (out - 1)
// with align_corners. scale is in / out, or 1 / scale_factor when the size comes from a scale factor.
enum class InterpolateMode { Nearest, NearestExact, Linear, Bilinear };
struct InterpolateOptions {
  std::vector<int64_t> size;        // the output's spatial size (one per spatial dimension), or
  std::vector<double> scale_factor; // the output's size floor(in * scale_factor)
  InterpolateMode mode = InterpolateMode::Nearest;
  std::optional<bool> align_corners;  // linear modes only; false when unset
  InterpolateOptions& set_size(std::vector<int64_t> s) { size = std::move(s); return *this; }
  InterpolateOptions& set_scale_factor(std::vector<double> s) { scale_factor = std::move(s); return *this; }
  InterpolateOptions& set_mode(InterpolateMode m) { mode = m; return *this; }
  InterpolateOptions& set_align_corners(bool a) { align_corners = a; return *this; }
};
// x [N, C, L] (Nearest, NearestExact, Linear) or [N, C, H, W] (Nearest, NearestExact, Bilinear), resized.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// PyTorch's name of a mode: "nearest", "nearest-exact", "linear", "bilinear".
const char* interpolate_mode_name(InterpolateMode mode);

// ---- shape: engine/ops/shape.cpp (the Tensor view methods are these) ----
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int d0, int d1);
Tensor permute(const Tensor& x, const std::vector<int>& dims);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int dim, int64_t index);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor squeeze(const Tensor& x, int dim);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
Tensor cat(const std::vector<Tensor>& tensors, int dim);

// ---- shapes composed from views and cat: engine/ops/shape_compose.cpp ----
// Joins tensors of one shape along a new dimension `dim` (unsqueeze each, then cat).
Tensor stack(const std::vector<Tensor>& tensors, int dim = 0);
// Views of consecutive pieces along dim: of split_size each (the last may be shorter), of the given
// sizes (summing to the dimension), or `chunks` pieces of ceil(size / chunks) (fewer when it divides so).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim = 0);
// Dimensions start_dim..end_dim merged into one / dimension dim split into `sizes` (one may be -1).
Tensor flatten(const Tensor& x, int start_dim, int end_dim = -1);
Tensor unflatten(const Tensor& x, int dim, const Shape& sizes);
// x tiled repeats[i] times along each dimension (repeats may add leading dimensions), a copy.
Tensor repeat(const Tensor& x, const Shape& repeats);
// Constant padding: `pad` holds (before, after) pairs starting from the LAST dimension, as
// torch.nn.functional.pad: {left, right} pads the last dimension, {left, right, top, bottom} the last two.
// Negative amounts crop.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, double value = 0.0);
// Non-constant padding of the trailing dimensions (amounts as above, each >= 0): Reflect mirrors
// without repeating the edge (amounts below the dimension's size), Replicate repeats the edge.
// PyTorch allows these for the last 1 to 3 dimensions; here any number of trailing dimensions.
enum class PadMode { Constant, Reflect, Replicate };
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode, double value = 0.0);
// x with elements above (tril) / below (triu) the `diagonal`-th diagonal of the last two dimensions
// set to 0; the gradient is masked the same way.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// ids (i32/i64, any shape) -> i64 [ids.shape, num_classes] with a 1 at each id. num_classes -1: the
// largest id + 1 (a host read). An id outside [0, num_classes) is an error (a host read).
Tensor one_hot(const Tensor& ids, int64_t num_classes = -1);

// ---- factories beyond engine/tensor.h's: engine/ops/shape_compose.cpp ----
// start, start + step, ... while below end (above, for a negative step): ceil((end - start) / step)
// values in `dtype` (PyTorch infers i64 from integer arguments; here the dtype is given, f32 by default).
Tensor arange(double start, double end, double step = 1.0, DType dtype = f32, const Device& device = kCPU);
// `steps` values from start to end inclusive, evenly spaced.
Tensor linspace(double start, double end, int64_t steps, DType dtype = f32, const Device& device = kCPU);
// [n, m] (m = -1: n) with ones on the diagonal.
Tensor eye(int64_t n, int64_t m = -1, DType dtype = f32, const Device& device = kCPU);
Tensor full_like(const Tensor& t, double value);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);

// ---- dtype and device: engine/ops/cast.cpp ----
Tensor cast(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, const Device& device);

}  // namespace hg
