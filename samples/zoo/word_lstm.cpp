// zoo --model word-lstm: a word-level LSTM language model (PyTorch's examples/word_language_model, Zaremba
// et al. 2014) on a text file cut into words (data/text_corpus.h; by default make train-text's corpus of the
// Python docs), judged by the perplexity of the held-out words.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "data/text_corpus.h"
#include "data/token_shard.h"
#include "samples/zoo/lstm_lm.h"
#include "samples/zoo/word_lstm.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

constexpr int64_t kWordContext = 35;   // the example's bptt
constexpr int64_t kWordVocab = 10000;  // the Penn Treebank's size: the rest is <unk>

// The split's ids in consecutive windows of kWordContext + 1 tokens (each predicting its last
// kWordContext), `batch` windows to a tensor pair: every token but the first scored once.
std::vector<std::pair<Tensor, Tensor>> held_out_batches(const std::vector<uint32_t>& ids, int64_t batch,
                                                        int64_t limit) {
  std::vector<int64_t> inputs, targets;
  int64_t windows = 0;
  for (size_t start = 0; start + kWordContext < ids.size() && (limit == 0 || windows < limit);
       start += kWordContext, ++windows) {
    for (int64_t k = 0; k < kWordContext; ++k) {
      inputs.push_back(ids[start + size_t(k)]);
      targets.push_back(ids[start + size_t(k) + 1]);
    }
  }
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int64_t first = 0; first < windows; first += batch) {
    const int64_t n = std::min(batch, windows - first);
    const auto slice = [&](const std::vector<int64_t>& v) {
      return from_vector(std::vector<int64_t>(v.begin() + first * kWordContext, v.begin() + (first + n) * kWordContext),
                         {n, kWordContext});
    };
    batches.emplace_back(slice(inputs), slice(targets));
  }
  return batches;
}

int64_t scored_words(const std::vector<std::pair<Tensor, Tensor>>& batches) {
  int64_t n = 0;
  for (const auto& b : batches) n += b.second.numel();
  return n;
}

// The mean loss in nats per word over `batches`.
double mean_loss(LstmLanguageModel& model, const std::vector<std::pair<Tensor, Tensor>>& batches,
                 const Device& device) {
  NoGradGuard no_grad;
  double total = 0.0;
  int64_t count = 0;
  for (const auto& [ids, targets] : batches) {
    const int64_t n = targets.numel();
    total += model.next_token_loss(ids.to(device), targets.to(device)).item() * double(n);
    count += n;
  }
  return count > 0 ? total / double(count) : 0.0;
}

// The unigram model's loss on `ids`: each word's training frequency, add-one smoothed over the vocabulary.
double unigram_loss(const data::TextCorpus& corpus, const std::vector<uint32_t>& ids) {
  std::vector<double> counts(size_t(corpus.vocabulary->size()), 1.0);
  for (uint32_t id : *corpus.train) counts[id] += 1.0;
  const double total = double(corpus.train->size()) + double(counts.size());
  double loss = 0.0;
  for (uint32_t id : ids) loss -= std::log(counts[id] / total);
  return ids.empty() ? 0.0 : loss / double(ids.size());
}

std::string perplexity_text(const char* split, double loss, int64_t words) {
  char text[160];
  std::snprintf(text, sizeof text, "%s perplexity %.2f (loss %.4f nats/word, %lld words)", split, std::exp(loss), loss,
                (long long)words);
  return text;
}

