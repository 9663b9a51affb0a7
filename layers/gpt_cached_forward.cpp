// GPT::forward(ids, cache): the incremental forward that generation runs (layers/kv_cache.h).
//   x = wte[ids] + wpe[past .. past + T_new)        past = cache.length()
//   block i: its attention writes the new keys and values into cache layer i, then attends over rows
//            0 .. past + T_new - 1 with the causal rule inside the new tokens (Block::forward_cached)
//   logits = ln_f(x) wte^T                           [B, T_new, vocab]
//            (forward_last: of x's last row only       [B, 1, vocab])
// Prefill (T_new > 1, empty cache) and decoding (T_new = 1) are the same call. It is inference: no
// autograd graph (NoGradGuard) and no dropout (the model runs in eval mode for the call, its mode
// restored after), so its logits equal the matching rows of forward() on the whole sequence in eval mode.
#include "engine/autograd.h"
#include "layers/gpt.h"
#include "layers/kv_cache.h"

namespace hg::nn {

Tensor GPT::forward(const Tensor& ids, KVCache& cache) { return cached_step(ids, cache, /*last_only=*/false); }

Tensor GPT::forward_last(const Tensor& ids, KVCache& cache) { return cached_step(ids, cache, /*last_only=*/true); }

Tensor GPT::cached_step(const Tensor& ids, KVCache& cache, bool last_only) {
  ModuleScope scope(*this);
  NoGradGuard no_grad;
  EvalModeScope eval_scope(*this);
  HG_CHECK(ids.dim() == 2, "[GPT] expected ids [B, T], got ", ids.describe());
  const int64_t B = ids.size(0), T = ids.size(1), past = cache.length();
  const Tensor& wte_weight = wte->weight;
  HG_CHECK(B == cache.batch(), "[GPT] ids ", ids.describe(), " have ", B, " rows; the KV cache holds ", cache.batch());
  HG_CHECK(cache.layers() == config.n_layer(), "[GPT] the KV cache has ", cache.layers(), " layers; the model has ",
           config.n_layer());
  HG_CHECK(cache.dtype() == wte_weight.dtype() && cache.device() == wte_weight.device(), "[GPT] the KV cache is ",
           dtype_name(cache.dtype()), " on ", cache.device().str(), "; the model is ", dtype_name(wte_weight.dtype()),
           " on ", wte_weight.device().str(), " (build the cache after converting the model)");
  HG_CHECK(T >= 1, "[GPT] expected at least one new token, got ids ", ids.describe());
  HG_CHECK(past + T <= cache.capacity(), "[GPT] ", T, " new tokens after ", past,
           " cached ones exceed the KV cache's capacity of ", cache.capacity(), " positions (the model's context is ",
           config.context(), ")");

  std::vector<int64_t> position_values(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) position_values[size_t(t)] = past + t;
  const Tensor positions = from_vector(position_values, {T}, i64, ids.device());
  Tensor x = wte->forward(ids) + wpe->forward(positions);
  for (size_t i = 0; i < h.size(); ++i) {
    x = h[i]->forward_cached(x, cache.keys(int64_t(i)), cache.values(int64_t(i)), past);
  }
  cache.advance(T);
  if (last_only && T > 1) x = x.narrow(1, T - 1, 1).contiguous();  // the rows before it are only in the cache
  return matmul(ln_f->forward(x), wte_weight.t());
}

}  // namespace hg::nn
