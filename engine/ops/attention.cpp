// scaled_dot_product_attention: the front (argument checks, the choice of implementation) and the
// composed path, the reference the fused kernels are tested against:
//   S = q k^T / sqrt(D) (+ attn_mask),  P = softmax(S masked causally),  O = dropout(P) v
// with q [.., Tq, D], k [.., Tk, D] and v [.., Tk, Dv]. Query row i attends to keys j <= i + (Tk - Tq),
// so a query block at the end of a longer key sequence (a KV cache) sees its whole past. Its backward
// is that of the composed ops, and it saves the probabilities: O(B H Tq Tk) memory. The fused path
// (engine/ops/attention_fused.cpp) saves O and the row log-sum-exp only, and applies an attn_mask
// inside its tiles on both devices.
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/attention_internal.h"
#include "engine/ops/op_support.h"
#include "engine/ops/softmax_internal.h"

namespace hg {

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::Auto: return "auto";
    case AttentionImpl::Fused: return "fused";
    case AttentionImpl::Composed: return "composed";
  }
  return "?";
}

AttentionImpl parse_attention_impl(const std::string& name) {
  for (AttentionImpl impl : {AttentionImpl::Auto, AttentionImpl::Fused, AttentionImpl::Composed}) {
    if (name == attention_impl_name(impl)) return impl;
  }
  HG_FAIL("[attention] unknown implementation \"", name, "\"; expected auto, fused or composed");
}

namespace ops {

Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                          const Tensor& attn_mask) {
  const int64_t tq = q.size(-2), d = q.size(-1);
  Tensor scores = matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(double(d)));
  if (attn_mask.defined())
    scores = attn_mask.dtype() == b8 ? masked_fill(scores, logical_not(attn_mask), -INFINITY) : scores + attn_mask;
  const Tensor probabilities = softmax_last_dim(scores, false, causal ? tq : 0);
  return matmul(dropout_p > 0.0 ? dropout(probabilities, dropout_p, true) : probabilities, v);
}

}  // namespace ops

AttentionImpl attention_impl_for(const Tensor& q, const Tensor& k, const Tensor& v, std::string* why_not_fused) {
  const std::string why = ops::attention_fused_refusal(q, k, v);
  if (why_not_fused != nullptr) *why_not_fused = why;
  return why.empty() ? AttentionImpl::Fused : AttentionImpl::Composed;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double dropout_p,
                                    AttentionImpl impl) {
  return scaled_dot_product_attention(q, k, v, Tensor(), causal, dropout_p, impl);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    bool causal, double dropout_p, AttentionImpl impl) {
  const char* name = "scaled_dot_product_attention";
  ops::check_floating(q, name, "q");
  ops::check_same({&q, &k, &v}, {"q", "k", "v"}, name);
  ops::check_backend(q, name);
  HG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), "[", name,
           "] expected q, k, v of equal rank >= 2, got q ", q.describe(), ", k ", k.describe(), ", v ", v.describe());
  const int64_t tq = q.size(-2), tk = k.size(-2), d = q.size(-1);
  HG_CHECK(k.size(-1) == d && v.size(-2) == tk, "[", name, "] expected k [.., Tk, ", d, "] and v [.., Tk, Dv], got q ",
           q.describe(), ", k ", k.describe(), ", v ", v.describe());
  HG_CHECK(tk >= 1, "[", name, "] expected at least one key, got k ", k.describe());
  HG_CHECK(!causal || tk >= tq, "[", name, "] causal attention needs at least as many keys as queries, got Tq = ", tq,
           " and Tk = ", tk);
  HG_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "[", name, "] dropout probability ", dropout_p,
           " is outside [0, 1)");
  if (attn_mask.defined()) {
    HG_CHECK(attn_mask.device() == q.device() && (attn_mask.dtype() == b8 || attn_mask.dtype() == q.dtype()), "[",
             name, "] attn_mask ", attn_mask.describe(),
             " must be bool, or of q's dtype (an additive mask), on q's device; q is ", q.describe());
    Shape scores = q.shape();
    scores.back() = tk;
    bool broadcasts = attn_mask.dim() <= int(scores.size());
    for (int d = 1; broadcasts && d <= attn_mask.dim(); ++d) {
      const int64_t m = attn_mask.size(-d), s = scores[scores.size() - size_t(d)];
      broadcasts = m == 1 || m == s;
    }
    HG_CHECK(broadcasts, "[", name, "] attn_mask ", attn_mask.describe(), " does not broadcast to the scores ",
             shape_str(scores), " (q's leading dimensions, Tq = ", tq, ", Tk = ", tk, ")");
  }
  if (impl == AttentionImpl::Composed) return ops::attention_composed(q, k, v, causal, dropout_p, attn_mask);
  const std::string why = ops::attention_fused_refusal(q, k, v, attn_mask);
  if (why.empty()) return ops::attention_fused(q, k, v, causal, dropout_p, attn_mask);
  HG_CHECK(impl == AttentionImpl::Auto, "[", name, "] the fused kernels do not take q ", q.describe(), ", k ",
           k.describe(), ", v ", v.describe(), ": ", why, " (AttentionImpl::Auto falls back to the composed path)");
  return ops::attention_composed(q, k, v, causal, dropout_p, attn_mask);
}

}  // namespace hg
