// bench_train: training-step speed, one JSON object per line.
//   (a) GPT L4 H4 C256 T256 B8   (b) GPT L4 H4 C256 T64 B4   (c) MLP 784-1024-1024-10, batch 256
// Each step is forward + backward + AdamW (and clip for GPT), the same code train_gpt runs. Reports
// the median ms/step over the timed steps, tokens/s, analytic FLOPs per step
//   GPT: 6 N B T + 12 L C T B T      MLP: 6 N B
// and the achieved GFLOP/s. On a CUDA device also "runtime": the CUDA runtime calls of the last timed
// step (kernels/runtime_counters.h; the timing's own synchronisation excluded).
// --precision bf16|fp16 runs halfgrad's mixed precision the way train_gpt and bench_precision do:
// model.to(half dtype), fp32 master weights and moments in AdamW (set_mixed_precision), and for fp16
// the dynamic loss scaler (scale, unscale, inf/NaN check and update inside the timed step); the MLP's
// input is converted to the half dtype once, outside the timing. fp32 is the plain path above.
// FLOPs are counted the same way for every precision. Every line carries "precision". On the CPU a
// line also carries "phases_ms": the median wall ms of the step's forward, backward and optimizer
// (unscale, clip, AdamW, update, zero_grad) phases.
// --grad-accum N makes a step N micro-batches (forward and backward on the same batch, the loss
// scaled by 1/N), their gradients summed in the parameters' .grad, then one optimizer phase: what
// train_gpt --grad-accum runs. FLOPs and tokens per step count all N; the phases sum the micro-batches.
// bench/peers/pytorch_train.py runs the same workloads in PyTorch with the same keys.
// Usage: bench_train [--quick] [--steps N] [--device cpu|cuda] [--precision fp32|bf16|fp16]
//                    [--threads N] [--models gpt256,gpt64,mlp] [--grad-accum N]
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "kernels/cpu/gemm_calibration.h"
#include "kernels/runtime_counters.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "timing.h"

using namespace hg;
using hg::bench::Clock;
using hg::bench::median;

namespace {

Device g_device = kCPU;
DType g_precision = DType::f32;  // --precision: f32, or bf16 / f16 with fp32 master weights
RuntimeCounters g_last_step;     // the runtime calls of the last timed step
int g_grad_accum = 1;            // --grad-accum: micro-batches per optimizer step

// Waits for the device's queued work, so a step's time includes it.
void sync_device() {
  if (g_device.is_cuda()) cuda::synchronize(g_device.index);
}

// --precision's spellings (train_gpt's: train/precision.h).
DType parse_precision(const std::string& value) {
  if (value == "fp32") return DType::f32;
  if (value == "bf16") return DType::bf16;
  if (value == "fp16") return DType::f16;
  throw Error("bench_train: unknown --precision \"" + value + "\"; expected fp32, bf16 or fp16");
}
// --grad-accum's value: a whole number of micro-batches, 1 to 1024.
int parse_grad_accum(const char* value) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || n < 1 || n > 1024)
    throw Error(std::string("bench_train: --grad-accum \"") + value + "\"; expected a whole number from 1 to 1024");
  return int(n);
}
const char* precision_name(DType dtype) {
  return dtype == DType::bf16 ? "bf16" : dtype == DType::f16 ? "fp16" : "fp32";
}

// train_gpt's default scaler for the precision: dynamic for fp16, none otherwise.
optim::LossScaler loss_scaler() {
  return g_precision == DType::f16 ? optim::LossScaler::dynamic() : optim::LossScaler::none();
}

// CPU time of the whole process (every thread), in ms: with --threads 1 on a shared, loaded machine
// this is the figure to compare (median_cpu_ms); wall-clock median_ms needs a quiet machine.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}
std::vector<double> g_cpu_ms;  // per timed step, filled by time_steps, cleared by each bench

// Where a CPU step's time goes: forward (the loss), backward, optimizer (unscale, clip, step, update,
// zero_grad), wall ms per timed step. Marked by PhaseClock inside the step; CPU only (on a CUDA
// device the marks would need a synchronisation each, which changes the step being measured).
enum Phase { kForward, kBackward, kOptimizer, kPhases };
constexpr const char* kPhaseNames[kPhases] = {"forward", "backward", "optimizer"};
std::vector<double> g_phase_ms[kPhases];
bool g_recording_phases = false;  // true during the timed steps

// Starts at construction; mark(phase) adds the time since the last mark to that phase (several marks of
// one phase in a step, one per micro-batch, add up); at destruction, the end of the step, each phase's
// total becomes one sample.
class PhaseClock {
 public:
  PhaseClock() = default;
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  ~PhaseClock() {
    if (!g_recording_phases || g_device.is_cuda()) return;
    for (int p = 0; p < kPhases; ++p) g_phase_ms[p].push_back(total_ms_[p]);
  }
  void mark(Phase phase) {
    const auto now = Clock::now();
    total_ms_[phase] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }

 private:
  Clock::time_point last_ = Clock::now();
  double total_ms_[kPhases] = {};
};

