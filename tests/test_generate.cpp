// Generation on the CPU: GPT::forward(ids, KVCache&) against the whole-sequence forward (prefill, token
// by token, chunks, a rewind, both attention paths), cached against uncached generate() (greedy and
// sampled, prompts of 1 and several tokens, past the context), the sampler's rules on hand-made logits
// (greedy, top-k, top-p, temperature by counts), and the errors.
//
// Models are random GPTs whose weights are drawn wider than GPT-2's init (N(0, 0.1)), so their next-token
// distributions are peaked and the top logits are far apart compared with fp32 rounding (~1e-6): equal
// logits to rounding then mean equal tokens. Seeds come from HG_TEST_SEED (reported).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "engine/random.h"
#include "layers/generate.h"
#include "layers/init.h"
#include "layers/kv_cache.h"
#include "layers/nn.h"
#include "support/check_error.h"
#include "support/test_seed.h"

using namespace hg;
using namespace hg::nn;

namespace {

GPTConfig small_config() { return GPTConfig().vocab_size(61).context(24).n_layer(2).n_head(2).n_embd(32); }

std::shared_ptr<GPT> random_model(const GPTConfig& config, std::mt19937& rng) {
  manual_seed(rng());
  auto model = std::make_shared<GPT>(config);
  for (auto& [name, p] : model->named_parameters()) {
    if (name.find("ln_") == std::string::npos) init::normal_(p, 0.0, 0.1);
  }
  model->eval();
  return model;
}

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, std::mt19937& rng) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = int64_t(rng() % uint64_t(vocab));
  return ids;
}

// Largest |a - b| over the largest |a| (at least 1).
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double scale = 1, worst = 0;
  for (double v : x) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::isnan(y[i]) ? INFINITY : std::abs(x[i] - y[i]));
  return worst / scale;
}

// Every cached position NaN, so a read of a row not written yet shows in the logits.
void poison(const KVCache& cache) {
  for (int64_t l = 0; l < cache.layers(); ++l) {
    cache.keys(l).fill_(std::numeric_limits<double>::quiet_NaN());
    cache.values(l).fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

constexpr double kF32Tolerance = 2e-5;  // fp32 rounding of the same sums in other orders

}  // namespace

TEST_CASE("GPT::forward with a KV cache equals the whole forward, prefill then token by token") {
  std::mt19937 rng = testing::seeded_rng();
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composed}) {
    const std::string impl_name = attention_impl_name(impl);
    CAPTURE(impl_name);
    auto model = random_model(small_config(), rng);
    model->set_attention(impl);
    const int64_t B = 2, T = 20;
    const Tensor ids = from_vector(random_ids(B * T, 61, rng), {B, T});
    const Tensor whole = model->forward(ids);
    KVCache cache(*model, B);
    CHECK(cache.capacity() == 24);
    poison(cache);
    // Prefill 7, then 1 at a time to 13, a chunk of 4, then 1 at a time to the end.
    std::vector<int64_t> cuts{0, 7};
    for (int64_t t = 8; t <= 13; ++t) cuts.push_back(t);
    cuts.push_back(17);
    for (int64_t t = 18; t <= T; ++t) cuts.push_back(t);
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int64_t start = cuts[c], n = cuts[c + 1] - cuts[c];
      CAPTURE(start);
      REQUIRE(cache.length() == start);
      const Tensor logits = model->forward(ids.narrow(1, start, n).contiguous(), cache);
      CHECK_FALSE(logits.requires_grad());
      REQUIRE(logits.shape() == Shape{B, n, 61});
      CHECK(relative_error(whole.narrow(1, start, n), logits) < kF32Tolerance);
    }
    CHECK(cache.length() == T);
  }
}

