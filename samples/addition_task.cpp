#include "samples/addition_task.h"

#include <cstdio>

namespace hg::samples {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

AdditionTask::AdditionTask(int digits) : digits_(digits), limit_(1) {
  HG_CHECK(digits >= 1 && digits <= 9, "[AdditionTask] digits must be in [1, 9], got ", digits);
  for (int i = 0; i < digits; ++i) limit_ *= 10;
}

std::string AdditionTask::problem(int64_t a, int64_t b) const {
  char text[64];
  std::snprintf(text, sizeof text, "%0*lld+%0*lld=%0*lld\n", digits_, (long long)a, digits_, (long long)b,
                digits_ + 1, (long long)(a + b));
  return text;
}

bool AdditionTask::is_held_out(int64_t a, int64_t b) const { return mix(uint64_t(a * limit_ + b)) % 20 == 0; }

std::pair<Tensor, Tensor> AdditionTask::training_batch(int64_t batch, std::mt19937_64& rng) const {
  const int64_t L = problem_length() - 1;
  std::vector<int64_t> ids(size_t(batch * L)), targets(size_t(batch * L));
  std::uniform_int_distribution<int64_t> operand(0, limit_ - 1);
  for (int64_t row = 0; row < batch; ++row) {
    int64_t a, b;
    do {
      a = operand(rng);
      b = operand(rng);
    } while (is_held_out(a, b));
    const std::string text = problem(a, b);
    for (int64_t t = 0; t < L; ++t) {
      ids[size_t(row * L + t)] = (unsigned char)text[size_t(t)];
      // Position t predicts byte t + 1; only the answer bytes (after '=') are scored.
      targets[size_t(row * L + t)] = t + 1 >= prompt_length() ? (unsigned char)text[size_t(t + 1)] : -100;
    }
  }
  return {from_vector(ids, {batch, L}), from_vector(targets, {batch, L})};
}

std::vector<std::pair<int64_t, int64_t>> AdditionTask::held_out_pairs(int64_t n) const {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<int64_t> operand(0, limit_ - 1);
  const int64_t available = limit_ * limit_ / 20;
  while (int64_t(pairs.size()) < std::min(n, available)) {
    const int64_t a = operand(rng), b = operand(rng);
    if (is_held_out(a, b)) pairs.emplace_back(a, b);
  }
  return pairs;
}

Tensor generate_greedy(nn::GPT& model, const Tensor& prompts, int64_t steps) {
  NoGradGuard no_grad;
  Tensor ids = prompts.to(i64).to(model.wte->weight.device());
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t T = ids.size(1);
    const Tensor window =
        T > model.config.context() ? ids.narrow(1, T - model.config.context(), model.config.context()) : ids;
    const Tensor logits = model.forward(window.contiguous());
    const Tensor next = max(logits.select(1, -1), -1).second;  // argmax, i64 [N]
    ids = cat({ids, next.unsqueeze(1)}, 1);
  }
  return ids;
}

double AdditionTask::accuracy(nn::GPT& model, const std::vector<std::pair<int64_t, int64_t>>& pairs,
                              std::vector<std::string>* answers) const {
  const bool was_training = model.is_training();
  model.eval();
  const int64_t P = prompt_length(), answer_length = digits_ + 2, chunk = 256;
  int64_t correct = 0;
  for (size_t start = 0; start < pairs.size(); start += chunk) {
    const int64_t n = std::min<int64_t>(chunk, int64_t(pairs.size() - start));
    std::vector<int64_t> prompt(size_t(n * P));
    for (int64_t i = 0; i < n; ++i) {
      const std::string text = problem(pairs[start + i].first, pairs[start + i].second);
      for (int64_t t = 0; t < P; ++t) prompt[size_t(i * P + t)] = (unsigned char)text[size_t(t)];
    }
    const std::vector<int64_t> out = generate_greedy(model, from_vector(prompt, {n, P}), answer_length).to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const std::string text = problem(pairs[start + i].first, pairs[start + i].second);
      std::string generated;
      for (int64_t t = 0; t < P + answer_length; ++t) generated += char(out[size_t(i * (P + answer_length) + t)]);
      if (generated == text) ++correct;
      if (answers) answers->push_back(generated);
    }
  }
  model.train(was_training);
  return pairs.empty() ? 0.0 : double(correct) / double(pairs.size());
}

}  // namespace hg::samples
