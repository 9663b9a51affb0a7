// KVCache (layers/kv_cache.h): per-layer [B, H, capacity, D] key and value tensors, allocated once,
// and the count of positions they hold.
#include "layers/kv_cache.h"

#include "layers/gpt.h"

namespace hg::nn {

KVCache::KVCache(const GPTConfig& config, int64_t batch, int64_t capacity, DType dtype, const Device& device)
    : batch_(batch), capacity_(capacity) {
  config.validate();
  HG_CHECK(batch >= 1, "[KVCache] expected a batch of at least 1 sequence, got ", batch);
  HG_CHECK(capacity >= 1 && capacity <= config.context(), "[KVCache] capacity ", capacity,
           " is outside [1, context]: the model's context is ", config.context(), " positions");
  HG_CHECK(is_floating(dtype), "[KVCache] expected a floating dtype, got ", dtype_name(dtype));
  const int64_t heads = config.n_head(), head_dim = config.n_embd() / config.n_head();
  const Shape shape{batch, heads, capacity, head_dim};
  for (int64_t l = 0; l < config.n_layer(); ++l) {
    keys_.push_back(empty(shape, dtype, device));
    values_.push_back(empty(shape, dtype, device));
  }
}

KVCache::KVCache(const GPT& model, int64_t batch, int64_t capacity)
    : KVCache(model.config, batch, capacity == 0 ? model.config.context() : capacity, model.wte->weight.dtype(),
              model.wte->weight.device()) {}

void KVCache::rewind(int64_t n) {
  HG_CHECK(n >= 0 && n <= length_, "[KVCache::rewind] cannot keep ", n, " positions of a cache holding ", length_,
           "; expected 0 <= n <= length");
  length_ = n;
}

const Tensor& KVCache::keys(int64_t layer) const {
  HG_CHECK(layer >= 0 && layer < layers(), "[KVCache] layer ", layer, " is outside [0, ", layers(), ")");
  return keys_[size_t(layer)];
}

const Tensor& KVCache::values(int64_t layer) const {
  HG_CHECK(layer >= 0 && layer < layers(), "[KVCache] layer ", layer, " is outside [0, ", layers(), ")");
  return values_[size_t(layer)];
}

void KVCache::advance(int64_t n) {
  HG_CHECK(n >= 0 && length_ + n <= capacity_, "[KVCache] ", length_, " + ", n, " positions exceed the capacity of ",
           capacity_);
  length_ += n;
}

}  // namespace hg::nn