TEST_CASE("GPT::forward_last gives forward(ids, cache)'s last row only, and advances the cache the same") {
  std::mt19937 rng = testing::seeded_rng();
  auto model = random_model(small_config(), rng);
  const int64_t B = 2, T = 20;
  const Tensor ids = from_vector(random_ids(B * T, 61, rng), {B, T});
  KVCache all_rows(*model, B), last_only(*model, B);
  poison(all_rows);
  poison(last_only);
  // A prefill of 7, single tokens, a chunk of 5, single tokens.
  for (const auto& [start, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {7, 1}, {8, 1}, {9, 5}, {14, 1}}) {
    CAPTURE(start);
    const Tensor chunk = ids.narrow(1, start, n).contiguous();
    const Tensor every = model->forward(chunk, all_rows);
    const Tensor last = model->forward_last(chunk, last_only);
    REQUIRE(every.shape() == Shape{B, n, 61});
    REQUIRE(last.shape() == Shape{B, 1, 61});
    CHECK(last_only.length() == all_rows.length());
    CHECK(relative_error(every.narrow(1, n - 1, 1), last) < kF32Tolerance);
    CHECK_FALSE(last.requires_grad());
  }
  // The caches hold the same keys and values.
  for (int64_t l = 0; l < all_rows.layers(); ++l) {
    CHECK(relative_error(all_rows.keys(l).narrow(2, 0, 15), last_only.keys(l).narrow(2, 0, 15)) == 0.0);
    CHECK(relative_error(all_rows.values(l).narrow(2, 0, 15), last_only.values(l).narrow(2, 0, 15)) == 0.0);
  }
}

TEST_CASE("a rewound KV cache continues like the whole forward of the new sequence") {
  std::mt19937 rng = testing::seeded_rng();
  auto model = random_model(small_config(), rng);
  const int64_t T = 18, keep = 9;
  std::vector<int64_t> first = random_ids(T, 61, rng), second = random_ids(T, 61, rng);
  std::copy(first.begin(), first.begin() + keep, second.begin());  // a shared prefix of 9 tokens
  KVCache cache(*model, 1);
  poison(cache);
  (void)model->forward(from_vector(first, {1, T}), cache);
  cache.rewind(keep);
  CHECK(cache.length() == keep);
  const Tensor whole = model->forward(from_vector(second, {1, T}));
  for (int64_t t = keep; t < T; ++t) {
    const Tensor logits = model->forward(from_vector(std::vector<int64_t>{second[size_t(t)]}, {1, 1}), cache);
    CHECK(relative_error(whole.narrow(1, t, 1), logits) < kF32Tolerance);
  }
  cache.clear();
  CHECK(cache.length() == 0);
  CHECK(relative_error(whole, model->forward(from_vector(second, {1, T}), cache)) < kF32Tolerance);
}

TEST_CASE("the cached forward runs in eval mode without autograd and restores the model's mode") {
  std::mt19937 rng = testing::seeded_rng();
  auto model = random_model(GPTConfig(small_config()).dropout(0.5), rng);
  const Tensor ids = from_vector(random_ids(10, 61, rng), {1, 10});
  const Tensor eval_logits = model->forward(ids);
  model->train();
  KVCache cache(*model, 1);
  const Tensor logits = model->forward(ids, cache);
  CHECK(model->is_training());
  CHECK(model->h[0]->mlp->drop->is_training());
  CHECK_FALSE(logits.requires_grad());
  CHECK(relative_error(eval_logits, logits) < kF32Tolerance);  // no dropout drawn
}

