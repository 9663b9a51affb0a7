// zoo --model seq2seq: an encoder-decoder Transformer that writes numbers in words (samples/zoo/number_words.h,
// seq2seq_model.h), judged by exact match of its greedy decoding on numbers it never trained on.
#include "samples/zoo/seq2seq.h"

#include <algorithm>
#include <cstdio>

#include "samples/zoo/number_words.h"
#include "samples/zoo/seq2seq_model.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

constexpr int64_t kTrainingExamples = 100000;  // an epoch, unless --train-limit

// The fields of examples [first, first + n) of `set`, on the CPU.
struct Examples {
  Tensor source, decoder_input, target;
};
Examples examples(const NumberWordsDataset& set, int64_t first, int64_t n) {
  const std::vector<Tensor> fields = data::read_examples(set, first, n);
  return {fields[0], fields[1], fields[2]};
}

// Greedy decoding of a batch of sources [n, S]: the decoder reads <bos> then its own previous words; the
// ids it chose at each of the T positions, [n, T] on the CPU.
std::vector<int64_t> greedy_decode(Seq2SeqTransformer& model, const Tensor& source, const Device& device) {
  const int64_t n = source.size(0);
  std::vector<int64_t> decoder_input(size_t(n * kNumberWords), kTargetPad), chosen(size_t(n * kNumberWords));
  for (int64_t i = 0; i < n; ++i) decoder_input[size_t(i * kNumberWords)] = kBos;
  const Tensor src = source.to(device);
  for (int64_t t = 0; t < kNumberWords; ++t) {
    const Tensor logits = model.forward(src, from_vector(decoder_input, {n, kNumberWords}).to(device));
    const std::vector<int64_t> best = max(select(logits, 1, t), -1).second.to(kCPU).to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      chosen[size_t(i * kNumberWords + t)] = best[size_t(i)];
      if (t + 1 < kNumberWords) decoder_input[size_t(i * kNumberWords + t + 1)] = best[size_t(i)];
    }
  }
  return chosen;
}

// The share of the first `count` examples of `set` whose greedy decoding is their words and <eos> exactly.
double exact_match(Seq2SeqTransformer& model, const NumberWordsDataset& set, int64_t count, const Device& device) {
  int64_t right = 0;
  for (int64_t first = 0; first < count; first += 1000) {
    const int64_t n = std::min<int64_t>(1000, count - first);
    const Examples e = examples(set, first, n);
    const std::vector<int64_t> chosen = greedy_decode(model, e.source, device);
    const std::vector<int64_t> target = e.target.to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      bool same = true;
      for (int64_t t = 0; t < kNumberWords; ++t) {
        const int64_t expected = target[size_t(i * kNumberWords + t)];
        same = same && (expected == kIgnoredTarget || chosen[size_t(i * kNumberWords + t)] == expected);
      }
      right += same;
    }
  }
  return count > 0 ? double(right) / double(count) : 0.0;
}

// The words greedy decoding gives for the first `count` examples' numbers, with the truth.
void print_translations(Seq2SeqTransformer& model, const NumberWordsDataset& set, int64_t count, const Device& device) {
  const Examples e = examples(set, 0, count);
  const std::vector<int64_t> chosen = greedy_decode(model, e.source, device);
  const std::vector<std::string>& vocabulary = target_vocabulary();
  for (int64_t i = 0; i < count; ++i) {
    std::string words;
    for (int64_t t = 0; t < kNumberWords; ++t) {
      const int64_t id = chosen[size_t(i * kNumberWords + t)];
      if (id == kEos) break;
      words += (words.empty() ? "" : " ") + (id >= 0 && id < int64_t(vocabulary.size()) ? vocabulary[size_t(id)] : "?");
    }
    const int64_t n = set.number(i);
    std::printf("  %6lld -> %s%s\n", (long long)n, words.c_str(), words == number_text(n) ? "" : "   (wrong)");
  }
}

}  // namespace

int train_seq2seq(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  const Device& device = run.device;
  const int64_t train_size = c.train_limit > 0 ? c.train_limit : kTrainingExamples;
  const auto train_set = std::make_shared<NumberWordsDataset>(NumberSplit::train, train_size, uint64_t(c.seed));
  const auto held_out = [&](NumberSplit split) {
    return app::or_usage_error(kProgram, "--validation",
                               [&] { return NumberWordsDataset(split, c.validation, uint64_t(c.seed)); });
  };
  const NumberWordsDataset validation_set = held_out(NumberSplit::validation), test_set = held_out(NumberSplit::test);
  check_batch_fits(c, train_set->size(), "examples");

  const auto model = app::or_usage_error(kProgram, [&] {
    return std::make_shared<Seq2SeqTransformer>(
        Seq2SeqSpec{kSourceVocabulary, int64_t(target_vocabulary().size()), kNumberDigits, kNumberWords, c.width});
  });
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);
  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
  const int64_t validated = held_out_count(c, validation_set);
  BatchRecorder recorder(c.save_batches, {"source", "decoder_input", "target"});
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        recorder.record(b);
        const Tensor logits = model->forward(b[0], b[1]);
        return cross_entropy(logits.reshape({-1, logits.size(2)}), b[2].reshape({-1}), kIgnoredTarget);
      },
      trainer_options(c, steps, per_epoch, "val_exact_match", train::StopMode::max));
  set_schedule(trainer, c, steps);
  set_loss_scale(trainer, run);
  trainer.evaluator([&] {
    const double share = exact_match(*model, validation_set, validated, device);
    return train::Evaluation{share, share_text("validation", "exact match", share, validated, "numbers")};
  });

  std::printf(
      "zoo seq2seq: numbers 0..999999 to English words | %lld training examples (%lld steps of %lld, %.1f epochs), "
      "%lld validation and %lld test numbers never trained on | on %s in %s | %.1fk parameters | %s lr %g wd %g | "
      "%s\n",
      (long long)train_set->size(), (long long)steps, (long long)c.batch, double(steps) / double(per_epoch),
      (long long)validation_set.size(), (long long)test_set.size(), device.str().c_str(),
      train::precision_name(run.dtype), double(model->parameter_count()) / 1e3, c.optimizer.c_str(), c.lr,
      c.weight_decay, run.threads.describe().c_str());
  trainer.fit();

  NoGradGuard no_grad;
  model->eval();
  const int64_t tested = held_out_count(c, test_set);
  std::printf(
      "%s\n",
      share_text("test", "exact match", exact_match(*model, test_set, tested, device), tested, "numbers").c_str());
  std::printf("test numbers, greedy decoding:\n");
  print_translations(*model, test_set, std::min<int64_t>(8, test_set.size()), device);
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
