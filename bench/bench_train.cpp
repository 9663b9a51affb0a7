// bench_train: training-step speed, one JSON object per line.
//   (a) GPT L4 H4 C256 T256 B8   (b) GPT L4 H4 C256 T64 B4   (c) MLP 784-1024-1024-10, batch 256
// Each step is forward + backward + AdamW (and clip for GPT), the same code train_gpt runs. Reports
// the median ms/step over the timed steps, tokens/s, analytic FLOPs per step
//   GPT: 6 N B T + 12 L C T B T      MLP: 6 N B
// and the achieved GFLOP/s. On a CUDA device also "runtime": the CUDA runtime calls of the last timed
// step (kernels/runtime_counters.h; the timing's own synchronisation excluded).
// Usage: bench_train [--quick] [--steps N] [--device cpu|cuda]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "kernels/runtime_counters.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Device g_device = kCPU;
RuntimeCounters g_last_step;  // the runtime calls of the last timed step

// Waits for the device's queued work, so a step's time includes it.
void sync_device() {
  if (g_device.is_cuda()) cuda::synchronize(g_device.index);
}

template <class Step>
std::vector<double> time_steps(int warmup, int steps, Step&& step) {
  for (int i = 0; i < warmup; ++i) step();
  sync_device();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    const RuntimeCounters before = runtime_counters();
    step();
    g_last_step = runtime_counters() - before;
    sync_device();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return ms;
}

void bench_gpt(const std::string& name, int64_t L, int64_t H, int64_t C, int64_t T, int64_t B, int steps) {
  manual_seed(1);
  const auto config = nn::GPTConfig().vocab_size(256).context(T).n_layer(L).n_head(H).n_embd(C);
  nn::GPT model(config);
  model.to(g_device);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(3e-4).weight_decay(0.1));
  const Tensor ids = randint(0, 256, {B, T}, i64, g_device);
  const Tensor targets = randint(0, 256, {B, T}, i64, g_device);
  const auto ms = time_steps(2, steps, [&] {
    model.loss(ids, targets).backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    optimizer.step();
    optimizer.zero_grad();
  });
  const double n = double(model.parameter_count());
  const double flops = 6 * n * B * T + 12.0 * L * C * T * B * T;
  const double step_ms = median(ms);
  bench::JsonLine("train_step")
      .add("model", name)
      .add("params", (long long)model.parameter_count())
      .add("batch", (long long)B)
      .add("context", (long long)T)
      .add("median_ms", step_ms)
      .add("tokens_per_s", double(B * T) / (step_ms / 1e3))
      .add("flops_per_step", flops)
      .add("gflops", flops / (step_ms / 1e3) / 1e9)
      .add("threads", omp_get_max_threads())
      .add("device", g_device.str())
      .add("steps", steps)
      .add_raw("runtime", g_last_step.json())
      .print();
}

void bench_mlp(int steps) {
  manual_seed(2);
  nn::Sequential model({std::make_shared<nn::Linear>(784, 1024), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(1024, 1024), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(1024, 10)});
  model.to(g_device);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(1e-3));
  const int64_t B = 256;
  const Tensor x = randn({B, 784}, f32, g_device);
  const Tensor y = randint(0, 10, {B}, i64, g_device);
  const auto ms = time_steps(2, steps, [&] {
    cross_entropy(model.forward(x), y).backward();
    optimizer.step();
    optimizer.zero_grad();
  });
  const double n = double(model.parameter_count());
  const double flops = 6 * n * B;
  const double step_ms = median(ms);
  bench::JsonLine("train_step")
      .add("model", "mlp_784_1024_1024_10")
      .add("params", (long long)model.parameter_count())
      .add("batch", (long long)B)
      .add("median_ms", step_ms)
      .add("samples_per_s", double(B) / (step_ms / 1e3))
      .add("flops_per_step", flops)
      .add("gflops", flops / (step_ms / 1e3) / 1e9)
      .add("threads", omp_get_max_threads())
      .add("device", g_device.str())
      .add("steps", steps)
      .add_raw("runtime", g_last_step.json())
      .print();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) steps = 2;
    if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = std::max(1, std::atoi(argv[++i]));
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) g_device = Device::parse(argv[++i]);
  }
  try {
    bench_gpt("gpt_L4_H4_C256_T256_B8", 4, 4, 256, 256, 8, steps);
    bench_gpt("gpt_L4_H4_C256_T64_B4", 4, 4, 256, 64, 4, steps * 3);
    bench_mlp(steps * 3);
  } catch (const Error& e) {
    bench::JsonLine("train_step").add("device", g_device.str()).add("error", e.what()).print();
    return 1;
  }
  return 0;
}