TEST_CASE("EvalModeScope puts every module in eval and gives each back its own flag, a child in another mode too") {
  std::mt19937 rng = testing::seeded_rng();
  auto model = random_model(GPTConfig(small_config()).dropout(0.5), rng);
  auto modes = [&] {
    std::vector<bool> flags{model->is_training()};
    std::vector<const Module*> stack{model.get()};
    while (!stack.empty()) {
      const Module* m = stack.back();
      stack.pop_back();
      for (const auto& [name, child] : m->children()) {
        flags.push_back(child->is_training());
        stack.push_back(child.get());
      }
    }
    return flags;
  };
  // Training, except one dropout deep in block 1 and block 0's attention, left in eval.
  model->train();
  model->h[1]->mlp->drop->eval();
  model->h[0]->attn->eval();
  const std::vector<bool> before = modes();
  REQUIRE(std::count(before.begin(), before.end(), false) >= 2);
  REQUIRE(std::count(before.begin(), before.end(), true) >= 2);
  {
    EvalModeScope scope(*model);
    const std::vector<bool> inside = modes();
    CHECK(std::count(inside.begin(), inside.end(), true) == 0);
  }
  CHECK(modes() == before);
  // The same through the cached forward and generate(), and when they throw.
  KVCache cache(*model, 1);
  model->forward(from_vector(random_ids(4, 61, rng), {1, 4}), cache);
  CHECK(modes() == before);
  generate(*model, random_ids(3, 61, rng), GenerationOptions().max_tokens(4).temperature(0));
  CHECK(modes() == before);
  CHECK_THROWS(model->forward(from_vector(random_ids(40, 61, rng), {1, 40}), cache));
  CHECK(modes() == before);
  // An eval root with a training child: the child comes back training.
  model->eval();
  model->h[0]->mlp->train();
  const std::vector<bool> mixed = modes();
  generate(*model, random_ids(3, 61, rng), GenerationOptions().max_tokens(2).temperature(0));
  CHECK(modes() == mixed);
  CHECK(model->h[0]->mlp->is_training());
}

TEST_CASE("cached and uncached generation give identical tokens") {
  std::mt19937 rng = testing::seeded_rng();
  auto model = random_model(small_config(), rng);
  const std::vector<GenerationOptions> settings{
      GenerationOptions().temperature(0),
      GenerationOptions().temperature(0.9).seed(rng()),
      GenerationOptions().temperature(1.3).top_k(12).top_p(0.9).seed(rng()),
  };
  for (const int64_t prompt_length : {1, 6}) {
    const std::vector<int64_t> prompt = random_ids(prompt_length, 61, rng);
    for (const GenerationOptions& base : settings) {
      CAPTURE(prompt_length);
      CAPTURE(base.temperature());
      const int64_t n = 24 - prompt_length;  // up to the full context
      std::vector<int64_t> streamed;
      const std::vector<int64_t> cached =
          generate(*model, prompt, GenerationOptions(base).max_tokens(n).use_cache(true),
                   [&](int64_t id) { streamed.push_back(id); });
      const std::vector<int64_t> uncached =
          generate(*model, prompt, GenerationOptions(base).max_tokens(n).use_cache(false));
      REQUIRE(cached.size() == size_t(n));
      CHECK(cached == uncached);
      CHECK(streamed == cached);
      for (int64_t id : cached) CHECK((id >= 0 && id < 61));
    }
  }
  // The sampled runs draw: another seed gives another sequence, the same seed the same one.
  const std::vector<int64_t> prompt = random_ids(3, 61, rng);
  const auto sampled = [&](uint64_t seed) {
    // Temperature 5 makes the 61-way draws nearly uniform: two seeds giving the same 20 tokens would be
    // a chance of about 61^-20, not a near-tie of a peaked distribution.
    return generate(*model, prompt, GenerationOptions().max_tokens(20).temperature(5.0).seed(seed));
  };
  CHECK(sampled(11) == sampled(11));
  CHECK(sampled(11) != sampled(12));
}

