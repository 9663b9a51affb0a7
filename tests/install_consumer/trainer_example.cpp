// The README's training-loop example, built by tests/install_consumer against the installed package:
// an MLP learns which quadrants of the plane have x * y > 0, through train::Trainer.
#include <cstdio>

#include "data/data_loader.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "train/trainer.h"
using namespace hg;

// 4096 points on a grid over [-1, 1]^2: fields "xy" f32 [2] and "label" i64 [] (1 where x * y > 0).
struct Quadrants : data::Dataset {
  int64_t size() const override { return 4096; }
  std::vector<data::Field> fields() const override { return {{"xy", DType::f32, {2}}, {"label", DType::i64, {}}}; }
  void get(int64_t i, const std::vector<void*>& out) const override {
    float* xy = static_cast<float*>(out[0]);
    xy[0] = float(i % 64) / 31.5f - 1.0f, xy[1] = float(i / 64) / 31.5f - 1.0f;
    *static_cast<int64_t*>(out[1]) = xy[0] * xy[1] > 0;
  }
};

// A module of your own: it registers its layers, whose parameters become "hidden.weight", "out.bias", ...
struct Classifier : nn::Module {
  std::shared_ptr<nn::Linear> hidden = register_module("hidden", std::make_shared<nn::Linear>(2, 32));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(32, 2));
  Tensor forward(const Tensor& xy) { return out->forward(gelu(hidden->forward(xy))); }
};

int main() {
  manual_seed(0);
  auto model = std::make_shared<Classifier>();
  std::printf("%s\n", model->repr().c_str());  // PyTorch's printed tree, with shapes and parameter counts
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions().lr(1e-2));
  data::DataLoader loader(std::make_shared<Quadrants>(), data::DataLoaderOptions().batch_size(64).shuffle(true));
  train::Trainer trainer(
      *model, optimizer, loader, [&](const data::Batch& b) { return cross_entropy(model->forward(b[0]), b[1]); },
      train::TrainerOptions().steps(400).clip(1.0).checkpoint_dir("checkpoints").resume(true));
  trainer.schedule(std::make_shared<optim::WarmupCosine>(1e-2, 20, 400, 1e-4));
  trainer.fit();  // progress lines, a summary, checkpoints/step_*.safetensors; run it again: it resumes
}