// `count` words drawn one at a time after `prompt` (the window rerun per word: a sample, not a benchmark),
// from the softmax at temperature 1 with a generator of its own; "<eos>" printed as "/".
std::string sample_text(LstmLanguageModel& model, const data::Vocabulary& vocabulary, std::vector<int64_t> ids,
                        int64_t count, uint64_t seed, const Device& device) {
  std::mt19937_64 rng(seed);
  const auto shown = [&](int64_t id) {
    const std::string& word = vocabulary.token(uint32_t(id));
    return word == data::kEndOfLineToken ? std::string("/") : word;
  };
  std::string text;
  for (int64_t id : ids) text += shown(id) + " ";
  text += "|";
  for (int64_t i = 0; i < count; ++i) {
    const int64_t from = std::max<int64_t>(0, int64_t(ids.size()) - kWordContext);
    const std::vector<int64_t> window(ids.begin() + from, ids.end());
    const Tensor logits = model.forward(from_vector(window, {1, int64_t(window.size())}).to(device));
    const Tensor last = select(select(logits, 0, 0), 0, int64_t(window.size()) - 1);
    const std::vector<float> p = softmax(last.to(DType::f32), -1).to(kCPU).to_vector<float>();
    std::discrete_distribution<int64_t> next(p.begin(), p.end());
    ids.push_back(next(rng));
    text += ' ';
    text += shown(ids.back());
  }
  return text;
}

}  // namespace

int train_word_lstm(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  const Device& device = run.device;
  const data::TextCorpus corpus = app::or_usage_error(kProgram, "--data " + c.data, [&] {
    return data::load_text_corpus(c.data, {data::TextLevel::words, 0.05, 0.05, kWordVocab, 1});
  });
  const auto train_set =
      std::make_shared<data::TokenWindowDataset>(std::vector{data::whole(corpus.train)}, kWordContext, kWordContext);
  check_batch_fits(c, train_set->size(), "windows");
  const int64_t limit = c.eval_limit;  // windows, 0: all
  for (const auto& [split, ids] : {std::pair{"validation", corpus.validation}, std::pair{"test", corpus.test}}) {
    if (int64_t(ids->size()) > kWordContext) continue;
    char why[160];
    std::snprintf(why, sizeof why,
                  ": the %s split (5%% of the lines) has %zu words; expected at least %lld (a window "
                  "and its next word)",
                  split, ids->size(), (long long)kWordContext + 1);
    app::exit_with_usage_error(kProgram, "--data " + c.data + why);
  }
  const auto validation = held_out_batches(*corpus.validation, c.batch, limit);
  const auto test = held_out_batches(*corpus.test, c.batch, limit);
  const int64_t validation_words = scored_words(validation);

  const auto model = std::make_shared<LstmLanguageModel>(corpus.vocabulary->size(), c.width);
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);
  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
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
    const double loss = mean_loss(*model, validation, device);
    return train::Evaluation{
        loss, perplexity_text("validation", loss, validation_words), {{"val_perplexity", std::exp(loss)}}};
  });

  std::printf(
      "zoo word-lstm: %s: %lld lines, %lld training words, vocabulary %lld (%.2f%% of training words <unk>), unigram "
      "baseline perplexity %.1f | windows of %lld, %lld steps of %lld (%.1f epochs) | on %s in %s | %.1fk parameters "
      "| %s lr %g wd %g | %s\n",
      c.data.c_str(), (long long)corpus.lines, (long long)corpus.train->size(), (long long)corpus.vocabulary->size(),
      100.0 * double(corpus.train_unknown) / double(corpus.train->size()),
      std::exp(unigram_loss(corpus, *corpus.validation)), (long long)kWordContext, (long long)steps, (long long)c.batch,
      double(steps) / double(per_epoch), device.str().c_str(), train::precision_name(run.dtype),
      double(model->parameter_count()) / 1e3, c.optimizer.c_str(), c.lr, c.weight_decay,
      run.threads.describe().c_str());
  trainer.fit();

  NoGradGuard no_grad;
  model->eval();
  std::printf("%s\n", perplexity_text("test", mean_loss(*model, test, device), scored_words(test)).c_str());
  const std::vector<int64_t> prompt(corpus.train->begin(),
                                    corpus.train->begin() + std::min<size_t>(8, corpus.train->size()));
  std::printf("sample: %s\n",
              sample_text(*model, *corpus.vocabulary, prompt, 30, uint64_t(c.seed) + 1, device).c_str());
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
