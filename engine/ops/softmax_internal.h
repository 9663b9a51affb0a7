#pragma once
#include "engine/tensor.h"

namespace hg::ops {
// Softmax over the last dimension with an optional causal mask (see kernels.h softmax_forward);
// recorded by autograd. Shared by softmax() and scaled_dot_product_attention().
Tensor softmax_last_dim(const Tensor& x, bool log, int64_t causal_rows);
}  // namespace hg::ops
