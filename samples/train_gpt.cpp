// train_gpt: trains a byte-level GPT on the CPU and reports what it learned.
//
// Default task: 3-digit addition ("482+039=0521\n"), generated here, judged by exact-match accuracy
// on held-out problems never seen in training. --data FILE trains on any text file instead and
// reports validation loss. Written only against halfgrad's public headers, as a user would.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "engine/allocator.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/addition_task.h"
#include "samples/cli.h"
#include "samples/text_data.h"
#include "samples/training_monitor.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string device, data, save, load;
  int64_t layers, heads, dim, context, batch, steps, warmup, eval_every, seed, threads, sample, digits, eval_problems;
  double lr, min_lr, weight_decay, clip, dropout;
  samples::MonitorOptions monitor = {};
};

Options parse_options(int argc, char** argv) {
  samples::Flags flags("train_gpt",
                       "Trains a byte-level GPT on the CPU. By default it learns 3-digit addition and reports\n"
                       "exact-match accuracy on held-out problems; --data FILE trains on a text file instead.");
  Options o;
  auto& device = flags.add_string("device", "cpu", "device to train on: cpu, cuda or cuda:N");
  auto& data = flags.add_string("data", "", "train on this text file (byte-level) instead of the addition task");
  auto& layers = flags.add_int("layers", 2, "transformer blocks", 1);
  auto& heads = flags.add_int("heads", 4, "attention heads (must divide --dim)", 1);
  auto& dim = flags.add_int("dim", 128, "model width", 1);
  auto& context = flags.add_int("context", 16, "context length in bytes", 1);
  auto& batch = flags.add_int("batch", 64, "sequences per step", 1);
  auto& steps = flags.add_int("steps", 3000, "optimizer steps", 0);
  auto& lr = flags.add_double("lr", 2e-3, "peak learning rate", 0.0);
  auto& warmup = flags.add_int("warmup", 100, "linear warmup steps", 0);
  auto& min_lr = flags.add_double("min-lr", 1e-4, "learning rate at the end of the cosine decay", 0.0);
  auto& weight_decay = flags.add_double("weight-decay", 0.1, "AdamW decoupled weight decay (matrices only)", 0.0);
  auto& clip = flags.add_double("clip", 1.0, "clip the global gradient norm to this (0: off)", 0.0);
  auto& dropout = flags.add_double("dropout", 0.0, "dropout probability", 0.0, 0.99);
  auto& eval_every = flags.add_int("eval-every", 500, "evaluate every N steps (0: only at the end)", 0);
  auto& eval_problems = flags.add_int("eval-problems", 1000, "held-out problems per evaluation", 1);
  auto& digits = flags.add_int("digits", 3, "digits per operand of the addition task", 1);
  auto& seed = flags.add_int("seed", 1337, "random seed (weights, data order, dropout)", 0);
  auto& threads = flags.add_int("threads", 0, "CPU threads (0: all cores)", 0);
  auto& save = flags.add_string("save", "", "save the trained model to this safetensors file");
  auto& load = flags.add_string("load", "", "start from this safetensors file (native or GPT-2 layout)");
  auto& sample = flags.add_int("sample", 8, "print N answers (or N bytes of text) at the end", 0);
  auto& profile = flags.add_string("profile", "", "profile the run: Chrome trace JSON to this file, tables at the end");
  auto& profile_ops = flags.add_bool("profile-ops", false, "with --profile: also a range per kernel call (trace detail)");
  auto& metrics_log = flags.add_string("metrics-log", "", "write one JSON line of metrics per step to this file");
  auto& early_stop = flags.add_int("early-stop", 0, "stop after N evaluations without improvement, keep the best weights (0: off)", 0);
  auto& early_stop_delta = flags.add_double("early-stop-delta", 0.0, "smallest change that counts as an improvement", 0.0);
  flags.parse(argc, argv);
  o = Options{device, data, save, load, layers, heads, dim, context, batch, steps, warmup, eval_every, seed, threads,
              sample, digits, eval_problems, lr, min_lr, weight_decay, clip, dropout};
  o.monitor = {profile, metrics_log, profile_ops, early_stop, early_stop_delta, Device::cpu()};
  if (profile_ops && profile.empty()) samples::exit_with_usage_error("train_gpt", "--profile-ops needs --profile FILE");
  if (o.dim % o.heads != 0)
    samples::exit_with_usage_error("train_gpt", "--heads " + std::to_string(o.heads) + " does not divide --dim " +
                                                    std::to_string(o.dim) + "; expected dim % heads == 0");
  if (o.min_lr > o.lr)
    samples::exit_with_usage_error("train_gpt", "--min-lr must not exceed --lr (the cosine decays from --lr to --min-lr)");
  if (o.digits > 9) samples::exit_with_usage_error("train_gpt", "--digits must be in [1, 9], got " + std::to_string(o.digits));
  if (o.data.empty() && o.context < 3 * o.digits + 3)
    samples::exit_with_usage_error("train_gpt", "--context " + std::to_string(o.context) + " is too short for " +
                                                    std::to_string(o.digits) + "-digit problems; expected at least " +
                                                    std::to_string(3 * o.digits + 3));
  Device device_choice;
  try {
    device_choice = Device::parse(o.device);
  } catch (const Error&) {
    samples::exit_with_usage_error("train_gpt", "unknown --device \"" + o.device + "\"; expected cpu, cuda or cuda:N");
  }
  if (device_choice.is_cuda() && device_choice.index >= cuda::device_count())
    samples::exit_with_usage_error("train_gpt", "--device " + o.device + " is not available: " +
                                                    (cuda::is_available() ? "this machine has " +
                                                     std::to_string(cuda::device_count()) + " CUDA device(s)"
                                                                          : cuda::unavailable_reason()));
  return o;
}

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", double(bytes) / (1024.0 * 1024.0));
  return text;
}

