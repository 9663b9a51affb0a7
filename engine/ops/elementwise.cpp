// Elementwise ops: broadcasting binary arithmetic, the scalar affine form, and unary math.
// Names and backward formulas come from the ops' rows in the kernel tables:
//   binary: BinaryMath<op>::grad<0 or 1> (kernels/binary_math.h), evaluated on Tensors, then
//           reduced back to each input's shape with sum_to (the backward of broadcasting);
//   unary f: dx = g * f'(x, y) by the unary_backward kernel (f' from kernels/unary_math.h).
// The front-end of a unary op is one line at the end of this file (docs/adding_an_op.md).
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/binary_grads.h"
#include "engine/ops/op_support.h"

namespace hg {

namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

Tensor binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = kernels::op_name(op);
  ops::check_floating(a, name, "a");
  ops::check_floating(b, name, "b");
  ops::check_same({&a, &b}, {"a", "b"}, name);
  ops::check_backend(a, name);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = ops::empty_as(shape, a);
  const Shape as = ops::broadcast_strides(a, shape), bs = ops::broadcast_strides(b, shape);
  HG_KERNEL(a.device(), binary_forward, op, a.data_ptr(), as.data(), b.data_ptr(), bs.data(), out.data_ptr(),
            shape.data(), int(shape.size()), a.dtype());
  return out;
}

// A binary op's operand as its backward keeps it: the value (when the formula needs it) and the shape.
struct SavedOperand {
  SavedTensor value;
  Shape shape;
};

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = binary_kernel(op, a, b);
  if (!should_record({&a, &b})) return out;
  kernels::with_op(op, [&]<BinaryOp kOp>() {
    using Math = kernels::BinaryMath<kOp>;
    // The operands' values are kept only when the gradients read them.
    const SavedOperand sa{Math::kGradReadsOperands ? SavedTensor(a) : SavedTensor(), a.shape()};
    const SavedOperand sb{Math::kGradReadsOperands ? SavedTensor(b) : SavedTensor(), b.shape()};
    record_op(Math::kName, {a, b}, out, [sa, sb](const Tensor& g, const NeedsGrad& needs) {
      const Tensor va = sa.value.unpack(), vb = sb.value.unpack();
      return std::vector<Tensor>{needs[0] ? sum_to(Math::template grad<0>(g, va, vb), sa.shape) : Tensor(),
                                 needs[1] ? sum_to(Math::template grad<1>(g, va, vb), sb.shape) : Tensor()};
    });
  });
  return out;
}

Tensor unary(UnaryOp op, const Tensor& input, double scalar = 0.0) {
  const char* name = kernels::op_name(op);
  ops::check_floating(input, name, "input");
  ops::check_backend(input, name);
  const Tensor x = input.contiguous();
  Tensor out = ops::empty_as(x.shape(), x);
  HG_KERNEL(x.device(), unary_forward, op, x.data_ptr(), out.data_ptr(), x.numel(), scalar, x.dtype());
  if (should_record({&input})) {
    const SavedTensor saved_x(x), saved_y(out);
    record_op(name, {input}, out, [op, saved_x, saved_y, scalar](const Tensor& g, const NeedsGrad&) {
      const Tensor sx = saved_x.unpack(), sy = saved_y.unpack();
      const Tensor dy = g.contiguous();
      Tensor dx = ops::empty_as(dy.shape(), dy);
      HG_KERNEL(dy.device(), unary_backward, op, sx.data_ptr(), sy.data_ptr(), dy.data_ptr(), dx.data_ptr(), dy.numel(),
                scalar, dy.dtype());
      return std::vector<Tensor>{dx};
    });
  }
  return out;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    HG_CHECK(da == db || da == 1 || db == 1, "[", op, "] shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast: dimension ", i, " is ", da, " vs ", db, "; expected equal sizes or 1");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const size_t lead = size_t(grad.dim()) - shape.size();
  std::vector<int> dims;
  for (size_t i = 0; i < size_t(grad.dim()); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.shape()[i] != 1)) dims.push_back(int(i));
  Tensor reduced = sum(grad, dims, /*keepdim=*/true);
  return reduced.reshape(shape);
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }

Tensor affine(const Tensor& input, double alpha, double beta) {
  ops::check_floating(input, "affine", "input");
  ops::check_backend(input, "affine");
  const Tensor x = input.contiguous();
  Tensor out = ops::empty_as(x.shape(), x);
  HG_KERNEL(x.device(), affine, x.data_ptr(), out.data_ptr(), x.numel(), alpha, beta, x.dtype());
  if (should_record({&input})) {
    record_op("affine", {input}, out,
              [alpha](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{affine(g, alpha, 0.0)}; });
  }
  return out;
}

Tensor neg(const Tensor& x) { return affine(x, -1.0, 0.0); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, x); }
Tensor log(const Tensor& x) { return unary(UnaryOp::Log, x); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::Sqrt, x); }
Tensor pow(const Tensor& x, double exponent) { return unary(UnaryOp::Pow, x, exponent); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::Sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::Relu, x); }
Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  return unary(approximation == GeluApproximation::Tanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf, x);
}
Tensor silu(const Tensor& x) { return unary(UnaryOp::Silu, x); }
Tensor abs(const Tensor& x) { return unary(UnaryOp::Abs, x); }
Tensor sin(const Tensor& x) { return unary(UnaryOp::Sin, x); }
Tensor cos(const Tensor& x) { return unary(UnaryOp::Cos, x); }
Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::Rsqrt, x); }
Tensor erf(const Tensor& x) { return unary(UnaryOp::Erf, x); }
Tensor sign(const Tensor& x) { return unary(UnaryOp::Sign, x); }
Tensor floor(const Tensor& x) { return unary(UnaryOp::Floor, x); }
Tensor leaky_relu(const Tensor& x, double negative_slope) { return unary(UnaryOp::LeakyRelu, x, negative_slope); }
Tensor elu(const Tensor& x, double alpha) { return unary(UnaryOp::Elu, x, alpha); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  HG_CHECK(beta > 0 && std::isfinite(beta), "[softplus] beta = ", beta, "; expected a finite beta > 0");
  if (beta == 1.0) return unary(UnaryOp::Softplus, x, threshold);
  return affine(unary(UnaryOp::Softplus, affine(x, beta, 0.0), threshold), 1.0 / beta, 0.0);
}
Tensor log_sigmoid(const Tensor& x) { return unary(UnaryOp::LogSigmoid, x); }
Tensor clamp_min(const Tensor& x, double min) { return unary(UnaryOp::ClampMin, x, min); }
Tensor clamp_max(const Tensor& x, double max) { return unary(UnaryOp::ClampMax, x, max); }

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  HG_CHECK(min || max, "[clamp] got neither min nor max; expected at least one bound");
  const Tensor low = min ? clamp_min(x, *min) : x;
  return max ? clamp_max(low, *max) : low;
}

// where(x < min, min, x), then where(. > max, max, .): x passes its gradient where min <= x <= max,
// each bound where it is chosen, and min > max gives max, as PyTorch's clamp.
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max) {
  HG_CHECK(min.defined() || max.defined(), "[clamp] got neither min nor max; expected at least one bound");
  const Tensor low = min.defined() ? where(lt(x, min), min, x) : x;
  return max.defined() ? where(gt(low, max), max, low) : low;
}

Tensor pow(const Tensor& x, const Tensor& exponent) { return binary(BinaryOp::Pow, x, exponent); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Minimum, a, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double s) { return affine(a, 1.0, s); }
Tensor operator+(double s, const Tensor& a) { return affine(a, 1.0, s); }
Tensor operator-(const Tensor& a, double s) { return affine(a, 1.0, -s); }
Tensor operator-(double s, const Tensor& a) { return affine(a, -1.0, s); }
Tensor operator*(const Tensor& a, double s) { return affine(a, s, 0.0); }
Tensor operator*(double s, const Tensor& a) { return affine(a, s, 0.0); }
Tensor operator/(const Tensor& a, double s) { return affine(a, 1.0 / s, 0.0); }
Tensor operator/(double s, const Tensor& a) { return mul(pow(a, -1.0), scalar_tensor(s, a.dtype(), a.device())); }

}  // namespace hg
