#pragma once
// The differentiable ops of halfgrad. Each one checks its inputs (throwing hg::Error that names the
// op, the shapes/dtypes/devices it got and what it expected), runs the kernel for the tensors'
// device, and records its backward (written next to its forward in engine/ops/<area>.cpp; the
// elementwise ops' derivatives are their rows in kernels/unary_math.h and kernels/binary_math.h).
// Adding an op: docs/adding_an_op.md.
//
// Binary ops need equal dtypes and devices and broadcast shapes NumPy-style.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"

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
// gelu(x + bias) for x [..., N], bias [N]: the MLP's activation after a GEMM without its bias
// (engine/ops/bias_gelu.cpp). One pass forward; backward gives dx and the bias gradient in one pass.
Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApproximation approximation = GeluApproximation::Tanh);

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

// ---- dtype and device: engine/ops/cast.cpp ----
Tensor cast(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, const Device& device);

}  // namespace hg
