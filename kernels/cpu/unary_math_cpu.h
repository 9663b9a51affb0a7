#pragma once
// CpuUnaryMath<op>: the CPU kernels' form of kernels/unary_math.h's UnaryMath<op>. The table's formulas are
// shared with the CUDA kernels and call std::exp and std::log1p, which the compiler leaves as one scalar libm
// call per element. For the ops whose cost is those calls (exp, sigmoid, silu, softplus, log_sigmoid: the
// losses on logits, the gates) this form computes the same formulas with simd_math.h's vexp and vlog1p, so the
// elementwise loops vectorise through libmvec; results stay within a few ulp of the table's. Every other op
// is the table's own.
#include "kernels/cpu/simd_math.h"
#include "kernels/unary_math.h"

namespace hg::kernels::cpu {

template <UnaryOp kOp>
struct CpuUnaryMath : UnaryMath<kOp> {};

namespace unary_detail {
template <class A>
inline A sigmoid(A x) {
  return A(1) / (A(1) + vexp(-x));
}
}  // namespace unary_detail

template <>
struct CpuUnaryMath<UnaryOp::Exp> : UnaryMath<UnaryOp::Exp> {
  template <class A>
  static A value(A x, A) {
    return vexp(x);
  }
};

template <>
struct CpuUnaryMath<UnaryOp::Sigmoid> : UnaryMath<UnaryOp::Sigmoid> {
  template <class A>
  static A value(A x, A) {
    return unary_detail::sigmoid(x);
  }
};

template <>
struct CpuUnaryMath<UnaryOp::Silu> : UnaryMath<UnaryOp::Silu> {
  template <class A>
  static A value(A x, A) {
    return x * unary_detail::sigmoid(x);
  }
  template <class A>
  static A derivative(A x, A, A) {
    const A sg = unary_detail::sigmoid(x);
    return sg * (A(1) + x * (A(1) - sg));
  }
};

template <>
struct CpuUnaryMath<UnaryOp::Softplus> : UnaryMath<UnaryOp::Softplus> {
  template <class A>
  static A value(A x, A s) {
    return x > s ? x : vlog1p(vexp(x));
  }
  template <class A>
  static A derivative(A x, A, A s) {
    return x > s ? A(1) : unary_detail::sigmoid(x);
  }
};

template <>
struct CpuUnaryMath<UnaryOp::LogSigmoid> : UnaryMath<UnaryOp::LogSigmoid> {
  template <class A>
  static A value(A x, A) {
    const A negative_part = x < A(0) ? x : A(0), magnitude = x < A(0) ? -x : x;
    return negative_part - vlog1p(vexp(-magnitude));
  }
  template <class A>
  static A derivative(A x, A, A) {
    return unary_detail::sigmoid(-x);
  }
};

}  // namespace hg::kernels::cpu