class Progress {
 public:
  Progress() : tty_(isatty(fileno(stdout))) {}
  void step_line(const std::string& line, bool keep) {
    if (tty_) {
      std::printf("\r\033[K%s", line.c_str());
      if (keep) std::printf("\n");
    } else if (keep) {
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }
  void line(const std::string& text) {
    if (tty_) std::printf("\r\033[K");
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
  }

 private:
  bool tty_;
};

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(int(o.threads));
  manual_seed(uint64_t(o.seed));
  std::mt19937_64 data_rng(uint64_t(o.seed) * 7919 + 1);

  std::shared_ptr<nn::GPT> model;
  if (!o.load.empty()) {
    model = nn::GPT::load(o.load);
  } else {
    nn::GPTConfig config;
    config.vocab_size = 256;
    config.context = o.context;
    config.n_layer = o.layers;
    config.n_head = o.heads;
    config.n_embd = o.dim;
    config.dropout = o.dropout;
    model = std::make_shared<nn::GPT>(config);
  }
  const Device device = Device::parse(o.device);
  model->to(device);
  const int64_t T = o.data.empty() ? 0 : std::min(o.context, model->config.context);

  std::unique_ptr<samples::AdditionTask> task;
  std::unique_ptr<samples::TextData> text;
  if (o.data.empty()) {
    task = std::make_unique<samples::AdditionTask>(int(o.digits));
    HG_CHECK(model->config.context >= task->problem_length() - 1, "[train_gpt] the loaded model's context (",
             model->config.context, ") is too short for ", o.digits, "-digit problems");
  } else {
    text = std::make_unique<samples::TextData>(o.data, T);
  }
  const auto held_out = task ? task->held_out_pairs(o.eval_problems) : std::vector<std::pair<int64_t, int64_t>>{};
  const int64_t tokens_per_step = o.batch * (task ? task->problem_length() - 1 : T);

  optim::AdamW optimizer(model->parameters(),
                         optim::AdamWOptions().lr(o.lr).weight_decay(o.weight_decay).decay_only_matrices(true));
  // A run shorter than the warmup warms up over all but its last step.
  const int64_t total_steps = std::max<int64_t>(o.steps, 1);
  optim::WarmupCosine schedule(o.lr, std::min(o.warmup, total_steps - 1), total_steps, o.min_lr);

  std::printf("train_gpt: %s on %s | GPT L%lld H%lld C%lld T%lld, %.2fM parameters | batch %lld (%lld tokens) | %d threads\n",
              task ? (std::to_string(o.digits) + "-digit addition").c_str() : o.data.c_str(), device.str().c_str(),
              (long long)model->config.n_layer, (long long)model->config.n_head, (long long)model->config.n_embd,
              (long long)model->config.context, double(model->parameter_count()) / 1e6, (long long)o.batch,
              (long long)tokens_per_step, omp_get_max_threads());

  auto evaluate = [&](std::vector<std::string>* answers = nullptr) -> std::pair<double, double> {
    if (task) return {task->accuracy(*model, held_out, answers), NAN};
    NoGradGuard no_grad;
    model->eval();
    std::mt19937_64 val_rng(99);
    double loss = 0;
    const int batches = 8;
    for (int i = 0; i < batches; ++i) {
      auto [ids, targets] = text->batch(o.batch, true, val_rng);
      loss += model->loss(ids.to(device), targets.to(device)).item() / batches;
    }
    model->train();
    return {NAN, loss};
  };

  samples::MonitorOptions monitor_options = o.monitor;
  monitor_options.device = device;
  samples::TrainingMonitor monitor(monitor_options, model->parameters(), task ? optim::StopMode::max : optim::StopMode::min);
  using profiler::Category;
  using profiler::ScopedRange;

