#pragma once
// The gradients of the binary rows whose formulas need more than arithmetic (kernels/binary_math.h:
// maximum, minimum, pow). The rows call these by name; argument-dependent lookup finds them here,
// in namespace hg, when engine/ops/elementwise.cpp instantiates a row's gradient with Tensors.
#include "engine/tensor.h"

namespace hg {

// The share of maximum(a, b)'s gradient that reaches a: 0 where a < b, 1/2 where a == b, else 1
// (also where either is NaN), as PyTorch's maximum backward.
Tensor maximum_share(const Tensor& a, const Tensor& b);
// minimum's: 0 where a > b, 1/2 where a == b, else 1.
Tensor minimum_share(const Tensor& a, const Tensor& b);
// d(a^b)/da times g: g b a^(b-1), and 0 where b == 0 (PyTorch's, so 0^0 has gradient 0, not NaN).
Tensor pow_grad_base(const Tensor& g, const Tensor& a, const Tensor& b);
// d(a^b)/db times g: g a^b log(a), and 0 where a == 0 and b >= 0 (PyTorch's).
Tensor pow_grad_exponent(const Tensor& g, const Tensor& a, const Tensor& b);

}  // namespace hg
