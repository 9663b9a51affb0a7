// train_gpt's two tasks (samples/gpt_tasks.h).
#include "samples/gpt_tasks.h"

#include <algorithm>
#include <cstdio>

#include "data/curriculum.h"
#include "data/token_shard.h"
#include "engine/autograd.h"
#include "samples/addition_task.h"
#include "samples/gpt_datasets.h"

namespace hg::samples {

std::shared_ptr<const data::BatchSampler> GptTask::curriculum(std::shared_ptr<const data::BatchSampler>, int64_t,
                                                              int64_t, uint64_t, int, int) const {
  throw Error("--curriculum easy-to-hard needs the addition task's difficulty score; it does not apply to --data");
}

namespace {

class Addition final : public GptTask {
 public:
  Addition(int digits, int64_t pool, uint64_t seed, int64_t eval_problems)
      : task_(digits),
        train_(std::make_shared<AdditionDataset>(task_, pool, seed)),
        held_out_(task_.held_out_pairs(eval_problems)) {}
  std::string description() const override { return std::to_string(task_.digits()) + "-digit addition"; }
  std::shared_ptr<const data::Dataset> training_set() const override { return train_; }
  bool shuffle() const override { return false; }
  int64_t sequence_length() const override { return task_.problem_length() - 1; }
  int64_t shortest_length() const override { return task_.prompt_length(); }
  std::string metric_name() const override { return "accuracy"; }
  train::StopMode metric_mode() const override { return train::StopMode::max; }

  train::Evaluation evaluate(nn::GPT& model) const override {
    const double accuracy = task_.accuracy(model, held_out_);
    char text[96];
    std::snprintf(text, sizeof text, "held-out exact match %.2f%% (%zu problems)", 100.0 * accuracy, held_out_.size());
    return {accuracy, text};
  }

  std::shared_ptr<const data::BatchSampler> curriculum(std::shared_ptr<const data::BatchSampler> base, int64_t steps,
                                                       int64_t batch, uint64_t seed, int rank,
                                                       int world) const override {
    return std::make_shared<data::DifficultyCurriculumSampler>(std::move(base), train_->difficulties(), steps, batch,
                                                               seed, rank, world);
  }

  void show_samples(nn::GPT& model, int64_t n) const override {
    const std::vector<std::pair<int64_t, int64_t>> shown(held_out_.begin(),
                                                         held_out_.begin() + std::min<int64_t>(n, held_out_.size()));
    std::vector<std::string> answers;
    task_.accuracy(model, shown, &answers);
    std::printf("samples (held-out problems, model's answers after '='):\n");
    for (size_t i = 0; i < shown.size(); ++i) {
      std::string answer = answers[i];
      if (!answer.empty() && answer.back() == '\n') answer.pop_back();
      const bool right = answers[i] == task_.problem(shown[i].first, shown[i].second);
      std::printf("  %s  %s\n", answer.c_str(), right ? "ok" : "WRONG");
    }
  }