TEST_CASE("bf16 on the CPU: the cached forward within bf16 rounding, greedy tokens equal but at near-ties") {
  std::mt19937 rng = testing::seeded_rng();
  constexpr double kBf16Tolerance = 8 * 0x1p-8;  // as test_cuda_generate: bf16's 8 significant bits, a few layers deep
  auto model = random_model(small_config(), rng);
  model->to(bf16);
  const int64_t T = 16;
  const Tensor ids = from_vector(random_ids(T, 61, rng), {1, T});
  const Tensor whole = model->forward(ids);
  REQUIRE(whole.dtype() == bf16);
  KVCache cache(*model, 1);
  poison(cache);
  double worst = relative_error(whole.narrow(1, 0, 5), model->forward(ids.narrow(1, 0, 5).contiguous(), cache));
  for (int64_t t = 5; t < T; ++t)
    worst =
        std::max(worst, relative_error(whole.narrow(1, t, 1), model->forward(ids.narrow(1, t, 1).contiguous(), cache)));
  MESSAGE("bf16 cached vs whole forward: largest relative error ", worst);
  CHECK(worst < kBf16Tolerance);

  const std::vector<int64_t> prompt = random_ids(3, 61, rng);
  const GenerationOptions greedy = GenerationOptions().temperature(0).max_tokens(12);
  const std::vector<int64_t> cached = generate(*model, prompt, greedy);
  const std::vector<int64_t> uncached = generate(*model, prompt, GenerationOptions(greedy).use_cache(false));
  REQUIRE(cached.size() == 12);
  REQUIRE(uncached.size() == 12);
  const size_t first = size_t(std::mismatch(cached.begin(), cached.end(), uncached.begin()).first - cached.begin());
  if (first < cached.size()) {  // allowed only where the two best logits tie to bf16 rounding
    std::vector<int64_t> sequence = prompt;
    sequence.insert(sequence.end(), uncached.begin(), uncached.begin() + int64_t(first));
    const std::vector<float> last =
        model->forward(from_vector(sequence, {1, int64_t(sequence.size())})).select(1, -1).to_vector<float>();
    double scale = 1;
    for (float x : last) scale = std::max(scale, double(std::abs(x)));
    const double gap = std::abs(double(last[size_t(cached[first])]) - double(last[size_t(uncached[first])]));
    INFO("bf16 tokens differ at ", first, " with a logit gap of ", gap);
    CHECK(gap <= kBf16Tolerance * scale);
  }
}

TEST_CASE("generation past the context: the uncached window slides, the cache refills from half the context") {
  std::mt19937 rng = testing::seeded_rng();
  const GPTConfig config = GPTConfig(small_config()).context(16);
  auto model = random_model(config, rng);
  const std::vector<int64_t> prompt = random_ids(5, 61, rng);
  const GenerationOptions greedy = GenerationOptions().temperature(0).max_tokens(30);
  const std::vector<int64_t> cached = generate(*model, prompt, greedy);
  const std::vector<int64_t> uncached = generate(*model, prompt, GenerationOptions(greedy).use_cache(false));
  REQUIRE(cached.size() == 30);
  REQUIRE(uncached.size() == 30);
  // Tokens 1 .. 12 see the whole sequence (5 + 11 = 16 positions) on both paths.
  CHECK(std::equal(cached.begin(), cached.begin() + 12, uncached.begin()));

  // Uncached token 13 is the argmax of the forward over the latest 16 tokens.
  std::vector<int64_t> sequence = prompt;
  sequence.insert(sequence.end(), uncached.begin(), uncached.begin() + 12);  // 17 tokens
  const Tensor window = from_vector(std::vector<int64_t>(sequence.end() - 16, sequence.end()), {1, 16});
  const std::vector<float> last = model->forward(window).select(1, -1).to_vector<float>();
  CHECK(uncached[12] == greedy_token(last));

  // Cached token 13 onwards: the cache was refilled from the latest 8 tokens, so the next 9 tokens are
  // those of a fresh generation from that 8-token prompt (until its own cache fills).
  std::vector<int64_t> cached_sequence = prompt;
  cached_sequence.insert(cached_sequence.end(), cached.begin(), cached.begin() + 12);
  const std::vector<int64_t> half(cached_sequence.end() - 8, cached_sequence.end());
  const std::vector<int64_t> fresh = generate(*model, half, GenerationOptions(greedy).max_tokens(9));
  CHECK(std::equal(fresh.begin(), fresh.end(), cached.begin() + 12));
}

