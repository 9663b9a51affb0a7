#pragma once
// Text generation with a GPT: one sequence, a token at a time, sampled on the host (layers/sampling.h).
//
//   std::vector<int64_t> ids = generate(model, prompt, GenerationOptions().max_tokens(100).temperature(0.8)
//                                                         .top_k(40).seed(1), [](int64_t id) { show(id); });
//
// With the KV cache (use_cache, the default) the prompt runs once (prefill) and each new token runs alone
// against the cache (GPT::forward(ids, cache)): O(T) per token. Without it every step runs the model on
// the whole window (the last `context` tokens) and reads the last row: O(T^2) per token, the reference
// the cache is tested against. Both give the same tokens, to the logits' rounding, while the sequence fits
// the context.
//
// Past the context the two slide differently:
//   - without the cache the window moves one token per step (positions 0 .. context - 1 of the latest
//     `context` tokens);
//   - with the cache, when it is full, it is cleared and refilled (one prefill) from the latest
//     max(1, context / 2) tokens, then decoding continues into the freed half: a recomputation every
//     context / 2 tokens, so still O(T) per token on average, each token seeing at least context / 2 of
//     its past (the uncached window sees context - 1).
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/options.h"
#include "layers/sampling.h"

namespace hg::nn {

class GPT;

struct GenerationOptions {
  HG_OPTION(GenerationOptions, int64_t, max_tokens, 64);   // at most this many new tokens (>= 0)
  HG_OPTION(GenerationOptions, double, temperature, 1.0);  // 0: greedy
  HG_OPTION(GenerationOptions, int64_t, top_k, 0);         // 0: off
  HG_OPTION(GenerationOptions, double, top_p, 1.0);        // 1: off
  HG_OPTION(GenerationOptions, uint64_t, seed, 0);         // the sampler's std::mt19937_64 seed
  HG_OPTION(GenerationOptions, bool, use_cache, true);
  // A token id that ends generation when drawn (e.g. <|endoftext|>); it is neither returned nor passed
  // to on_token. -1: none.
  HG_OPTION(GenerationOptions, int64_t, stop_at, -1);
  // Draw only ids < vocab_limit (a tokenizer smaller than a padded model vocabulary); 0: every id.
  HG_OPTION(GenerationOptions, int64_t, vocab_limit, 0);
  // Ids never drawn (their logits set to -inf before sampling): e.g. the holes of a tokenizer whose ids
  // are not dense, which have no bytes to decode. Each in [0, vocab).
  HG_OPTION(GenerationOptions, std::vector<int64_t>, banned, {});

 public:
  // Throws naming the offending option.
  void validate() const;
  SamplingOptions sampling() const;
};

// The new tokens (the prompt not included) generated after `prompt` (1 .. context ids, each in
// [0, vocab); an hg::Error names the first that is not). `on_token`, when set, is called with each new
// token as soon as it is drawn (streaming); no banned id and no id >= vocab_limit is ever drawn (when
// every allowed id is banned, an hg::Error says so). The model runs in eval mode without autograd; its mode is
// restored after.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt, const GenerationOptions& options,
                              const std::function<void(int64_t)>& on_token = {});

}  // namespace hg::nn
