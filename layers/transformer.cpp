#include "layers/transformer.h"

namespace hg::nn {

void TransformerOptions::validate() const {
  HG_CHECK(n_embd_ > 0 && n_head_ > 0, "[transformer] expected n_embd > 0 and n_head > 0, got n_embd = ", n_embd_,
           ", n_head = ", n_head_);
  HG_CHECK(n_embd_ % n_head_ == 0, "[transformer] n_embd = ", n_embd_, " is not divisible by n_head = ", n_head_,
           "; expected n_embd % n_head == 0");
  HG_CHECK(mlp_ratio_ > 0, "[transformer] expected mlp_ratio > 0, got ", mlp_ratio_);
  HG_CHECK(dropout_ >= 0 && dropout_ < 1, "[transformer] dropout ", dropout_, " is outside [0, 1)");
  HG_CHECK(layer_norm_eps_ > 0, "[transformer] expected layer_norm_eps > 0, got ", layer_norm_eps_);
}

MLP::MLP(const TransformerOptions& o) : activation(o.activation()) {
  o.validate();
  c_fc = register_module("c_fc", std::make_shared<Linear>(o.n_embd(), o.mlp_ratio() * o.n_embd()));
  c_proj = register_module("c_proj", std::make_shared<Linear>(o.mlp_ratio() * o.n_embd(), o.n_embd()));
  drop = register_module("drop", std::make_shared<Dropout>(o.dropout()));
}

Tensor MLP::forward(const Tensor& x) {
  ModuleScope scope(*this);
  if (!fuse_bias_gelu) return drop->forward(c_proj->forward(gelu(c_fc->forward(x), activation)));
  // c_fc and the GELU as one op, which runs them the way the device does fastest (linear_gelu).
  Tensor hidden;
  {
    ModuleScope fc_scope(*c_fc);
    hidden = linear_gelu(x, c_fc->weight, c_fc->bias, activation);
  }
  return drop->forward(c_proj->forward(hidden));
}

CausalSelfAttention::CausalSelfAttention(const TransformerOptions& o)
    : n_head(o.n_head()), attention_dropout(o.dropout()), attention(o.attention()) {
  o.validate();
  c_attn = register_module("c_attn", std::make_shared<Linear>(o.n_embd(), 3 * o.n_embd()));
  c_proj = register_module("c_proj", std::make_shared<Linear>(o.n_embd(), o.n_embd()));
  drop = register_module("drop", std::make_shared<Dropout>(o.dropout()));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  ModuleScope scope(*this);
  HG_CHECK(x.dim() == 3, "[CausalSelfAttention] expected x [B, T, C], got ", x.describe());
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head;
  const Tensor qkv = c_attn->forward(x);  // [B, T, 3C]
  // Views only: [B, T, C] slice -> [B, T, H, D] -> [B, H, T, D]; the GEMMs read the strides.
  auto heads = [&](int64_t which) { return qkv.narrow(2, which * C, C).view({B, T, n_head, D}).transpose(1, 2); };
  const double p = is_training() ? attention_dropout : 0.0;
  if (attention_from_qkv && attention != AttentionImpl::Composed && attention_impl_for(heads(0), heads(1), heads(2)) == AttentionImpl::Fused)
    return drop->forward(c_proj->forward(attention_qkv(qkv, n_head, /*causal=*/true, p)));  // no split/merge copies
  const Tensor y = scaled_dot_product_attention(heads(0), heads(1), heads(2), /*causal=*/true, p, attention);
  return drop->forward(c_proj->forward(y.transpose(1, 2).reshape({B, T, C})));
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache,
                                           int64_t past) {
  ModuleScope scope(*this);
  HG_CHECK(x.dim() == 3, "[CausalSelfAttention] expected x [B, T, C], got ", x.describe());
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), D = C / n_head;
  const Shape cache_shape{B, n_head, k_cache.size(2), D};
  HG_CHECK(k_cache.shape() == cache_shape && v_cache.shape() == cache_shape,
           "[CausalSelfAttention] expected key and value caches [", B, ", ", n_head, ", capacity, ", D, "], got ",
           k_cache.describe(), " and ", v_cache.describe());
  HG_CHECK(past >= 0 && past + T <= k_cache.size(2), "[CausalSelfAttention] positions ", past, " .. ", past + T - 1,
           " do not fit a cache of capacity ", k_cache.size(2));
  const Tensor qkv = c_attn->forward(x);  // [B, T, 3C]
  auto heads = [&](int64_t which) { return qkv.narrow(2, which * C, C).view({B, T, n_head, D}).transpose(1, 2); };
  k_cache.narrow(2, past, T).copy_(heads(1));
  v_cache.narrow(2, past, T).copy_(heads(2));
  // Tq = T queries against Tk = past + T keys: the causal rule j <= i + (Tk - Tq) lets query i see
  // rows 0 .. past + i, exactly what it sees in the whole sequence.
  const Tensor y = scaled_dot_product_attention(heads(0), k_cache.narrow(2, 0, past + T),
                                                v_cache.narrow(2, 0, past + T), /*causal=*/true, 0.0, attention);
  return c_proj->forward(y.transpose(1, 2).reshape({B, T, C}));
}

Block::Block(const TransformerOptions& o) {
  o.validate();
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(o.n_embd(), o.layer_norm_eps()));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(o));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(o.n_embd(), o.layer_norm_eps()));
  mlp = register_module("mlp", std::make_shared<MLP>(o));
}

AddLayerNorm add_then_norm(const Tensor& base, const Tensor& delta, LayerNorm& norm, bool fused) {
  if (fused) {
    ModuleScope scope(norm);
    return add_layer_norm(base, delta, norm.weight, norm.bias, norm.eps);
  }
  AddLayerNorm out;
  out.sum = base + delta;
  out.normalized = norm.forward(out.sum);
  return out;
}

Tensor Block::forward(const Tensor& x) {
  const ResidualPair out = forward_pair(x, Tensor());
  return out.base + out.delta;
}

ResidualPair Block::forward_pair(const Tensor& base, const Tensor& delta) {
  ModuleScope scope(*this);
  Tensor x = base, a;
  if (delta.defined()) {
    AddLayerNorm in = add_then_norm(base, delta, *ln_1, fuse_add_layer_norm);
    x = std::move(in.sum);
    a = std::move(in.normalized);
  } else {
    a = ln_1->forward(x);
  }
  const AddLayerNorm h = add_then_norm(x, attn->forward(a), *ln_2, fuse_add_layer_norm);
  return {h.sum, mlp->forward(h.normalized)};
}

Tensor Block::forward_cached(const Tensor& x, const Tensor& k_cache, const Tensor& v_cache, int64_t past) {
  ModuleScope scope(*this);
  const Tensor att = attn->forward_cached(ln_1->forward(x), k_cache, v_cache, past);
  const AddLayerNorm h = add_then_norm(x, att, *ln_2, fuse_add_layer_norm);
  return h.sum + mlp->forward(h.normalized);
}

}  // namespace hg::nn
