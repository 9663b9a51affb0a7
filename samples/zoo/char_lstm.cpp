// zoo --model char-lstm: an LSTM language model (samples/zoo/lstm_lm.h) on the tokens make train-text trains
// its GPT on -- the same shards, the same validation windows, bits per byte counted the same way
// (samples/gpt_datasets.h) -- so the two architectures stand side by side; or on any text file as bytes.
#include "samples/zoo/char_lstm.h"

#include <sys/stat.h>

#include <cstdio>
#include <optional>

#include "samples/gpt_datasets.h"
#include "samples/shard_tokenizer.h"
#include "samples/zoo/lstm_lm.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

constexpr int64_t kContext = 128, kValidationBatches = 8;  // train_gpt's text task's

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// --tokenizer, or the tokenizer.json beside --data when --data is token shards and one is there.
std::optional<ShardTokenizer> tokenizer_for(const ZooConfig& c, uint64_t vocab) {
  std::string path = c.tokenizer;
  if (path.empty() && vocab != 256) {
    const std::string beside = c.data.substr(0, c.data.find_last_of('/') + 1) + "tokenizer.json";
    if (is_file(beside)) path = beside;
  }
  if (path.empty()) return std::nullopt;
  return app::or_usage_error(kProgram, "--tokenizer " + path, [&] { return load_shard_tokenizer(path); });
}

double validation_loss(LstmLanguageModel& model, const ValidationSet& set, const Device& device) {
  double loss = 0.0;
  for (const auto& [ids, targets] : set.batches)
    loss += model.next_token_loss(ids.to(device), targets.to(device)).item() / double(set.batches.size());
  return loss;
}

// Greedy continuation of `prompt` by `count` tokens (the whole window rerun per token: a sample, not a
// benchmark), decoded by the tokenizer, as bytes (a vocabulary of 256), or else printed as ids.
std::string greedy_sample(LstmLanguageModel& model, std::vector<int64_t> ids, int64_t count, int64_t vocab,
                          const std::optional<ShardTokenizer>& tokenizer, const Device& device) {
  for (int64_t i = 0; i < count; ++i) {
    const Tensor logits = model.forward(from_vector(ids, {1, int64_t(ids.size())}).to(device));
    ids.push_back(int64_t(max(select(select(logits, 0, 0), 0, int64_t(ids.size()) - 1), 0).second.item()));
  }
  if (tokenizer) return tokenizer->decode(std::vector<uint32_t>(ids.begin(), ids.end()));
  std::string text;
  if (vocab > 256) {
    text = "(token ids; give --tokenizer to decode)";
    for (int64_t id : ids) text += " " + std::to_string(id);
    return text;
  }
  for (int64_t b : ids) text += char(b);
  return text;
}

}  // namespace

int train_char_lstm(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  const Device& device = run.device;
  const TokenData tokens =
      app::or_usage_error(kProgram, "--data " + c.data, [&] { return load_token_data(c.data, kContext); });
  const std::optional<ShardTokenizer> tokenizer = tokenizer_for(c, tokens.vocab_size);
  if (tokenizer) {
    app::or_usage_error(kProgram, "--tokenizer " + tokenizer->path, [&] {
      check_tokenizer_vocab(tokenizer->bytes.vocab_size(), tokens.vocab_size, tokenizer->path, c.data);
      check_tokenizer_ids(tokens, tokenizer->decode, tokenizer->encode, tokenizer->special_tokens, tokenizer->path,
                          c.data);
      return 0;
    });
  }
  const std::optional<TokenBytes> bytes = tokenizer                  ? std::optional(tokenizer->bytes)
                                          : tokens.vocab_size == 256 ? std::optional(TokenBytes::byte_level())
                                                                     : std::nullopt;
  const auto train_set = std::make_shared<data::TokenWindowDataset>(tokens.train, kContext, 1);
  check_batch_fits(c, train_set->size(), "windows");  // before the validation batches of --batch windows
  const ValidationSet validation =
      validation_set(tokens, kContext, c.batch, kValidationBatches, bytes ? &*bytes : nullptr);
  const UnigramBaseline unigram = unigram_baseline(tokens, bytes ? &*bytes : nullptr);
  const int64_t vocab = app::or_usage_error(kProgram, "--data " + c.data, [&] {
    return fresh_model_vocab(tokens.vocab_size, std::nullopt, c.data);  // at most 2^20 ids, as train_gpt's
  });

  const auto model = std::make_shared<LstmLanguageModel>(vocab, c.width);
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);
  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
  const auto in_bits = [&](double loss) {
    return validation.bytes ? bits_per_byte(loss, validation.tokens, *validation.bytes) : -1.0;
  };
  BatchRecorder recorder(c.save_batches, {"ids", "targets"});
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        recorder.record(b);
        return model->next_token_loss(b[0], b[1]);
      },
      trainer_options(c, steps, per_epoch, "val_loss", train::StopMode::min));
  set_schedule(trainer, c, steps);
  set_loss_scale(trainer, run);
  trainer.evaluator([&] {
    const double loss = validation_loss(*model, validation, device);
    char text[128];
    if (validation.bytes)
      std::snprintf(text, sizeof text, "validation loss %.4f per token, %.4f bits per byte", loss, in_bits(loss));
    else
      std::snprintf(text, sizeof text, "validation loss %.4f per token (bits per byte: give --tokenizer)", loss);
    train::Evaluation evaluation{loss, text};
    if (validation.bytes) evaluation.metrics.emplace_back("val_bits_per_byte", in_bits(loss));
    return evaluation;
  });

  char baseline[96];
  std::snprintf(baseline, sizeof baseline, "unigram baseline %.4f per token", unigram.loss);
  std::string unigram_text = baseline;
  if (unigram.bytes) {
    std::snprintf(baseline, sizeof baseline, ", %.4f bits per byte",
                  bits_per_byte(unigram.loss, unigram.tokens, *unigram.bytes));
    unigram_text += baseline;
  }
  std::printf(
      "zoo char-lstm: %s, vocabulary %llu (%s) | windows of %lld, %lld steps of %lld | on %s in %s | %.1fk "
      "parameters | %s lr %g wd %g | %s\n",
      tokens.description.c_str(), (unsigned long long)tokens.vocab_size, unigram_text.c_str(), (long long)kContext,
      (long long)steps, (long long)c.batch, device.str().c_str(), train::precision_name(run.dtype),
      double(model->parameter_count()) / 1e3, c.optimizer.c_str(), c.lr, c.weight_decay,
      run.threads.describe().c_str());
  trainer.fit();

  NoGradGuard no_grad;
  model->eval();
  std::printf("sample: %s\n", greedy_sample(*model, tokens.prompt(8), 48, vocab, tokenizer, device).c_str());
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
