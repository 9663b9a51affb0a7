#pragma once
// The unary ops, one row each in HG_UNARY_OPS below. Everything else about a unary op is generated
// from its row: the UnaryOp enum and kUnaryOps, its name (op_name: error messages, node names), the
// per-element math both backends run (UnaryMath<op>::value and ::derivative, in A, the accumulation
// type, float or double), what the derivative reads, and the cases of with_op (kernels/op_table.h),
// the one dispatch from a run-time UnaryOp to a compile-time one that the CPU and CUDA kernels
// share. The engine's backward of every unary op is dx = dy * f'(x, y) through the unary_backward
// kernel. Adding a unary op: docs/adding_an_op.md.
//
// Columns: the enumerator, the name, what the derivative reads (X, Y or None: unary_backward
// accepts x = nullptr unless it reads X, and recomputes y from x when y = nullptr), f(x, s), and
// f'(x, y, s) with y = f(x, s) (some derivatives are cheaper from y). `s` is the op's scalar (the
// exponent of Pow, LeakyRelu's negative slope, Elu's alpha, Softplus's threshold, the bound of
// ClampMin / ClampMax). Sign and Floor have a zero derivative (PyTorch's, too), and so has Pow with
// exponent 0 (x^0 = 1 everywhere, also at x = 0, where s x^(s-1) would be 0 * inf). The longer formulas
// are the functions above the table:
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu_erf(x)  = 0.5 x (1 + erf(x / sqrt 2))
//   silu(x)      = x sigmoid(x)
//   softplus(x)  = log(1 + exp(x)), or x itself above the threshold s (beta = 1; the engine scales
//                  for other betas: softplus_beta(x) = softplus(beta x) / beta)
//   log_sigmoid(x) = min(x, 0) - log(1 + exp(-|x|))   (= -softplus(-x), stable for every x)
#include <cmath>

#include "kernels/host_device.h"
#include "kernels/op_table.h"