TEST_CASE("stop_at ends generation before the stop token, and vocab_limit bounds the ids drawn") {
  std::mt19937 rng = testing::seeded_rng();
  auto model = random_model(small_config(), rng);
  const std::vector<int64_t> prompt = random_ids(4, 61, rng);
  const GenerationOptions greedy = GenerationOptions().temperature(0).max_tokens(12);
  const std::vector<int64_t> all = generate(*model, prompt, greedy);
  const int64_t stop = all[5];
  const auto first = std::find(all.begin(), all.end(), stop);
  for (bool use_cache : {true, false}) {
    const std::vector<int64_t> stopped =
        generate(*model, prompt, GenerationOptions(greedy).stop_at(stop).use_cache(use_cache));
    CHECK(stopped == std::vector<int64_t>(all.begin(), first));
  }
  CHECK(generate(*model, prompt, GenerationOptions(greedy).max_tokens(0)).empty());

  // Only ids below the limit, the greedy choice among them.
  const std::vector<int64_t> limited = generate(*model, prompt, GenerationOptions(greedy).vocab_limit(5));
  REQUIRE(limited.size() == 12);
  std::vector<int64_t> sequence = prompt;
  for (int64_t id : limited) {
    const std::vector<float> last =
        model->forward(from_vector(sequence, {1, int64_t(sequence.size())})).select(1, -1).to_vector<float>();
    CHECK(id == greedy_token(std::span(last).first(5)));
    sequence.push_back(id);
  }
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().vocab_limit(62)), "vocab_limit 62", "vocabulary of 61");

  // Banned ids (a tokenizer's holes) are never drawn: greedy takes the best allowed id, and a hot
  // sampler drawing 400 tokens from 8 allowed ids (4 of them banned) never meets a banned one.
  std::vector<int64_t> banned{all[0], all[1], all[2]};
  const std::vector<int64_t> avoided = generate(*model, prompt, GenerationOptions(greedy).banned(banned));
  REQUIRE(avoided.size() == 12);
  CHECK(avoided[0] != all[0]);
  sequence = prompt;
  for (int64_t id : avoided) {
    std::vector<float> last =
        model->forward(from_vector(sequence, {1, int64_t(sequence.size())})).select(1, -1).to_vector<float>();
    for (int64_t b : banned) last[size_t(b)] = -INFINITY;
    CHECK(id == greedy_token(last));
    sequence.push_back(id);
  }
  for (bool use_cache : {true, false}) {
    const std::vector<int64_t> hot = generate(*model, prompt,
                                              GenerationOptions()
                                                  .temperature(50)
                                                  .max_tokens(400)
                                                  .vocab_limit(8)
                                                  .banned({1, 3, 4, 6})
                                                  .seed(rng())
                                                  .use_cache(use_cache));
    REQUIRE(hot.size() == 400);
    std::set<int64_t> seen(hot.begin(), hot.end());
    CHECK(seen == std::set<int64_t>{0, 2, 5, 7});
  }
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().banned({61})), "banned id 61", "[0, 61)");
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().vocab_limit(2).banned({0, 1})),
              "every one of the 2 logits is -inf");
}

