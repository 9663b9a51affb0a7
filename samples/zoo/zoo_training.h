#pragma once
// What every zoo model's training shares: the loader's and the Trainer's options from the flags, the
// schedule, and --save-batches' record of the first steps' batches.
#include <memory>
#include <string>
#include <vector>

#include "app/thread_defaults.h"
#include "data/data_loader.h"
#include "data/mnist.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "layers/module.h"
#include "optim/optimizer.h"
#include "samples/zoo/zoo_config.h"
#include "train/trainer.h"

namespace hg::samples::zoo {

// What a run starts from: the device, the thread settings in force, the model's dtype; the default
// generator seeded with --seed.
struct RunSetup {
  Device device;
  app::ThreadSettings threads;
  DType dtype;
};
RunSetup start_run(const ZooConfig& c);

// A usage error unless one batch fits in the `examples` training examples (`what`: "images", ...).
void check_batch_fits(const ZooConfig& c, int64_t examples, const char* what);

// The training images: the first --train-limit of `train`, with --augment-pad's crops (padded with `fill`,
// the value of a black pixel) and --augment-flip's flips.
std::shared_ptr<const data::Dataset> training_images(const ZooConfig& c, std::shared_ptr<const data::Dataset> train,
                                                     float fill);

// The generative models' images: --data's MNIST-format splits with each pixel p as (p / 255 - mean) / std,
// and their training images (training_images, crops padded with black), checked against --batch. A data
// error is a usage error naming --data.
struct GenerativeImages {
  data::MnistSplits splits;
  std::shared_ptr<const data::Dataset> train;
};
GenerativeImages load_generative_images(const ZooConfig& c, double mean, double std);

// How many of a held-out split's examples an evaluation reads: the first --eval-limit (0: all).
int64_t held_out_count(const ZooConfig& c, const data::Dataset& split);

// --save-init's file, then the model in the run's dtype on its device.
void place_model(nn::Module& model, const ZooConfig& c, const RunSetup& run);
// place_model, then the optimizer of all its parameters (--optimizer, --lr, --weight-decay).
std::unique_ptr<optim::LocalOptimizer> prepare_model(nn::Module& model, const ZooConfig& c, const RunSetup& run);

// fn() run with the default generator seeded by `seed`, its state restored after: the same noise at every
// evaluation, and the training's random stream untouched by it.
template <class Fn>
auto with_seeded_generator(uint64_t seed, Fn fn) {
  const GeneratorState saved = default_generator().state();
  manual_seed(seed);
  struct Restore {
    GeneratorState state;
    ~Restore() { default_generator().set_state(state); }
  } restore{saved};
  return fn();
}

// --images: the directory made (with its parents) before training, so that a path that cannot be one is a
// usage error now rather than after the run.
void make_images_dir(const ZooConfig& c);

// "<split> <measure> 97.00% (<count> <units>)": how the zoo prints a held-out share, e.g.
// share_text("validation", "accuracy", 0.97, 500, "nodes").
std::string share_text(const char* split, const char* measure, double share, int64_t count, const char* units);

// fp16 trains with a dynamic loss scale.
void set_loss_scale(train::Trainer& trainer, const RunSetup& run);

// Shuffled batches of --batch, the last partial one dropped, in --seed's order, with `workers` threads.
data::DataLoaderOptions loader_options(const ZooConfig& c, int workers, const Device& device);

// --steps, or --epochs of `per_epoch` batches; evaluation once per epoch but at most 20 times a run (gcn's
// epoch is one step), and 3 times a run shorter than an epoch (char-lstm's), unless --eval-every; the
// checkpoint, resume, run-config and metrics-log flags.
int64_t planned_steps(const ZooConfig& c, int64_t per_epoch);
train::TrainerOptions trainer_options(const ZooConfig& c, int64_t steps, int64_t per_epoch,
                                      const std::string& metric_name, train::StopMode mode);

// The recipe's schedule: linear warmup from 0 over --warmup steps, cosine decay to lr / 20 at `steps`.
void set_schedule(train::Trainer& trainer, const ZooConfig& c, int64_t steps);

// --save-batches: the first 64 batches as "<field>.<step - 1>" (on the CPU), written by save(); `extra`
// tensors of a step (the noise a VAE or a GAN drew) are named after the batch's fields.
class BatchRecorder {
 public:
  BatchRecorder(std::string path, std::vector<std::string> field_names)
      : path_(std::move(path)), names_(std::move(field_names)) {}
  void record(const data::Batch& batch, const std::vector<Tensor>& extra = {});
  // A tensor of the whole run (gcn's graph), saved under `name`.
  void add(const std::string& name, const Tensor& t) {
    if (!path_.empty()) saved_.emplace_back(name, t.to(kCPU).clone());
  }
  void save() const;

 private:
  std::string path_;
  std::vector<std::string> names_;
  safetensors::NamedTensors saved_;
  int64_t batches_ = 0;
};

}  // namespace hg::samples::zoo
