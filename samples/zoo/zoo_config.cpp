#include "samples/zoo/zoo_config.h"

#include <algorithm>

#include "optim/by_name.h"
#include "samples/zoo/zoo_recipes.h"
#include "train/checkpoint_directory.h"
#include "train/precision.h"

namespace hg::samples::zoo {

namespace {

// --resume: the newest checkpoint's settings for every key not given now (train/checkpoint_directory.h).
void restore_run_config(ZooConfig& c) {
  if (!c.resume || c.checkpoint_dir.empty()) return;
  const auto stored =
      app::or_usage_error(kProgram, "--resume", [&] { return train::read_run_config(c.checkpoint_dir, false); });
  if (stored) c.flags.restore(stored->json, stored->entry, zoo_resume_rules());
}

// Every flag not given takes the model's recipe value.
void apply_recipe(ZooConfig& c) {
  const Recipe r = recipe_for(c.model);
  if (!c.flags.given("data")) c.data = r.data;
  if (!c.flags.given("epochs")) c.epochs = r.epochs;
  if (!c.flags.given("steps") && !c.flags.given("epochs")) c.steps = r.steps;
  if (!c.flags.given("batch")) c.batch = r.batch;
  if (!c.flags.given("optimizer")) c.optimizer = r.optimizer;
  if (!c.flags.given("lr")) c.lr = r.lr;
  if (!c.flags.given("weight-decay")) c.weight_decay = r.weight_decay;
  if (!c.flags.given("warmup")) c.warmup = r.warmup;
  if (!c.flags.given("augment-pad")) c.augment_pad = r.augment_pad;
  if (!c.flags.given("validation") || c.validation == 0) c.validation = r.validation;
  if (c.model == "gcn" && c.nodes == 0) c.nodes = 2000;
  if (!c.flags.given("augment-flip")) c.augment_flip = r.augment_flip ? "on" : "off";
}

// "mlp, lenet, ... or makemore".
std::string model_list() {
  const std::vector<std::string>& models = zoo_model_names();
  std::string text;
  for (size_t i = 0; i < models.size(); ++i) text += (i == 0 ? "" : i + 1 == models.size() ? " or " : ", ") + models[i];
  return text;
}

void check_settings(const ZooConfig& c) {
  const std::vector<std::string>& models = zoo_model_names();
  if (c.model.empty())
    app::exit_with_usage_error(kProgram, "no --model; expected one of " + model_list() + " (zoo --help)");
  if (std::find(models.begin(), models.end(), c.model) == models.end())
    app::exit_with_usage_error(kProgram, "unknown --model \"" + c.model + "\"; expected " + model_list());
  if (!c.images.empty() && c.model != "vae" && c.model != "dcgan" && c.model != "diffusion")
    app::exit_with_usage_error(kProgram,
                               "--images is for the generative models; expected --model vae, dcgan or diffusion");
  app::checked_device(kProgram, c.device);
  app::or_usage_error(kProgram, [&] { return train::parse_precision(c.precision); });
  if (c.checkpoint_dir.empty() && c.resume)
    app::exit_with_usage_error(kProgram, "--resume needs --checkpoint-dir, the directory to resume from");
  if (c.checkpoint_dir.empty() && c.checkpoint_every > 0)
    app::exit_with_usage_error(kProgram, "--checkpoint-every-steps needs --checkpoint-dir, where to write them");
  app::check_at_most(kProgram, {{"batch", c.batch, 1 << 20},
                                {"epochs", c.epochs, 1 << 20},
                                {"width", c.width, 1 << 14},
                                {"augment-pad", c.augment_pad, 64},
                                {"threads", c.threads, 4096},
                                {"workers", c.workers, 256},
                                {"nodes", c.nodes, 20000}});
}

// After the recipe filled them: the values that depend on the model's.
void check_recipe_settings(const ZooConfig& c) {
  // Flags a model would ignore (by value, not flags.given: --resume restores every key).
  const auto refuse = [&](bool set, const std::string& flag, const std::string& why) {
    if (set) app::exit_with_usage_error(kProgram, flag + " is not used by " + c.model + ": " + why);
  };
  refuse(c.model == "dcgan" && c.warmup > 0, "--warmup", "it trains at a constant rate (Radford et al.)");
  refuse((c.model == "gcn" || c.model == "char-lstm" || c.model == "word-lstm") && c.train_limit > 0, "--train-limit",
         c.model == "gcn" ? "its labelled nodes are 20 per community" : "its budget is --steps of --batch windows");
  refuse((c.model == "gcn" || c.model == "char-lstm") && c.eval_limit > 0, "--eval-limit",
         c.model == "gcn" ? "--validation sets the validation nodes" : "it validates on train_gpt's 8 batches");
  const std::vector<std::string>& names = optim::optimizer_names();
  if (std::find(names.begin(), names.end(), c.optimizer) == names.end())
    app::exit_with_usage_error(kProgram,
                               "unknown --optimizer \"" + c.optimizer + "\"; expected " + optim::optimizer_name_list());
  if (c.augment_flip != "on" && c.augment_flip != "off")
    app::exit_with_usage_error(kProgram, "--augment-flip \"" + c.augment_flip + "\"; expected on or off");
  if (c.batch < 1) app::exit_with_usage_error(kProgram, "--batch must be >= 1");
  // (By value, not by flags.given: --resume restores every key, these too.)
  if ((c.model == "seq2seq" || c.model == "gcn") && !c.data.empty())
    app::exit_with_usage_error(kProgram, "--data: " + c.model + " generates its data; expected no --data");
  if (c.model != "char-lstm" && !c.tokenizer.empty())
    app::exit_with_usage_error(kProgram, "--tokenizer is char-lstm's; expected --model char-lstm");
  if (c.model != "gcn" && c.nodes != 0) app::exit_with_usage_error(kProgram, "--nodes is gcn's; expected --model gcn");
}

}  // namespace

const app::ResumeRules& zoo_resume_rules() {
  static const app::ResumeRules rules{{"model", "data", "precision", "batch", "width", "validation", "train-limit",
                                       "nodes", "seed", "augment-pad", "augment-flip"},
                                      {"resume", "checkpoint-dir", "stop-after-steps", "metrics-log", "save",
                                       "save-init", "save-batches", "workers", "threads"},
                                      {"data"}};
  return rules;
}

ZooConfig::ZooConfig(int argc, char** argv) {
  flags.after_parse([this] {
    restore_run_config(*this);
    check_settings(*this);
    apply_recipe(*this);
    check_recipe_settings(*this);
  });
  flags.parse(argc, argv);
}

}  // namespace hg::samples::zoo