TEST_CASE("sampling: top-k 1 and a tiny top-p are greedy, and ties go to the lower index") {
  std::mt19937 rng = testing::seeded_rng();
  std::normal_distribution<float> normal(0.0f, 3.0f);
  TokenSampler sampler(rng());
  for (int row = 0; row < 200; ++row) {
    std::vector<float> logits(50);
    for (float& x : logits) x = normal(rng);
    const int64_t best = greedy_token(logits);
    CHECK(logits[size_t(best)] == *std::max_element(logits.begin(), logits.end()));
    CHECK(sampler.next(logits, SamplingOptions().temperature(0)) == best);
    CHECK(sampler.next(logits, SamplingOptions().temperature(1.7).top_k(1)) == best);
    CHECK(sampler.next(logits, SamplingOptions().temperature(0.6).top_p(1e-9)) == best);
  }
  const std::vector<float> tied{1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
  CHECK(greedy_token(tied) == 1);
  const std::vector<double> top2 = sampling_distribution(tied, SamplingOptions().top_k(2));
  CHECK(top2 == std::vector<double>{0, 0.5, 0, 0.5, 0});
}

TEST_CASE("sampling: the distribution is softmax(logits / t), cut by top-k and top-p, and the draws follow it") {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits{2.0f, 1.0f, 0.0f, -1.0f, ninf, 0.5f};
  for (double t : {0.5, 1.0, 2.0}) {
    CAPTURE(t);
    std::vector<double> expected(logits.size());
    double total = 0;
    for (size_t i = 0; i < logits.size(); ++i) total += expected[i] = std::exp(double(logits[i]) / t);
    for (double& p : expected) p /= total;
    const std::vector<double> p = sampling_distribution(logits, SamplingOptions().temperature(t));
    for (size_t i = 0; i < p.size(); ++i) CHECK(p[i] == doctest::Approx(expected[i]).epsilon(1e-12));

    // Counts of 200,000 draws with a fixed seed: within 5 standard deviations of n p, none at -inf.
    TokenSampler sampler(1234);
    const int n = 200000;
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) ++counts[size_t(sampler.next(logits, SamplingOptions().temperature(t)))];
    CHECK(counts[4] == 0);
    for (size_t i = 0; i < logits.size(); ++i) {
      const double mean = n * expected[i], sigma = std::sqrt(n * expected[i] * (1 - expected[i]));
      CHECK(std::abs(counts[i] - mean) <= 5 * sigma + 1e-9);
    }
  }
  // Nucleus: probabilities 0.5, 0.3, 0.15, 0.05; top-p 0.7 keeps the shortest prefix reaching it (0.8).
  const std::vector<float> nucleus{std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  const std::vector<double> p = sampling_distribution(nucleus, SamplingOptions().top_p(0.7));
  CHECK(p[0] == 0);
  CHECK(p[2] == 0);
  CHECK(p[1] == doctest::Approx(0.625).epsilon(1e-6));
  CHECK(p[3] == doctest::Approx(0.375).epsilon(1e-6));
  // top-k then top-p: k 3 keeps 0.5, 0.3, 0.15 (renormalised 0.526, 0.316, 0.158); p 0.9 keeps all three.
  const std::vector<double> kp = sampling_distribution(nucleus, SamplingOptions().top_k(3).top_p(0.9));
  CHECK(kp[2] == 0);
  CHECK(kp[0] == doctest::Approx(0.15 / 0.95).epsilon(1e-6));
  CHECK(std::accumulate(kp.begin(), kp.end(), 0.0) == doctest::Approx(1.0).epsilon(1e-12));
  // A tiny temperature is greedy without overflowing.
  const std::vector<double> cold = sampling_distribution(logits, SamplingOptions().temperature(1e-300));
  CHECK(cold[0] == 1.0);
  CHECK(std::accumulate(cold.begin(), cold.end(), 0.0) == 1.0);
}

TEST_CASE("sampling: top_k above the vocabulary keeps every token; +inf logits are refused, not drawn") {
  std::mt19937 rng = testing::seeded_rng();
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(30);
  for (float& x : logits) x = normal(rng);
  const auto all = sampling_distribution(logits, SamplingOptions().temperature(0.7));
  CHECK(sampling_distribution(logits, SamplingOptions().temperature(0.7).top_k(31)) == all);
  CHECK(sampling_distribution(logits, SamplingOptions().temperature(0.7).top_k(1000000)) == all);
  const uint64_t seed = rng();
  TokenSampler a(seed), b(seed);
  for (int i = 0; i < 50; ++i)
    CHECK(a.next(logits, SamplingOptions().top_k(5000)) == b.next(logits, SamplingOptions()));

  logits[7] = INFINITY;
  CHECK_ERROR(greedy_token(logits), "logit 7 is inf", "expected a finite value or -inf");
  CHECK_ERROR(sampling_distribution(logits, SamplingOptions()), "logit 7 is inf");
  CHECK_ERROR(a.next(logits, SamplingOptions().top_k(3)), "logit 7 is inf");
}

TEST_CASE("the sampler's uniform numbers are std::mt19937_64's, fixed by the standard") {
  // [rand.predef]: the 10000th output of a default-constructed mt19937_64 (seed 5489) is 9981545732273789042.
  TokenSampler sampler(5489);
  double u = 0;
  for (int i = 0; i < 10000; ++i) u = sampler.uniform();
  CHECK(u == double(9981545732273789042ull >> 11) * 0x1.0p-53);
  TokenSampler a(7), b(7), c(8);
  double sum = 0;
  bool all_equal = true, any_differs = false;
  for (int i = 0; i < 1000; ++i) {
    const double x = a.uniform();
    all_equal = all_equal && x == b.uniform();
    any_differs = any_differs || x != c.uniform();
    CHECK((x >= 0 && x < 1));
    sum += x;
  }
  CHECK(all_equal);
  CHECK(any_differs);
  CHECK(sum / 1000 == doctest::Approx(0.5).epsilon(0.1));
}

TEST_CASE("generation and cache errors name what was wrong") {
  std::mt19937 rng = testing::seeded_rng();
  auto model = random_model(small_config(), rng);
  CHECK_ERROR(KVCache(*model, 1, 25), "capacity 25", "context is 24");
  CHECK_ERROR(KVCache(*model, 0), "batch");
  KVCache cache(*model, 1, 8);
  CHECK_ERROR(model->forward(from_vector(random_ids(9, 61, rng), {1, 9}), cache), "9 new tokens after 0",
              "capacity of 8");
  CHECK_ERROR(model->forward(from_vector(random_ids(4, 61, rng), {2, 2}), cache), "2 rows", "holds 1");
  (void)model->forward(from_vector(random_ids(3, 61, rng), {1, 3}), cache);
  CHECK_ERROR(cache.rewind(4), "cannot keep 4 positions", "holding 3");
  KVCache wide(GPTConfig(small_config()).n_head(4), 1, 8, f32, kCPU);
  CHECK_ERROR(model->forward(from_vector(random_ids(2, 61, rng), {1, 2}), wide), "expected key and value caches");
  model->to(bf16);
  CHECK_ERROR(model->forward(from_vector(random_ids(2, 61, rng), {1, 2}), cache), "the KV cache is f32",
              "the model is bf16");
  model->to(f32);

  const std::vector<int64_t> prompt{1, 2, 3};
  CHECK_ERROR(generate(*model, {}, GenerationOptions()), "prompt is empty");
  CHECK_ERROR(generate(*model, random_ids(25, 61, rng), GenerationOptions()), "25 tokens", "context is 24");
  CHECK_ERROR(generate(*model, {1, 61}, GenerationOptions()), "prompt token 1 is 61", "[0, 61)");
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().temperature(-1)), "temperature -1");
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().top_p(0)), "top_p 0");
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().top_p(1.5)), "top_p 1.5");
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().top_k(-2)), "top_k -2");
  CHECK_ERROR(generate(*model, prompt, GenerationOptions().max_tokens(-1)), "max_tokens -1");
  const std::vector<float> with_nan{0.0f, std::numeric_limits<float>::quiet_NaN()};
  CHECK_ERROR(greedy_token(with_nan), "logit 1 is nan");
  const float ninf = -std::numeric_limits<float>::infinity();
  CHECK_ERROR(sampling_distribution(std::vector<float>{ninf, ninf}, SamplingOptions()),
              "every one of the 2 logits is -inf");
  CHECK_ERROR(greedy_token(std::vector<float>{}), "empty");
}