  Progress progress;
  model->train();
  const auto start = Clock::now();
  double last_loss = NAN, accuracy = NAN, val_loss = NAN;
  int64_t timed_steps = 0;
  double timed_seconds = 0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    const auto step_start = Clock::now();
    monitor.begin_step(step);
    std::optional<ScopedRange> step_range(std::in_place, "step", Category::step);
    std::optional<ScopedRange> phase(std::in_place, "data", Category::data);
    auto [batch_ids, batch_targets] = task ? task->training_batch(o.batch, data_rng) : text->batch(o.batch, false, data_rng);
    const Tensor ids = batch_ids.to(device), targets = batch_targets.to(device);
    phase.emplace("forward", Category::forward, device);
    const Tensor loss = model->loss(ids, targets);
    phase.emplace("backward", Category::backward, device);
    loss.backward();
    phase.emplace("optimizer", Category::optimizer, device);
    double grad_norm = NAN;
    if (o.clip > 0) grad_norm = optim::clip_grad_norm(model->parameters(), o.clip);
    const double lr = schedule.lr(step - 1);
    optimizer.set_lr(lr);
    optimizer.step();
    optimizer.zero_grad();
    phase.reset();
    last_loss = loss.item();
    const double seconds = std::chrono::duration<double>(Clock::now() - step_start).count();
    timed_steps += 1;
    timed_seconds += seconds;

    const bool eval_now = (o.eval_every > 0 && step % o.eval_every == 0) || step == o.steps;
    const MemoryStats memory = memory_stats(device);
    char line[256];
    std::snprintf(line, sizeof line, "step %6lld/%lld | loss %.4f | lr %.2e | %7.0f tok/s | %6.1f ms/step | mem %s/%s MiB",
                  (long long)step, (long long)o.steps, last_loss, lr, double(tokens_per_step) / seconds,
                  seconds * 1e3, megabytes(memory.allocated_bytes).c_str(),
                  megabytes(memory.peak_allocated_bytes).c_str());
    progress.step_line(line, eval_now || step % 100 == 0);
    step_range.reset();
    metrics::Record record(step);
    record.set("loss", last_loss).set("lr", lr).set("tokens_per_s", double(tokens_per_step) / seconds).set("step_ms", seconds * 1e3);
    if (o.clip > 0) record.set("grad_norm", grad_norm);
    bool stop = false;
    if (eval_now) {
      {
        ScopedRange eval_range("evaluate", Category::other);
        std::tie(accuracy, val_loss) = evaluate();
      }
      record.set(task ? "accuracy" : "val_loss", task ? accuracy : val_loss);
      stop = monitor.evaluated(step, task ? accuracy : val_loss);
      char result[128];
      if (task)
        std::snprintf(result, sizeof result, "eval  step %lld | held-out exact match %.2f%% (%zu problems)",
                      (long long)step, 100.0 * accuracy, held_out.size());
      else
        std::snprintf(result, sizeof result, "eval  step %lld | validation loss %.4f", (long long)step, val_loss);
      progress.line(result);
    }
    monitor.end_step(std::move(record));
    if (stop) {
      progress.line("early stopping: no improvement in " + std::to_string(o.monitor.early_stop_patience) +
                    " evaluations, stopping at step " + std::to_string(step));
      break;
    }
  }
  if (const std::string restored = monitor.finish(); !restored.empty()) {
    progress.line(restored);
    (task ? accuracy : val_loss) = *monitor.best();
  }
  const double total = std::chrono::duration<double>(Clock::now() - start).count();

  if (o.sample > 0 && task) {
    std::vector<std::pair<int64_t, int64_t>> shown(held_out.begin(), held_out.begin() + std::min<int64_t>(o.sample, held_out.size()));
    std::vector<std::string> answers;
    task->accuracy(*model, shown, &answers);
    std::printf("samples (held-out problems, model's answers after '='):\n");
    for (size_t i = 0; i < shown.size(); ++i) {
      std::string answer = answers[i];
      if (!answer.empty() && answer.back() == '\n') answer.pop_back();
      const bool right = answers[i] == task->problem(shown[i].first, shown[i].second);
      std::printf("  %s  %s\n", answer.c_str(), right ? "ok" : "WRONG");
    }
  } else if (o.sample > 0 && text) {
    const int64_t prompt_length = std::min<int64_t>(8, int64_t(text->train().size()));
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < prompt_length; ++i) prompt.push_back((unsigned char)text->train()[size_t(i)]);
    model->eval();
    const std::vector<int64_t> out =
        samples::generate_greedy(*model, from_vector(prompt, {1, prompt_length}), o.sample).to_vector<int64_t>();
    std::string generated;
    for (int64_t b : out) generated += char(b);
    std::printf("sample: %s\n", generated.c_str());
  }

  if (!o.save.empty()) {
    model->save(o.save);
    std::printf("saved %s\n", o.save.c_str());
  }
  std::printf("summary: %lld steps in %.1f s | final loss %.4f | ", (long long)timed_steps, total, last_loss);
  if (task)
    std::printf("held-out exact match %.2f%%", 100.0 * accuracy);
  else
    std::printf("validation loss %.4f", val_loss);
  std::printf(" | %.0f tok/s | %.1f ms/step | peak memory %s MiB\n",
              timed_seconds > 0 ? double(tokens_per_step) * double(timed_steps) / timed_seconds : 0.0,
              timed_steps > 0 ? 1e3 * timed_seconds / double(timed_steps) : 0.0,
              megabytes(memory_stats(device).peak_allocated_bytes).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
    return 1;
  }
}
