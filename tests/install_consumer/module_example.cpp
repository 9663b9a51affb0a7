// docs/building_a_model.md's program, built by tests/install_consumer against the installed package: a
// small CNN written as a module of your own, printed, loaded from the weights PyTorch saved for the same
// model (the path is the first argument), trained with train::Trainer, and evaluated.
#include <cstdio>

#include "data/data_loader.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "train/trainer.h"
using namespace hg;

// The model: its children registered under the names PyTorch's SmallCNN gives them, so its state dict
// is PyTorch's, key for key ("features.0.weight", "features.1.running_mean", "classifier.bias", ...).
struct SmallCNN : nn::Module {
  std::shared_ptr<nn::Sequential> features = register_module(
      "features", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
                      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).padding(1)),
                      std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>()}));
  std::shared_ptr<nn::Linear> classifier = register_module("classifier", std::make_shared<nn::Linear>(8 * 4 * 4, 4));
  Tensor forward(const Tensor& x) { return classifier->forward(features->forward(x)); }
};

// 8x8 images, noise plus one bright 4x4 quadrant; the label is the quadrant (0..3).
struct BrightQuadrant : data::Dataset {
  int64_t size() const override { return 2048; }
  std::vector<data::Field> fields() const override {
    return {{"image", DType::f32, {1, 8, 8}}, {"label", DType::i64, {}}};
  }
  void get(int64_t i, const std::vector<void*>& out) const override {
    float* image = static_cast<float*>(out[0]);
    const int64_t quadrant = i % 4;
    uint64_t state = uint64_t(i) * 0x9E3779B97F4A7C15ull + 1;  // a small per-sample noise generator
    for (int p = 0; p < 64; ++p) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const bool bright = (p / 8 >= 4) == (quadrant / 2 == 1) && (p % 8 >= 4) == (quadrant % 2 == 1);
      image[p] = (bright ? 1.0f : 0.0f) + float(state >> 40) / float(1 << 24) - 0.5f;
    }
    *static_cast<int64_t*>(out[1]) = quadrant;
  }
};

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: module_example SMALL_CNN.safetensors (scripts/make-torch-module-vectors)\n");
    return 2;
  }
  manual_seed(0);
  auto model = std::make_shared<SmallCNN>();
  std::printf("%s\n", model->repr().c_str());
  // PyTorch's weights, by their own names: nothing missing, nothing unexpected (strict).
  model->load_state_dict(argv[1]);
  std::printf("loaded %s\n", argv[1]);

  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions().lr(3e-3));
  data::DataLoader loader(std::make_shared<BrightQuadrant>(), data::DataLoaderOptions().batch_size(32).shuffle(true));
  train::Trainer trainer(
      *model, optimizer, loader, [&](const data::Batch& b) { return cross_entropy(model->forward(b[0]), b[1]); },
      train::TrainerOptions().steps(150).log_every(50));
  trainer.fit();

  model->eval();  // BatchNorm now uses its running statistics
  NoGradGuard no_grad;
  data::DataLoader test(std::make_shared<BrightQuadrant>(), data::DataLoaderOptions().batch_size(256));
  const data::Batch batch = test.next();
  const double accuracy = mean(eq(argmax(model->forward(batch[0]), 1), batch[1]).to(DType::f32)).item();
  std::printf("accuracy %.3f\n", accuracy);
  return accuracy > 0.9 ? 0 : 1;
}
