#include "layers/multihead_attention.h"

#include <array>
#include <cmath>
#include <limits>

#include "layers/init.h"

namespace hg::nn {

namespace {
// PyTorch's out_proj class, so that the printed tree reads as PyTorch's (a Linear in every other way).
class NonDynamicallyQuantizableLinear : public Linear {
 public:
  using Linear::Linear;
};

int64_t or_embed(int64_t dim, int64_t embed) { return dim > 0 ? dim : embed; }
}  // namespace

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& o) : options(o) {
  const int64_t e = o.embed_dim(), h = o.num_heads(), kdim = or_embed(o.kdim(), e), vdim = or_embed(o.vdim(), e);
  HG_CHECK(e > 0 && h > 0 && e % h == 0, "[MultiheadAttention] embed_dim (", e, ") must be a positive multiple of ",
           "num_heads (", h, ")");
  HG_CHECK(o.dropout() >= 0.0 && o.dropout() < 1.0, "[MultiheadAttention] dropout ", o.dropout(), " is outside [0, 1)");
  if (kdim == e && vdim == e) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
    init::xavier_uniform_(in_proj_weight);
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({e, e}));
    k_proj_weight = register_parameter("k_proj_weight", empty({e, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({e, vdim}));
    for (const Tensor& w : {q_proj_weight, k_proj_weight, v_proj_weight}) init::xavier_uniform_(w);
  }
  if (o.bias()) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * e}));
  out_proj = register_module("out_proj", std::make_shared<NonDynamicallyQuantizableLinear>(e, e, o.bias()));
  if (o.bias()) init::zeros_(out_proj->bias);
}

std::array<Tensor, 3> MultiheadAttention::project(const Tensor& query, const Tensor& key, const Tensor& value) const {
  const int64_t e = options.embed_dim();
  auto bias_part = [&](int64_t i) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * e, e) : Tensor(); };
  if (in_proj_weight.defined()) {
    if (query.impl() == key.impl() && key.impl() == value.impl()) {  // self-attention: one GEMM
      const Tensor qkv = linear(query, in_proj_weight, in_proj_bias);
      return {qkv.narrow(-1, 0, e), qkv.narrow(-1, e, e), qkv.narrow(-1, 2 * e, e)};
    }
    return {linear(query, in_proj_weight.narrow(0, 0, e), bias_part(0)),
            linear(key, in_proj_weight.narrow(0, e, e), bias_part(1)),
            linear(value, in_proj_weight.narrow(0, 2 * e, e), bias_part(2))};
  }
  return {linear(query, q_proj_weight, bias_part(0)), linear(key, k_proj_weight, bias_part(1)),
          linear(value, v_proj_weight, bias_part(2))};
}

Tensor MultiheadAttention::combined_mask(const AttentionMasks& m, int64_t n, int64_t l, int64_t s, DType dtype) const {
  const char* who = "[MultiheadAttention]";
  const int64_t h = options.num_heads();
  // Each mask in scaled_dot_product_attention's convention: bool true = seen, or additive.
  auto convert = [&](const Tensor& mask) { return mask.dtype() == DType::b8 ? logical_not(mask) : mask.to(dtype); };
  Tensor attn;
  if (m.attn_mask.defined()) {
    const Tensor& a = m.attn_mask;
    const bool ok = (a.dim() == 2 && a.size(0) == l && a.size(1) == s) ||
                    (a.dim() == 3 && a.size(0) == n * h && a.size(1) == l && a.size(2) == s);
    HG_CHECK(ok, who, " attn_mask ", a.describe(), " does not fit: expected [", l, ", ", s, "] or [", n * h, ", ", l,
             ", ", s, "] (N * num_heads, L, S)");
    attn = convert(a.dim() == 3 ? a.reshape({n, h, l, s}) : a);
  }
  Tensor padding;
  if (m.key_padding_mask.defined()) {
    const Tensor& p = m.key_padding_mask;
    HG_CHECK(p.dim() == 2 && p.size(0) == n && p.size(1) == s, who, " key_padding_mask ", p.describe(),
             " does not fit: expected [", n, ", ", s, "] (N, S)");
    padding = convert(p).view({n, 1, 1, s});
  }
  if (!attn.defined() || !padding.defined()) return attn.defined() ? attn : padding;
  const bool attn_bool = attn.dtype() == DType::b8, padding_bool = padding.dtype() == DType::b8;
  if (attn_bool && padding_bool) return logical_and(attn, padding);
  // One of them additive: the other becomes 0 where seen and -inf where hidden, and they add.
  auto additive = [&](const Tensor& mask) {
    const double hidden = -std::numeric_limits<double>::infinity();
    return mask.dtype() == DType::b8 ? where(mask, 0.0, full({1}, hidden, dtype, mask.device())) : mask;
  };
  return additive(attn) + additive(padding);
}