namespace hg::kernels {

template <class A>
HG_HOST_DEVICE inline A sigmoid_of(A x) {
  return A(1) / (A(1) + std::exp(-x));
}

template <class A>
HG_HOST_DEVICE inline A gelu_tanh_of(A x) {
  constexpr A kSqrt2OverPi = A(0.7978845608028654);
  return A(0.5) * x * (A(1) + std::tanh(kSqrt2OverPi * (x + A(0.044715) * x * x * x)));
}

template <class A>
HG_HOST_DEVICE inline A gelu_tanh_derivative(A x) {
  constexpr A kSqrt2OverPi = A(0.7978845608028654);
  const A u = kSqrt2OverPi * (x + A(0.044715) * x * x * x);
  const A t = std::tanh(u);
  const A du = kSqrt2OverPi * (A(1) + A(3) * A(0.044715) * x * x);
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du;
}

template <class A>
HG_HOST_DEVICE inline A gelu_erf_of(A x) {
  constexpr A kInvSqrt2 = A(0.7071067811865476);
  return A(0.5) * x * (A(1) + std::erf(x * kInvSqrt2));
}

template <class A>
HG_HOST_DEVICE inline A gelu_erf_derivative(A x) {
  constexpr A kInvSqrt2Pi = A(0.3989422804014327);  // 1 / sqrt(2 pi)
  constexpr A kInvSqrt2 = A(0.7071067811865476);
  return A(0.5) * (A(1) + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(A(-0.5) * x * x);
}

template <class A>
HG_HOST_DEVICE inline A silu_derivative(A x) {
  const A sg = sigmoid_of(x);
  return sg * (A(1) + x * (A(1) - sg));
}

template <class A>
HG_HOST_DEVICE inline A softplus_of(A x, A threshold) {
  return x > threshold ? x : std::log1p(std::exp(x));
}

template <class A>
HG_HOST_DEVICE inline A log_sigmoid_of(A x) {
  return (x < A(0) ? x : A(0)) - std::log1p(std::exp(-(x < A(0) ? -x : x)));
}

template <class A>
HG_HOST_DEVICE inline A sign_of(A x) {
  return A(A(0) < x) - A(x < A(0));  // 0 for 0 and NaN
}

// clang-format off
#define HG_UNARY_OPS(row)                                                                                    \
  /*  enumerator  name         reads  f(x, s)                 f'(x, y, s)                                 */ \
  row(Neg,        "neg",       None,  -x,                     A(-1))                                         \
  row(Exp,        "exp",       Y,     std::exp(x),            y)                                             \
  row(Log,        "log",       X,     std::log(x),            A(1) / x)                                      \
  row(Sqrt,       "sqrt",      Y,     std::sqrt(x),           A(0.5) / y)                                    \
  row(Tanh,       "tanh",      Y,     std::tanh(x),           A(1) - y * y)                                  \
  row(Sigmoid,    "sigmoid",   Y,     sigmoid_of(x),          y * (A(1) - y))                                \
  row(Relu,       "relu",      X,     x > A(0) ? x : A(0),    x > A(0) ? A(1) : A(0))                        \
  row(GeluTanh,   "gelu_tanh", X,     gelu_tanh_of(x),        gelu_tanh_derivative(x))                       \
  row(GeluErf,    "gelu_erf",  X,     gelu_erf_of(x),         gelu_erf_derivative(x))                        \
  row(Silu,       "silu",      X,     x * sigmoid_of(x),      silu_derivative(x))                            \
  row(Pow,        "pow",       X,     std::pow(x, s),         s == A(0) ? A(0) : s * std::pow(x, s - A(1)))  \
  row(Abs,        "abs",       X,     x < A(0) ? -x : x,      x > A(0) ? A(1) : (x < A(0) ? A(-1) : A(0)))  \
  row(Sin,        "sin",       X,     std::sin(x),            std::cos(x))                                   \
  row(Cos,        "cos",       X,     std::cos(x),            -std::sin(x))                                  \
  row(Rsqrt,      "rsqrt",     Y,     A(1) / std::sqrt(x),    A(-0.5) * y * y * y)                           \
  row(Erf,        "erf",       X,     std::erf(x),            A(1.1283791670955126) * std::exp(-x * x))      \
  row(Sign,       "sign",      None,  sign_of(x),             A(0))                                          \
  row(Floor,      "floor",     None,  std::floor(x),          A(0))                                          \
  row(LeakyRelu,  "leaky_relu", X,    x > A(0) ? x : x * s,   x > A(0) ? A(1) : s)                           \
  row(Elu,        "elu",       X,     x > A(0) ? x : s * std::expm1(x), x > A(0) ? A(1) : s * std::exp(x))   \
  row(Softplus,   "softplus",  X,     softplus_of(x, s),      x > s ? A(1) : sigmoid_of(x))                  \
  row(LogSigmoid, "log_sigmoid", X,   log_sigmoid_of(x),      sigmoid_of(-x))                                \
  row(ClampMin,   "clamp_min", X,     x < s ? s : x,          x >= s ? A(1) : A(0))                          \
  row(ClampMax,   "clamp_max", X,     x > s ? s : x,          x <= s ? A(1) : A(0))
// clang-format on

// ---- generated from the table ----

HG_OP_ENUM(UnaryOp, kUnaryOps, HG_UNARY_OPS);

enum class DerivativeReads { None, X, Y };

template <UnaryOp kOp>
struct UnaryMath;

#define HG_UNARY_MATH(op, op_name, reads, value_expr, derivative_expr) \
  template <>                                                          \
  struct UnaryMath<UnaryOp::op> {                                      \
    static constexpr const char* kName = op_name;                      \
    static constexpr DerivativeReads kReads = DerivativeReads::reads;  \
    template <class A>                                                 \
    static HG_HOST_DEVICE A value(A x, A s) {                          \
      return value_expr;                                               \
    }                                                                  \
    template <class A>                                                 \
    static HG_HOST_DEVICE A derivative(A x, A y, A s) {                \
      return derivative_expr;                                          \
    }                                                                  \
  };
HG_UNARY_OPS(HG_UNARY_MATH)
#undef HG_UNARY_MATH

HG_OP_TABLE(UnaryOp, kUnaryOps, UnaryMath);

inline DerivativeReads unary_derivative_reads(UnaryOp op) {
  return with_op(op, [&]<UnaryOp kOp>() { return UnaryMath<kOp>::kReads; });
}

}  // namespace hg::kernels