 private:
  AdditionTask task_;
  std::shared_ptr<AdditionDataset> train_;
  std::vector<std::pair<int64_t, int64_t>> held_out_;
};

class Text final : public GptTask {
 public:
  Text(const std::string& paths, int64_t context, int64_t batch, std::optional<ShardTokenizer> tokenizer)
      : text_(load_token_data(paths, context)),
        tokenizer_(std::move(tokenizer)),
        train_(std::make_shared<data::TokenWindowDataset>(text_.train, context, 1)),
        context_(context) {
    if (tokenizer_) {
      check_tokenizer_vocab(tokenizer_->bytes.vocab_size(), text_.vocab_size, tokenizer_->path, paths);
      check_tokenizer_ids(text_, tokenizer_->decode, tokenizer_->encode, tokenizer_->special_tokens, tokenizer_->path,
                          paths);
    }
    const std::optional<TokenBytes> bytes = tokenizer_                ? std::optional(tokenizer_->bytes)
                                            : text_.vocab_size == 256 ? std::optional(TokenBytes::byte_level())
                                                                      : std::nullopt;
    validation_ = validation_set(text_, context, batch, 8, bytes ? &*bytes : nullptr);
    const UnigramBaseline unigram = unigram_baseline(text_, bytes ? &*bytes : nullptr);
    char baseline[160];
    if (unigram.bytes)
      std::snprintf(baseline, sizeof baseline, " (unigram baseline: %.4f per token, %.4f bits per byte)", unigram.loss,
                    bits_per_byte(unigram.loss, unigram.tokens, *unigram.bytes));
    else
      std::snprintf(baseline, sizeof baseline, " (unigram baseline: %.4f per token)", unigram.loss);
    description_ = text_.description + baseline;
  }
  // The data and the validation loss a unigram model gets on it.
  std::string description() const override { return description_; }
  std::shared_ptr<const data::Dataset> training_set() const override { return train_; }
  bool shuffle() const override { return true; }
  int64_t sequence_length() const override { return context_; }
  int64_t shortest_length() const override { return std::min<int64_t>(8, context_); }
  std::string metric_name() const override { return "val_loss"; }
  train::StopMode metric_mode() const override { return train::StopMode::min; }

  // The mean loss per token over the fixed batches (each holds the same number of scored tokens)
  // and, where the bytes are known, bits per byte.
  train::Evaluation evaluate(nn::GPT& model) const override {
    const Device device = model.wte->weight.device();
    double loss = 0;
    for (const auto& [ids, targets] : validation_.batches)
      loss += model.loss(ids.to(device), targets.to(device)).item() / double(validation_.batches.size());
    char text[128];
    train::Evaluation evaluation{loss, ""};
    if (validation_.bytes) {
      const double bpb = bits_per_byte(loss, validation_.tokens, *validation_.bytes);
      std::snprintf(text, sizeof text, "validation loss %.4f per token, %.4f bits per byte", loss, bpb);
      evaluation.metrics.emplace_back("val_bits_per_byte", bpb);
    } else {
      std::snprintf(text, sizeof text, "validation loss %.4f per token (bits per byte: give --tokenizer)", loss);
    }
    evaluation.text = text;
    return evaluation;
  }

  // Greedy continuation of the first 8 training tokens, decoded.
  void show_samples(nn::GPT& model, int64_t n) const override {
    const std::vector<int64_t> prompt = text_.prompt(8);
    model.eval();
    const std::vector<int64_t> out =
        generate_greedy(model, from_vector(prompt, {1, int64_t(prompt.size())}), n).to_vector<int64_t>();
    std::string generated;
    if (tokenizer_) {
      const std::vector<uint32_t> ids(out.begin(), out.end());
      generated = tokenizer_->decode(ids);
    } else if (text_.vocab_size <= 256) {
      for (int64_t b : out) generated += char(b);
    } else {
      generated = "(token ids; give --tokenizer to decode)";
      for (int64_t id : out) generated.append(" ").append(std::to_string(id));
    }
    std::printf("sample: %s\n", generated.c_str());
  }

 private:
  TokenData text_;
  std::optional<ShardTokenizer> tokenizer_;
  std::shared_ptr<data::TokenWindowDataset> train_;
  ValidationSet validation_;
  std::string description_;
  int64_t context_;
};

}  // namespace

std::unique_ptr<GptTask> addition_task(int digits, int64_t pool, uint64_t seed, int64_t eval_problems) {
  return std::make_unique<Addition>(digits, pool, seed, eval_problems);
}

std::unique_ptr<GptTask> text_task(const std::string& paths, int64_t context, int64_t batch,
                                   std::optional<ShardTokenizer> tokenizer) {
  return std::make_unique<Text>(paths, context, batch, std::move(tokenizer));
}

}  // namespace hg::samples
