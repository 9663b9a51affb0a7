#include "samples/zoo/makemore.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "data/words.h"
#include "samples/zoo/char_mlp.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

// Mean cross-entropy (nats per character) of `model` over the first `count` examples.
double mean_loss(nn::Sequential& model, const data::CharContextDataset& set, int64_t count, const Device& device) {
  double total = 0.0;
  for (int64_t first = 0; first < count; first += 4096) {
    const int64_t n = std::min<int64_t>(4096, count - first);
    const std::vector<Tensor> batch = data::read_examples(set, first, n);  // contexts, targets
    const Tensor loss = cross_entropy(model(batch[0].to(device)), batch[1].to(device));
    total += loss.item() * double(n);
  }
  return count > 0 ? total / double(count) : 0.0;
}

// `count` words drawn from the model one character at a time from an all-'.' context until it draws '.'
// (at most 32 characters), with a generator of its own seeded by `seed`.
std::vector<std::string> sample_words(nn::Sequential& model, int64_t count, uint64_t seed, const Device& device) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> words;
  for (int64_t w = 0; w < count; ++w) {
    std::vector<int64_t> context(size_t(kMakemoreBlock), 0);
    std::string word;
    while (word.size() < 32) {
      const Tensor logits = model(from_vector(context, {1, kMakemoreBlock}).to(device));
      const std::vector<float> p = softmax(logits.to(DType::f32), -1).to(kCPU).to_vector<float>();
      std::discrete_distribution<int64_t> next(p.begin(), p.end());
      const int64_t id = next(rng);
      if (id == 0) break;
      word.push_back(data::id_char(id));
      context.erase(context.begin());
      context.push_back(id);
    }
    words.push_back(word);
  }
  return words;
}

}  // namespace

int train_makemore(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  const Device& device = run.device;
  const DType dtype = run.dtype;

  // The words: --validation for validation, as many for test, the rest (at most --train-limit) for training.
  const data::WordList list =
      app::or_usage_error(kProgram, "--data " + c.data, [&] { return data::read_words(c.data); });
  data::WordSplits splits = app::or_usage_error(kProgram, "--validation", [&] {
    return data::split_words(list.words, c.validation, c.validation, uint64_t(c.seed));
  });
  if (c.train_limit > 0 && c.train_limit < int64_t(splits.train.size())) splits.train.resize(size_t(c.train_limit));
  const auto train_set = std::make_shared<data::CharContextDataset>(splits.train, kMakemoreBlock);
  const data::CharContextDataset validation_set(splits.validation, kMakemoreBlock),
      test_set(splits.test, kMakemoreBlock);
  check_batch_fits(c, train_set->size(), "examples");

  const std::shared_ptr<nn::Sequential> model = make_char_mlp(c.width);
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);
  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch(), steps = planned_steps(c, per_epoch);
  BatchRecorder recorder(c.save_batches, {"context", "target"});
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        recorder.record(b);
        return cross_entropy((*model)(b[0]), b[1]);
      },
      trainer_options(c, steps, per_epoch, "val_loss", train::StopMode::min));
  set_schedule(trainer, c, steps);
  set_loss_scale(trainer, run);
  trainer.evaluator([&] {
    const double loss = mean_loss(*model, validation_set, held_out_count(c, validation_set), device);
    char text[96];
    std::snprintf(text, sizeof text, "validation loss %.4f nats/char (%lld characters)", loss,
                  (long long)held_out_count(c, validation_set));
    return train::Evaluation{loss, text};
  });

  std::printf(
      "zoo makemore: %zu words (%lld skipped) -> %zu training, %zu validation, %zu test; %lld training "
      "characters (%lld steps of %lld, %.1f epochs) on %s in %s | %.1fk parameters | %s lr %g wd %g | %s\n",
      list.words.size(), (long long)list.skipped, splits.train.size(), splits.validation.size(), splits.test.size(),
      (long long)train_set->size(), (long long)steps, (long long)c.batch, double(steps) / double(per_epoch),
      device.str().c_str(), train::precision_name(dtype), double(model->parameter_count()) / 1e3, c.optimizer.c_str(),
      c.lr, c.weight_decay, run.threads.describe().c_str());
  trainer.fit();

  NoGradGuard no_grad;
  model->eval();
  const int64_t tested = held_out_count(c, test_set);
  std::printf("test loss %.4f nats/char (%lld characters)\n", mean_loss(*model, test_set, tested, device),
              (long long)tested);
  std::printf("sampled words:");
  for (const std::string& word : sample_words(*model, 20, uint64_t(c.seed) + 1, device))
    std::printf(" %s", word.c_str());
  std::printf("\n");
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