// The loss of one micro-batch of --grad-accum: the batch's mean loss / N, so the summed gradients are
// those of the mean over the N micro-batches.
Tensor micro_batch_loss(const Tensor& loss) { return g_grad_accum == 1 ? loss : loss * (1.0 / g_grad_accum); }

// {"forward": median ms, ...}, or an empty string when the phases were not recorded.
std::string phase_json() {
  if (g_phase_ms[kForward].empty()) return "";
  std::string json = "{";
  for (int p = 0; p < kPhases; ++p) {
    char item[64];
    std::snprintf(item, sizeof item, "%s\"%s\": %.4g", p ? ", " : "", kPhaseNames[p], median(g_phase_ms[p]));
    json += item;
  }
  return json + "}";
}

template <class Step>
std::vector<double> time_steps(int warmup, int steps, Step&& step) {
  for (int i = 0; i < warmup; ++i) step();
  sync_device();
  g_cpu_ms.clear();
  for (auto& phase : g_phase_ms) phase.clear();
  g_recording_phases = true;
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    const double cpu_start = process_cpu_ms();
    const RuntimeCounters before = runtime_counters();
    step();
    g_last_step = runtime_counters() - before;
    sync_device();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    g_cpu_ms.push_back(process_cpu_ms() - cpu_start);
  }
  g_recording_phases = false;
  return ms;
}

// Times `steps` optimizer steps (after 2 warm-up steps) of g_grad_accum micro-batches, each micro-batch's loss
// from loss(): in fp32 backward -> [clip] -> step; in a half precision bench_precision's mixed-precision step,
// scale -> backward -> unscale -> [clip] -> step -> update. clip: the gradients' norm clipped to 1 first.
template <class Model, class Loss>
std::vector<double> time_training_steps(int steps, Model& model, optim::AdamW& optimizer, bool clip, Loss&& loss) {
  if (g_precision == DType::f32) {
    return time_steps(2, steps, [&] {
      PhaseClock clock;
      for (int micro = 0; micro < g_grad_accum; ++micro) {
        const Tensor micro_loss = micro_batch_loss(loss());
        clock.mark(kForward);
        micro_loss.backward();
        clock.mark(kBackward);
      }
      if (clip) optim::clip_grad_norm(model.parameters(), 1.0);
      optimizer.step();
      optimizer.zero_grad();
      clock.mark(kOptimizer);
    });
  }
  optimizer.set_mixed_precision(optim::MixedPrecisionOptions().master_weights(true));
  optim::LossScaler scaler = loss_scaler();
  return time_steps(2, steps, [&] {
    PhaseClock clock;
    for (int micro = 0; micro < g_grad_accum; ++micro) {
      const Tensor micro_loss = scaler.scale(micro_batch_loss(loss()));
      clock.mark(kForward);
      micro_loss.backward();
      clock.mark(kBackward);
    }
    scaler.unscale_(optimizer);
    if (clip) optimizer.clip_grad_norm(1.0);
    scaler.step(optimizer);
    scaler.update();
    optimizer.zero_grad();
    clock.mark(kOptimizer);
  });
}

// Prints a workload's train_step line. context: a sequence model's (0: none, and no "context" field);
// throughput_key: tokens_per_s or samples_per_s, of items_per_step per step.
void print_train_step(const std::string& model_name, int64_t params, int64_t batch, int64_t context,
                      const std::vector<double>& ms, const char* throughput_key, double items_per_step, double flops,
                      int steps) {
  const double step_ms = median(ms);
  bench::JsonLine line("train_step");
  line.add("impl", "halfgrad")
      .add("precision", precision_name(g_precision))
      .add("model", model_name)
      .add("params", (long long)params)
      .add("batch", (long long)batch);
  if (context > 0) line.add("context", (long long)context);
  line.add("median_ms", step_ms)
      .add("median_cpu_ms", median(g_cpu_ms))
      .add("grad_accum", g_grad_accum)
      .add(throughput_key, items_per_step / (step_ms / 1e3))
      .add("flops_per_step", flops)
      .add("gflops", flops / (step_ms / 1e3) / 1e9)
      .add("threads", omp_get_max_threads())
      .add("device", g_device.str())
      .add("steps", steps);
  if (g_device.is_cpu()) line.add("cpu_gemm", kernels::cpu::gemm_plan_line(g_precision));
  line.add_raw("runtime", g_last_step.json()).add_raw_if("phases_ms", phase_json()).print();
}

void bench_gpt(const std::string& name, int64_t L, int64_t H, int64_t C, int64_t T, int64_t B, int steps) {
  manual_seed(1);
  const auto config = nn::GPTConfig().vocab_size(256).context(T).n_layer(L).n_head(H).n_embd(C);
  nn::GPT model(config);
  model.to(g_precision);
  model.to(g_device);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(3e-4).weight_decay(0.1));
  const Tensor ids = randint(0, 256, {B, T}, i64, g_device);
  const Tensor targets = randint(0, 256, {B, T}, i64, g_device);
  const std::vector<double> ms =
      time_training_steps(steps, model, optimizer, /*clip=*/true, [&] { return model.loss(ids, targets); });
  const double n = double(model.parameter_count());
  const double flops = (6 * n * B * T + 12.0 * L * C * T * B * T) * g_grad_accum;
  print_train_step(name, model.parameter_count(), B, T, ms, "tokens_per_s", double(B * T * g_grad_accum), flops, steps);
}

