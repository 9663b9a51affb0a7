#include "samples/zoo/classify.h"

#include <algorithm>
#include <cstdio>

#include "data/cifar.h"
#include "data/mnist.h"
#include "samples/zoo/image_models.h"
#include "samples/zoo/zoo_training.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace hg::samples::zoo {

namespace {

// An image classification dataset's splits and what a model needs to know of them.
struct ImageSplits {
  std::shared_ptr<const data::Dataset> train, validation, test;
  int64_t channels = 1, height = 0, width = 0, classes = 0;
  float black = 0.0f;  // a black pixel after normalisation: what crops pad with
};

// --data: a CIFAR-10 binary directory (its data_batch_1.bin), or else four MNIST-format files.
ImageSplits load_image_splits(const ZooConfig& c) {
  if (data::is_cifar10_dir(c.data)) {
    const data::CifarSplits s = data::load_cifar10_splits(c.data, c.validation);
    float black = 0.0f;  // the three channels' black differ a little: their mean
    for (size_t k = 0; k < 3; ++k) black += float(-data::kCifarMean[k] / data::kCifarStd[k] / 3.0);
    return {s.train,          s.validation,        s.test, data::kCifarChannels, data::kCifarSide,
            data::kCifarSide, data::kCifarClasses, black};
  }
  const data::MnistSplits s = data::load_mnist_splits(c.data, c.validation);
  const data::MnistData& raw = s.train->data();
  return {s.train,
          s.validation,
          s.test,
          1,
          raw.rows,
          raw.cols,
          std::max<int64_t>(raw.classes, 2),
          float(-data::kFashionMnistMean / data::kFashionMnistStd)};
}

// Share of the first `count` examples of `dataset` that `model` classifies right; in eval mode and
// without grad (the Trainer's evaluator runs so; the final test runs under the same guard).
double accuracy(nn::UnaryModule& model, const data::Dataset& dataset, int64_t count, const Device& device,
                DType dtype) {
  int64_t right = 0;
  for (int64_t first = 0; first < count; first += 500) {
    const int64_t n = std::min<int64_t>(500, count - first);
    const std::vector<Tensor> batch = data::read_examples(dataset, first, n);
    const Tensor predicted = max(model(batch[0].to(device).to(dtype)), 1).second.to(kCPU);
    const std::vector<int64_t> p = predicted.to_vector<int64_t>(), truth = batch[1].to_vector<int64_t>();
    for (int64_t i = 0; i < n; ++i) right += p[size_t(i)] == truth[size_t(i)];
  }
  return count > 0 ? double(right) / double(count) : 0.0;
}

}  // namespace

int train_image_classifier(const ZooConfig& c) {
  const RunSetup run = start_run(c);
  const Device& device = run.device;
  const DType dtype = run.dtype;

  // The splits: the last --validation training images validate, the test files test.
  const ImageSplits splits = app::or_usage_error(kProgram, "--data " + c.data, [&] { return load_image_splits(c); });
  const std::shared_ptr<const data::Dataset> train_set = training_images(c, splits.train, splits.black);
  check_batch_fits(c, train_set->size(), "images");

  const ImageModelSpec spec{splits.channels, splits.height, splits.width, splits.classes, c.width};
  const std::shared_ptr<nn::UnaryModule> model =
      app::or_usage_error(kProgram, [&] { return make_image_model(c.model, spec); });
  const std::unique_ptr<optim::LocalOptimizer> optimizer = prepare_model(*model, c, run);

  data::DataLoader loader(train_set, loader_options(c, run.threads.workers, device));
  const int64_t per_epoch = loader.batches_per_epoch();
  const int64_t steps = planned_steps(c, per_epoch);
  const int64_t validated = held_out_count(c, *splits.validation);
  BatchRecorder recorder(c.save_batches, {"image", "label"});
  train::Trainer trainer(
      *model, *optimizer, loader,
      [&](const data::Batch& b) {
        recorder.record(b);
        return cross_entropy((*model)(b[0].to(dtype)), b[1]);
      },
      trainer_options(c, steps, per_epoch, "val_accuracy", train::StopMode::max));
  set_schedule(trainer, c, steps);
  set_loss_scale(trainer, run);
  trainer.evaluator([&] {
    const double share = accuracy(*model, *splits.validation, validated, device, dtype);
    return train::Evaluation{share, share_text("validation", "accuracy", share, validated, "images")};
  });

  std::printf(
      "zoo %s: %lldx%lld images, %lld training (%lld steps of %lld, %.1f epochs) on %s in %s | %.1fk "
      "parameters | %s %s lr %g wd %g | augment pad %lld flip %s | %s\n",
      c.model.c_str(), (long long)splits.height, (long long)splits.width, (long long)train_set->size(),
      (long long)steps, (long long)c.batch, double(steps) / double(per_epoch), device.str().c_str(),
      train::precision_name(dtype), double(model->parameter_count()) / 1e3, c.optimizer.c_str(), "warmup-cosine", c.lr,
      c.weight_decay, (long long)c.augment_pad, c.augment_flip.c_str(), run.threads.describe().c_str());
  trainer.fit();

  const int64_t tested = held_out_count(c, *splits.test);
  NoGradGuard no_grad;
  model->eval();
  const double test = accuracy(*model, *splits.test, tested, device, dtype);
  std::printf("%s\n", share_text("test", "accuracy", test, tested, "images").c_str());
  if (!c.save.empty()) trainer.save_model(c.save);
  recorder.save();
  return 0;
}

}  // namespace hg::samples::zoo
