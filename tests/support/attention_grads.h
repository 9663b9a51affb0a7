#pragma once
// One attention forward + backward (compared with support/tensor_distance.h), shared by
// test_attention (fused against composed) and bench_attention (its accuracy check before timing).
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "support/tensor_distance.h"

namespace hg::testing {

// The output of scaled_dot_product_attention and the gradients of q, k and v.
struct AttentionGrads {
  Tensor out, dq, dk, dv;
};

// One forward + backward with a fixed upstream gradient and dropout masks drawn from seed 5.
inline AttentionGrads attention_forward_backward(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                                 const Tensor& dout, bool causal, double p, AttentionImpl impl) {
  Tensor q = q0.detach().requires_grad_(), k = k0.detach().requires_grad_(), v = v0.detach().requires_grad_();
  manual_seed(5);
  AttentionGrads g;
  g.out = scaled_dot_product_attention(q, k, v, causal, p, impl);
  g.out.backward(dout);
  g.dq = q.grad();
  g.dk = k.grad();
  g.dv = v.grad();
  return g;
}

}  // namespace hg::testing
