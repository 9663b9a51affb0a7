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
#include <cstring>
#include <random>
#include <string>

#include "dist/bootstrap.h"
#include "dist/communicator.h"
#include "dist/distributed_sampler.h"
#include "dist/zero_optimizer.h"
#include "engine/allocator.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "samples/addition_task.h"
#include "samples/cli.h"
#include "samples/text_data.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string device, data, save, load;
  int64_t layers, heads, dim, context, batch, steps, warmup, eval_every, seed, threads, sample, digits, eval_problems;
  double lr, min_lr, weight_decay, clip, dropout;
  int64_t zero = -1;  // data-parallel ZeRO stage; -1: plain AdamW unless launched as several processes
  bool offload = false;
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
  auto& zero = flags.add_int("zero", -1, "data parallel with ZeRO stage 0, 1 or 2 across the processes of mpirun or "
                             "RANK/WORLD_SIZE (-1: off in a single process, stage 0 otherwise)", -1);
  auto& offload = flags.add_bool("offload-optimizer", false, "keep the optimizer state in host memory, updated by the "
                                 "SIMD CPU AdamW (ZeRO-Offload; implies --zero 0 or higher)");
  flags.parse(argc, argv);
  o = Options{device, data, save, load, layers, heads, dim, context, batch, steps, warmup, eval_every, seed, threads,
              sample, digits, eval_problems, lr, min_lr, weight_decay, clip, dropout, zero, offload};
  if (o.zero > 2)
    samples::exit_with_usage_error("train_gpt", "--zero " + std::to_string(o.zero) + " is not available: stages 0, 1 "
                                                    "and 2 are implemented (stage 3 is not yet)");
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

  const auto adamw_options = optim::AdamWOptions().lr(o.lr).weight_decay(o.weight_decay).decay_only_matrices(true);
  optim::AdamW optimizer(model->parameters(), adamw_options);
  // Data parallel (dist/): each rank trains on its DistributedSampler rows of the same global batch;
  // only rank 0 prints.
  std::unique_ptr<dist::Communicator> comm;
  std::unique_ptr<dist::ZeroOptimizer> zero;
  std::vector<int64_t> my_rows;
  if (o.zero >= 0 || o.offload || dist::detect_process().world_size > 1) {
    comm = std::make_unique<dist::Communicator>();
    HG_CHECK(o.batch % comm->world_size() == 0, "[train_gpt] --batch ", o.batch, " must be a multiple of the ",
             comm->world_size(), " ranks (each trains on batch / ranks rows of the global batch)");
    zero = std::make_unique<dist::ZeroOptimizer>(
        model->parameters(), *comm,
        dist::ZeroOptions().stage(int(std::max<int64_t>(o.zero, 0))).offload_optimizer(o.offload).adamw(adamw_options));
    if (!o.load.empty() && dist::ZeroOptimizer::saved_world_size(o.load) > 0) zero->load_state(o.load);
    my_rows = dist::DistributedSampler(o.batch, comm->world_size(), comm->rank(), false).indices();
    if (comm->rank() != 0 && !std::freopen("/dev/null", "w", stdout)) return 1;
  }
  auto rows_of_rank = [&](const Tensor& x) {
    std::vector<Tensor> rows;
    for (int64_t r : my_rows) rows.push_back(x.narrow(0, r, 1));
    return cat(rows, 0);
  };
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

  Progress progress;
  model->train();
  const auto start = Clock::now();
  double last_loss = NAN, accuracy = NAN, val_loss = NAN;
  int64_t timed_steps = 0;
  double timed_seconds = 0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    const auto step_start = Clock::now();
    auto [ids, targets] = task ? task->training_batch(o.batch, data_rng) : text->batch(o.batch, false, data_rng);
    if (zero) std::tie(ids, targets) = std::pair(rows_of_rank(ids), rows_of_rank(targets));
    const Tensor loss = model->loss(ids.to(device), targets.to(device));
    loss.backward();
    const double lr = schedule.lr(step - 1);
    if (zero) {
      if (o.clip > 0) zero->clip_grad_norm(o.clip);
      zero->set_lr(lr);
      zero->step();
      zero->zero_grad();
    } else {
      if (o.clip > 0) optim::clip_grad_norm(model->parameters(), o.clip);
      optimizer.set_lr(lr);
      optimizer.step();
      optimizer.zero_grad();
    }
    last_loss = loss.item();
    if (comm) comm->all_reduce(&last_loss, 1, DType::f64, dist::ReduceOp::avg).wait();
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
    if (zero)  // this rank's model state (parameters + gradients + optimizer) under its ZeRO stage
      std::snprintf(line + std::strlen(line), sizeof line - std::strlen(line), " | zero %d x%d: state %s MiB/rank",
                    zero->stage(), comm->world_size(), megabytes(zero->model_state_bytes().total()).c_str());
    progress.step_line(line, eval_now || step % 100 == 0);
    if (eval_now) {
      std::tie(accuracy, val_loss) = evaluate();
      char result[128];
      if (task)
        std::snprintf(result, sizeof result, "eval  step %lld | held-out exact match %.2f%% (%zu problems)",
                      (long long)step, 100.0 * accuracy, held_out.size());
      else
        std::snprintf(result, sizeof result, "eval  step %lld | validation loss %.4f", (long long)step, val_loss);
      progress.line(result);
    }
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
    if (!comm || comm->rank() == 0) model->save(o.save);  // whole weights (stages 0-2 keep them on every rank)
    if (zero) zero->save_state(o.save);                     // + each rank's optimizer shard
    std::printf("saved %s\n", o.save.c_str());
  }
  std::printf("summary: %lld steps in %.1f s | final loss %.4f | ", (long long)o.steps, total, last_loss);
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
