#include "layers/gpt.h"

#include <algorithm>
#include <cmath>

#include "engine/recompute.h"
#include "engine/saved_tensor.h"

#include "layers/init.h"

namespace hg::nn {

void GPTConfig::validate() const {
  HG_CHECK(vocab_size_ > 0, "[GPT] expected vocab_size > 0, got ", vocab_size_);
  HG_CHECK(context_ > 0, "[GPT] expected context > 0, got ", context_);
  HG_CHECK(n_layer_ > 0, "[GPT] expected n_layer > 0, got ", n_layer_);
  HG_CHECK(recompute_every_ >= 0, "[GPT] expected recompute_every >= 0 (0: off, K: segments of K blocks), got ",
           recompute_every_);
  block_options().validate();
}

TransformerOptions GPTConfig::block_options() const {
  return TransformerOptions()
      .n_embd(n_embd_)
      .n_head(n_head_)
      .dropout(dropout_)
      .layer_norm_eps(layer_norm_eps_)
      .activation(activation_)
      .attention(attention_);
}

GPT::GPT(const GPTConfig& c, Uninitialised) : config(c), recompute_every_(c.recompute_every()) {
  c.validate();
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size(), c.n_embd()));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.context(), c.n_embd()));
  for (int64_t i = 0; i < c.n_layer(); ++i) h.push_back(std::make_shared<Block>(c.block_options()));
  // "h" holds the blocks as children "0", "1", ... so names read h.{i}.attn...
  struct BlockList : Module {
    explicit BlockList(const std::vector<std::shared_ptr<Block>>& blocks) {
      for (size_t i = 0; i < blocks.size(); ++i) register_module(std::to_string(i), blocks[i]);
    }
  };
  register_module("h", std::make_shared<BlockList>(h));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd(), c.layer_norm_eps()));
}

GPT::GPT(const GPTConfig& c) : GPT(c, Uninitialised{}) {
  const double residual_std = 0.02 / std::sqrt(2.0 * double(c.n_layer()));
  for (auto& [name, p] : named_parameters()) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name.rfind("ln_", 0) == 0 || name.find(".ln_") != std::string::npos) continue;  // ones / zeros
    if (is_bias) {
      init::constant_(p, 0.0);
    } else {
      const bool residual = name.find("c_proj.weight") != std::string::npos;
      init::normal_(p, 0.0, residual ? residual_std : 0.02);
    }
  }
}

Tensor GPT::forward(const Tensor& ids) {
  ModuleScope scope(*this);
  return matmul(final_hidden(ids), wte->weight.t());
}

Tensor GPT::final_hidden(const Tensor& ids) {
  HG_CHECK(ids.dim() == 2, "[GPT] expected ids [B, T], got ", ids.describe());
  const int64_t T = ids.size(1);
  HG_CHECK(T >= 1 && T <= config.context(), "[GPT] sequence length ", T, " exceeds the model's context of ",
           config.context(), " positions");
  const Tensor positions = arange(T, i64, ids.device());
  const Tensor x = wte->forward(ids) + wpe->forward(positions);
  if (recompute_every_ > 0) {
    // A recompute region is a function of one tensor: within a segment of K blocks the K - 1 block
    // boundaries run fused (forward_pair), the segment's last add is plain, and its output -- the one
    // tensor the region keeps -- goes to the next segment's first ln_1 (or ln_f) unfused. Each segment
    // starts a group of saved tensors (activation offload brings groups back one ahead of use).
    const size_t segment = size_t(recompute_every_);
    Tensor stream = x;
    for (size_t first = 0; first < h.size(); first += segment) {
      const size_t last = std::min(h.size(), first + segment);
      auto run_segment = [this, first, last](const Tensor& input) {
        ResidualPair pair{input, Tensor()};
        for (size_t i = first; i < last; ++i) pair = h[i]->forward_pair(pair.base, pair.delta);
        return pair.base + pair.delta;
      };
      begin_saved_tensor_group();
      stream = recompute(run_segment, stream);
    }
    return ln_f->forward(stream);
  }
  // Without recompute the stream goes from block to block as base + delta, so every block's last
  // add runs fused with the next block's ln_1 (in that block's scope), and the last one's with ln_f.
  // Each block starts a group of saved tensors.
  ResidualPair pair{x, Tensor()};
  for (const auto& block : h) {
    begin_saved_tensor_group();
    pair = block->forward_pair(pair.base, pair.delta);
  }
  return add_then_norm(pair.base, pair.delta, *ln_f, h.back()->fuse_add_layer_norm).normalized;
}

void GPT::set_attention(AttentionImpl impl) {
  for (const auto& block : h) block->attn->attention = impl;
}

void GPT::set_recompute_every(int64_t k) {
  HG_CHECK(k >= 0, "[GPT] expected recompute_every >= 0 (0: off, K: segments of K blocks), got ", k);
  recompute_every_ = k;
}

Tensor GPT::loss(const Tensor& ids, const Tensor& targets) {
  ModuleScope scope(*this);
  if (!config.fused_classifier()) {
    const Tensor logits = forward(ids);
    return cross_entropy(logits.reshape({-1, config.vocab_size()}), targets.reshape({-1}));
  }
  HG_CHECK(targets.shape() == ids.shape(), "[GPT] expected targets ", targets.describe(), " of the shape of ids ",
           ids.describe());
  const Tensor x = final_hidden(ids);
  return linear_cross_entropy(x.reshape({-1, config.n_embd()}), wte->weight, targets.reshape({-1}));
}

}  // namespace hg::nn