namespace {

// softmax(q k^T / sqrt(D) + mask) @ v with the weights kept (PyTorch's need_weights path: q scaled first,
// the weights after dropout). q [N, H, L, D], k and v [N, H, S, D]; mask in scaled_dot_product_attention's
// convention (bool true = seen, or additive), broadcastable to [N, H, L, S], or undefined.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                          double dropout_p, Tensor& weights) {
  const int64_t l = q.size(2), s = k.size(2);
  Tensor scores = matmul(q / std::sqrt(double(q.size(3))), k.transpose(-2, -1));
  if (mask.defined())
    scores = mask.dtype() == DType::b8 ? masked_fill(scores, logical_not(mask), -INFINITY) : scores + mask;
  if (causal) {  // query i sees keys j <= i + (S - L)
    const Tensor rows = arange(double(s - l), double(s), 1.0, DType::f32, q.device()).view({l, 1});
    const Tensor cols = arange(0.0, double(s), 1.0, DType::f32, q.device()).view({1, s});
    scores = masked_fill(scores, gt(cols, rows), -INFINITY);
  }
  weights = softmax(scores, -1);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p);
  return matmul(weights, v);
}

}  // namespace

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks) {
  ModuleScope scope(*this);
  return attend(query, key, value, masks, nullptr);
}

AttentionOutput MultiheadAttention::forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                                         const AttentionMasks& masks, bool average_attn_weights) {
  ModuleScope scope(*this);
  AttentionOutput out;
  out.output = attend(query, key, value, masks, &out.weights);
  if (average_attn_weights) out.weights = mean(out.weights, {1});
  return out;
}

Tensor MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                  const AttentionMasks& masks, Tensor* weights) {
  const char* who = "[MultiheadAttention]";
  const int64_t e = options.embed_dim(), h = options.num_heads(), d = e / h;
  const int64_t kdim = or_embed(options.kdim(), e), vdim = or_embed(options.vdim(), e);
  HG_CHECK(query.dim() == 3 && query.size(2) == e && key.dim() == 3 && key.size(2) == kdim && value.dim() == 3 &&
               value.size(2) == vdim,
           who, " expected query [.., .., ", e, "], key [.., .., ", kdim, "], value [.., .., ", vdim, "], got ",
           query.describe(), ", ", key.describe(), ", ", value.describe());
  // Batch first inside: [N, T, E].
  auto batch_first = [&](const Tensor& t) { return options.batch_first() ? t : t.transpose(0, 1); };
  const bool self = query.impl() == key.impl() && key.impl() == value.impl();
  const Tensor qb = batch_first(query), kb = self ? qb : batch_first(key), vb = self ? qb : batch_first(value);
  const int64_t n = qb.size(0), l = qb.size(1), s = kb.size(1);
  HG_CHECK(kb.size(0) == n && vb.size(0) == n && vb.size(1) == s, who, " key and value must hold ", n,
           " sequences of one length, as the query's batch; got ", key.describe(), " and ", value.describe());
  auto [q, k, v] = self ? project(qb, qb, qb) : project(qb, kb, vb);
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({n, len, h, d}).transpose(1, 2); };
  const Tensor mask = combined_mask(masks, n, l, s, q.dtype());
  const double p = is_training() ? options.dropout() : 0.0;
  Tensor y;
  if (weights != nullptr) {
    y = composed_attention(heads(q, l), heads(k, s), heads(v, s), mask, masks.is_causal, p, *weights);
  } else if (mask.defined()) {
    y = scaled_dot_product_attention(heads(q, l), heads(k, s), heads(v, s), mask, masks.is_causal, p);
  } else {
    y = scaled_dot_product_attention(heads(q, l), heads(k, s), heads(v, s), masks.is_causal, p);
  }
  const Tensor merged = out_proj->forward(y.transpose(1, 2).reshape({n, l, e}));
  return options.batch_first() ? merged : merged.transpose(0, 1);
}

}  // namespace hg::nn