void bench_mlp(int steps) {
  manual_seed(2);
  nn::Sequential model({std::make_shared<nn::Linear>(784, 1024), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(1024, 1024), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(1024, 10)});
  model.to(g_precision);
  model.to(g_device);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(1e-3));
  const int64_t B = 256;
  const Tensor x = randn({B, 784}, f32, g_device).to(g_precision);
  const Tensor y = randint(0, 10, {B}, i64, g_device);
  const std::vector<double> ms = time_training_steps(steps, model, optimizer, /*clip=*/false,
                                                     [&] { return cross_entropy(model.forward(x), y); });
  const double n = double(model.parameter_count());
  const double flops = 6 * n * B * g_grad_accum;
  print_train_step("mlp_784_1024_1024_10", model.parameter_count(), B, /*context=*/0, ms, "samples_per_s",
                   double(B * g_grad_accum), flops, steps);
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_train [--quick] [--steps N] [--device cpu|cuda] [--precision fp32|bf16|fp16]\n"
    "                   [--threads N] [--models gpt256,gpt64,mlp] [--grad-accum N]\n"
    "Training-step speed (forward + backward + AdamW): (a) GPT L4 H4 C256 T256 B8, (b) GPT T64 B4,\n"
    "(c) MLP 784-1024-1024-10 batch 256. Prints JSON lines to stdout: median ms/step, tokens/s,\n"
    "FLOPs per step, GFLOP/s.\n"
    "  --quick                      2 timed steps (smoke runs)\n"
    "  --steps N                    timed steps (default 10)\n"
    "  --device cpu|cuda            where it trains (default cpu)\n"
    "  --precision fp32|bf16|fp16   mixed precision as train_gpt runs it (default fp32)\n"
    "  --threads N                  OpenMP threads\n"
    "  --models gpt256,gpt64,mlp    a comma-separated subset of the workloads (default all)\n"
    "  --grad-accum N               micro-batches per optimizer step, gradients summed (default 1)\n"
    "  -h, --help                   this text\n";

int main(int argc, char** argv) {
  int steps = 10;
  std::string models = "gpt256,gpt64,mlp";
  try {
    for (int i = 1; i < argc; ++i) {
      const bool has_value = i + 1 < argc;
      if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
      if (std::strcmp(argv[i], "--quick") == 0)
        steps = 2;
      else if (std::strcmp(argv[i], "--steps") == 0 && has_value)
        steps = std::max(1, std::atoi(argv[++i]));
      else if (std::strcmp(argv[i], "--device") == 0 && has_value)
        g_device = Device::parse(argv[++i]);
      else if (std::strcmp(argv[i], "--precision") == 0 && has_value)
        g_precision = parse_precision(argv[++i]);
      else if (std::strcmp(argv[i], "--threads") == 0 && has_value)
        omp_set_num_threads(std::max(1, std::atoi(argv[++i])));
      else if (std::strcmp(argv[i], "--models") == 0 && has_value)
        models = argv[++i];
      else if (std::strcmp(argv[i], "--grad-accum") == 0 && has_value)
        g_grad_accum = parse_grad_accum(argv[++i]);
      else
        hg::bench::exit_unknown_argument("bench_train", argv[i], kUsage);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  // --models: a comma-separated subset of gpt256, gpt64, mlp.
  const std::vector<std::string> known = {"gpt256", "gpt64", "mlp"};
  std::vector<std::string> wanted_models;
  for (size_t start = 0; start <= models.size();) {
    const size_t end = std::min(models.find(',', start), models.size());
    const std::string name = models.substr(start, end - start);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::fprintf(stderr,
                   "bench_train: unknown --models entry \"%s\"; expected a comma-separated subset of "
                   "gpt256, gpt64, mlp\n",
                   name.c_str());
      return 2;
    }
    wanted_models.push_back(name);
    start = end + 1;
  }
  auto wanted = [&](const std::string& name) {
    return std::find(wanted_models.begin(), wanted_models.end(), name) != wanted_models.end();
  };
  try {
    if (wanted("gpt256")) bench_gpt("gpt_L4_H4_C256_T256_B8", 4, 4, 256, 256, 8, steps);
    if (wanted("gpt64")) bench_gpt("gpt_L4_H4_C256_T64_B4", 4, 4, 256, 64, 4, steps * 3);
    if (wanted("mlp")) bench_mlp(steps * 3);
  } catch (const Error& e) {
    bench::JsonLine("train_step")
        .add("impl", "halfgrad")
        .add("precision", precision_name(g_precision))
        .add("device", g_device.str())
        .add("error", e.what())
        .print();
    return 1;
  }
  return 0;
}
