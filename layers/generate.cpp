// generate() (layers/generate.h): the sampling loop, with the KV cache or recomputing the window.
// Each step copies the last row of logits to the host (one host read per token) and draws from it.
#include "layers/generate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>

#include "engine/autograd.h"
#include "layers/gpt.h"
#include "layers/kv_cache.h"

namespace hg::nn {

void GenerationOptions::validate() const {
  HG_CHECK(max_tokens_ >= 0, "[generate] max_tokens ", max_tokens_, " is invalid; expected >= 0");
  HG_CHECK(vocab_limit_ >= 0, "[generate] vocab_limit ", vocab_limit_, " is invalid; expected 0 (off) or a count > 0");
  HG_CHECK(stop_at_ >= -1, "[generate] stop_at ", stop_at_, " is invalid; expected a token id or -1 (none)");
  sampling().validate();
}

SamplingOptions GenerationOptions::sampling() const {
  return SamplingOptions().temperature(temperature_).top_k(top_k_).top_p(top_p_);
}

namespace {

// ids as a [1, n] tensor on the model's device.
Tensor row_of(std::span<const int64_t> ids, const Device& device) {
  return from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {1, int64_t(ids.size())}, i64, device);
}

// The last position's logits [.., T, V] of the one sequence, on the host in fp32.
std::vector<float> last_row(const Tensor& logits) { return logits.select(1, -1).to_vector<float>(); }

}  // namespace

std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, const GenerationOptions& options,
                              const std::function<void(int64_t)>& on_token) {
  options.validate();
  const int64_t context = model.config.context(), vocab = model.config.vocab_size();
  HG_CHECK(options.vocab_limit() <= vocab, "[generate] vocab_limit ", options.vocab_limit(),
           " exceeds the model's vocabulary of ", vocab);
  const size_t drawn = size_t(options.vocab_limit() > 0 ? options.vocab_limit() : vocab);
  for (int64_t id : options.banned()) {
    HG_CHECK(id >= 0 && id < vocab, "[generate] banned id ", id, " is invalid; expected an id in [0, ", vocab, ")");
  }
  HG_CHECK(!prompt.empty(), "[generate] the prompt is empty; expected at least one token");
  HG_CHECK(int64_t(prompt.size()) <= context, "[generate] the prompt has ", prompt.size(),
           " tokens; the model's context is ", context);
  for (size_t i = 0; i < prompt.size(); ++i) {
    HG_CHECK(prompt[i] >= 0 && prompt[i] < vocab, "[generate] prompt token ", i, " is ", prompt[i],
             "; expected an id in [0, ", vocab, ")");
  }
  NoGradGuard no_grad;
  EvalModeScope eval_scope(model);
  const Device device = model.wte->weight.device();
  const SamplingOptions sampling = options.sampling();
  TokenSampler sampler(options.seed());

  std::vector<int64_t> sequence = prompt, generated;
  std::optional<KVCache> cache;
  if (options.use_cache()) cache.emplace(model, 1, context);
  auto logits_of_next = [&]() -> std::vector<float> {
    const int64_t n = int64_t(sequence.size());
    if (!cache) {
      const int64_t window = std::min(n, context);
      return last_row(model.forward(row_of(std::span(sequence).subspan(size_t(n - window)), device)));
    }
    if (cache->length() == 0) return last_row(model.forward_last(row_of(sequence, device), *cache));  // the prompt
    if (cache->length() == context) {  // full: refill from the latest half context
      const int64_t keep = std::max<int64_t>(1, context / 2);
      cache->clear();
      return last_row(model.forward_last(row_of(std::span(sequence).subspan(size_t(n - keep)), device), *cache));
    }
    return last_row(model.forward_last(row_of(std::span(sequence).subspan(size_t(n - 1)), device), *cache));
  };

  while (int64_t(generated.size()) < options.max_tokens()) {
    std::vector<float> logits = logits_of_next();
    for (int64_t id : options.banned()) logits[size_t(id)] = -INFINITY;
    const int64_t token = sampler.next(std::span(logits).first(drawn), sampling);
    if (token == options.stop_at()) break;
    sequence.push_back(token);
    generated.push_back(token);
    if (on_token) on_token(token);
  }
  return generated;
}

}  // namespace hg::nn
