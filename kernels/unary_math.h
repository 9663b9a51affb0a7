#pragma once
// Per-element math of the unary ops, forward and derivative, shared by the CPU and CUDA backends.
// A is the accumulation type (float or double). `s` is the op's scalar (the exponent of Pow).
//
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu_erf(x)  = 0.5 x (1 + erf(x / sqrt 2))
//   silu(x)      = x sigmoid(x)
#include <cmath>

#include "kernels/host_device.h"

namespace hg::kernels {

enum class UnaryOp { Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu, GeluTanh, GeluErf, Silu, Pow, Abs };

template <class A>
HG_HOST_DEVICE inline A sigmoid_of(A x) {
  return A(1) / (A(1) + std::exp(-x));
}

template <class A>
HG_HOST_DEVICE inline A unary_value(UnaryOp op, A x, A s) {
  constexpr A kSqrt2OverPi = A(0.7978845608028654);
  constexpr A kInvSqrt2 = A(0.7071067811865476);
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return sigmoid_of(x);
    case UnaryOp::Relu: return x > A(0) ? x : A(0);
    case UnaryOp::GeluTanh: return A(0.5) * x * (A(1) + std::tanh(kSqrt2OverPi * (x + A(0.044715) * x * x * x)));
    case UnaryOp::GeluErf: return A(0.5) * x * (A(1) + std::erf(x * kInvSqrt2));
    case UnaryOp::Silu: return x * sigmoid_of(x);
    case UnaryOp::Pow: return std::pow(x, s);
    case UnaryOp::Abs: return x < A(0) ? -x : x;
  }
  return x;
}

// d unary_value / dx at x, given y = unary_value(x) (some derivatives are cheaper from y).
template <class A>
HG_HOST_DEVICE inline A unary_derivative(UnaryOp op, A x, A y, A s) {
  constexpr A kSqrt2OverPi = A(0.7978845608028654);
  constexpr A kInvSqrt2Pi = A(0.3989422804014327);  // 1 / sqrt(2 pi)
  constexpr A kInvSqrt2 = A(0.7071067811865476);
  switch (op) {
    case UnaryOp::Neg: return A(-1);
    case UnaryOp::Exp: return y;
    case UnaryOp::Log: return A(1) / x;
    case UnaryOp::Sqrt: return A(0.5) / y;
    case UnaryOp::Tanh: return A(1) - y * y;
    case UnaryOp::Sigmoid: return y * (A(1) - y);
    case UnaryOp::Relu: return x > A(0) ? A(1) : A(0);
    case UnaryOp::GeluTanh: {
      const A u = kSqrt2OverPi * (x + A(0.044715) * x * x * x);
      const A t = std::tanh(u);
      const A du = kSqrt2OverPi * (A(1) + A(3) * A(0.044715) * x * x);
      return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du;
    }
    case UnaryOp::GeluErf:
      return A(0.5) * (A(1) + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(A(-0.5) * x * x);
    case UnaryOp::Silu: {
      const A sg = sigmoid_of(x);
      return sg * (A(1) + x * (A(1) - sg));
    }
    case UnaryOp::Pow: return s * std::pow(x, s - A(1));
    case UnaryOp::Abs: return x > A(0) ? A(1) : (x < A(0) ? A(-1) : A(0));
  }
  return A(0);
}

}  // namespace hg::kernels
