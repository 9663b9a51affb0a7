#pragma once
// The binary elementwise ops, one row each in HG_BINARY_OPS below, from which everything else about
// them is generated: the BinaryOp enum and kBinaryOps, the name (error messages, autograd node
// names), the per-element math both backends run (BinaryMath<op>::value, in A, the accumulation
// type), the cases of with_op (kernels/op_table.h: the one dispatch from a run-time BinaryOp to a
// compile-time one, shared by the CPU and CUDA kernels) and the engine's backward.
//
// Columns: the enumerator, the name, y = a op b, the gradients with respect to a and b given the
// upstream gradient g, and whether those read the operands (the engine saves a and b for the
// backward only then). The gradients are written once for any type with + - * / and unary minus:
// the engine instantiates them with Tensor (before summing a broadcast gradient back to its
// operand's shape). The gradients of maximum, minimum and pow need more than arithmetic (PyTorch's
// tie rule, pow's special cases); theirs are functions of Tensors that the engine defines
// (engine/ops/binary_grads.h), found by argument-dependent lookup when the engine instantiates the row:
//   maximum: at a == b each operand gets g / 2; a NaN operand passes g to both (PyTorch's rule)
//   pow:     da = g b a^(b-1) (0 where b == 0),  db = g a^b log(a) (0 where a == 0 and b >= 0)
#include <cmath>

#include "kernels/host_device.h"
#include "kernels/op_table.h"

namespace hg::kernels {

// NaN-propagating maximum and minimum (PyTorch's maximum / minimum: a NaN operand gives NaN).
template <class A>
HG_HOST_DEVICE inline A maximum_of(A a, A b) {
  return a != a ? a : (b != b ? b : (a < b ? b : a));
}
template <class A>
HG_HOST_DEVICE inline A minimum_of(A a, A b) {
  return a != a ? a : (b != b ? b : (b < a ? b : a));
}

// clang-format off
#define HG_BINARY_OPS(row)                                                                    \
  /*  enumerator  name   a op b   dL/da   dL/db                reads a, b                  */ \
  row(Add,        "add", a + b,   g,      g,                   false)                         \
  row(Sub,        "sub", a - b,   g,      -g,                  false)                         \
  row(Mul,        "mul", a * b,   g * b,  g * a,               true)                          \
  row(Div,        "div", a / b,   g / b,  -(g * a / (b * b)),  true)                           \
  row(Maximum,    "maximum", maximum_of(a, b), g * maximum_share(a, b), g * maximum_share(b, a), true) \
  row(Minimum,    "minimum", minimum_of(a, b), g * minimum_share(a, b), g * minimum_share(b, a), true) \
  row(Pow,        "pow", std::pow(a, b), pow_grad_base(g, a, b), pow_grad_exponent(g, a, b), true)
// clang-format on

// ---- generated from the table ----

HG_OP_ENUM(BinaryOp, kBinaryOps, HG_BINARY_OPS);

template <BinaryOp kOp>
struct BinaryMath;

#define HG_BINARY_MATH(op, op_name, value_expr, grad_a_expr, grad_b_expr, reads) \
  template <>                                                                    \
  struct BinaryMath<BinaryOp::op> {                                              \
    static constexpr const char* kName = op_name;                                \
    static constexpr bool kGradReadsOperands = reads;                            \
    template <class A>                                                           \
    static HG_HOST_DEVICE A value(A a, A b) {                                    \
      return value_expr;                                                         \
    }                                                                            \
    /* dL/da (kOperand 0) or dL/db (kOperand 1) */                               \
    template <int kOperand, class V>                                             \
    static V grad(const V& g, const V& a, const V& b) {                          \
      if constexpr (kOperand == 0)                                               \
        return grad_a_expr;                                                      \
      else                                                                       \
        return grad_b_expr;                                                      \
    }                                                                            \
  };
HG_BINARY_OPS(HG_BINARY_MATH)
#undef HG_BINARY_MATH

HG_OP_TABLE(BinaryOp, kBinaryOps, BinaryMath);

}  // namespace hg::kernels
