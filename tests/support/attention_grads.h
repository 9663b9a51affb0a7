#pragma once
// One attention forward + backward and the max-norm distances its results are compared by, shared by
// test_attention (fused against composed) and bench_attention (its accuracy check before timing).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"

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

// max |t|.
inline double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// max |a - b| over the elements of two tensors of as many elements; a NaN difference counts as infinity.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::isnan(x[i] - y[i]) ? INFINITY : std::abs(x[i] - y[i]));
  return m;
}

}  // namespace hg::testing
