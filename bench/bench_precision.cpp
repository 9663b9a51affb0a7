// bench_precision: what each training precision costs and saves, one JSON object per line.
//
// For one GPT (L4 H4 C256 T128 B8 by default) trained with AdamW, per precision:
//   fp32                 f32 weights, gradients and moments
//   bf16 / fp16          half weights and gradients, fp32 master weights and moments (fp16 with a
//                        dynamic loss scaler: scale, unscale and the inf/NaN check are timed too)
//   bf16_fp32_grads      bf16 weights with fp32 gradient buffers
//   bf16_no_master_sr    bf16 weights updated in place with stochastic rounding (no master copy)
// it reports model-state bytes per parameter (weights + gradients + optimizer state, counted from
// the tensors themselves), the peak allocated device memory over a step (the allocator's
// high-water mark: model state + activations + temporaries), the median step time, tokens/s, and
// the ratios of each against fp32 measured in the same process.
//   Usage: bench_precision [--device cpu|cuda] [--steps N] [--quick]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/allocator.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "timing.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;
using hg::bench::Clock;
using hg::bench::median;

namespace {

struct Precision {
  const char* name;
  DType dtype;
  bool fp32_grads = false;
  bool master_weights = true;
  bool stochastic_rounding = false;
};

struct Result {
  double bytes_per_param, peak_bytes, step_ms;
};

Device g_device = kCPU;

double bytes_of(const Tensor& t) { return t.defined() ? double(t.numel()) * double(t.element_size()) : 0.0; }

void sync_device() {
  if (g_device.is_cuda()) cuda::synchronize(g_device.index);
}

Result run(const Precision& p, const nn::GPTConfig& config, int64_t batch, int steps) {
  manual_seed(1);
  nn::GPT model(config);
  model.to(p.dtype);
  model.to(g_device);
  if (p.fp32_grads) model.set_grad_dtype(DType::f32);
  optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(3e-4).weight_decay(0.1));
  optimizer.set_mixed_precision(optim::MixedPrecisionOptions()
                                    .master_weights(p.master_weights)
                                    .stochastic_rounding(p.stochastic_rounding)
                                    .rounding_seed(7));
  optim::LossScaler scaler = p.dtype == DType::f16 ? optim::LossScaler::dynamic() : optim::LossScaler::none();
  const int64_t T = config.context();
  const Tensor ids = randint(0, config.vocab_size(), {batch, T}, i64, g_device);
  const Tensor targets = randint(0, config.vocab_size(), {batch, T}, i64, g_device);
  const std::vector<Tensor> params = model.parameters();
  auto step = [&] {
    scaler.scale(model.loss(ids, targets)).backward();
    scaler.unscale_(optimizer);
    optimizer.clip_grad_norm(1.0);
    scaler.step(optimizer);
    scaler.update();
  };
  // Warm up (fills the optimizer state and the allocator's cache), then count the model state with
  // the gradients of the last backward still alive.
  for (int i = 0; i < 2; ++i) {
    step();
    optimizer.zero_grad();
  }
  scaler.scale(model.loss(ids, targets)).backward();
  double state_bytes = 0;
  for (const Tensor& t : params) state_bytes += bytes_of(t) + bytes_of(t.grad());
  for (const auto& [name, t] : optimizer.state_tensors())
    if (name.find(".step") == std::string::npos) state_bytes += bytes_of(t);
  optimizer.zero_grad();

  sync_device();
  reset_peak_memory(g_device);
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    step();
    optimizer.zero_grad();
    sync_device();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return {state_bytes / double(model.parameter_count()), double(memory_stats(g_device).peak_allocated_bytes),
          median(ms)};
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_precision [--device cpu|cuda] [--steps N] [--quick]\n"
    "What each training precision costs and saves on one GPT (L4 H4 C256 T128 B8): fp32, bf16, fp16,\n"
    "bf16_fp32_grads, bf16_no_master_sr. Prints JSON lines to stdout: model-state bytes per parameter,\n"
    "peak memory, median step time, tokens/s, ratios to fp32.\n"
    "  --device cpu|cuda  where it trains (default cpu)\n"
    "  --steps N          timed steps per precision (default 6)\n"
    "  --quick            2 steps (smoke runs)\n"
    "  -h, --help         this text\n";

int main(int argc, char** argv) {
  int steps = 6;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--quick") == 0) steps = 2;
    else if (std::strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) g_device = Device::parse(argv[++i]);
    else hg::bench::exit_unknown_argument("bench_precision", argv[i], kUsage);
  }
  const auto config = nn::GPTConfig().vocab_size(256).context(128).n_layer(4).n_head(4).n_embd(256);
  const int64_t batch = 8;
  const Precision precisions[] = {
      {"fp32", DType::f32},
      {"bf16", DType::bf16},
      {"fp16", DType::f16},
      {"bf16_fp32_grads", DType::bf16, true},
      {"bf16_no_master_sr", DType::bf16, false, false, true},
  };
  try {
    Result baseline{};
    for (const Precision& p : precisions) {
      const Result r = run(p, config, batch, steps);
      if (p.dtype == DType::f32) baseline = r;
      bench::JsonLine("precision")
          .add("precision", p.name)
          .add("model", "gpt_L4_H4_C256_T128_B8")
          .add("model_state_bytes_per_param", r.bytes_per_param)
          .add("peak_bytes", r.peak_bytes)
          .add("median_ms", r.step_ms)
          .add("tokens_per_s", double(batch * config.context()) / (r.step_ms / 1e3))
          .add("speedup_vs_fp32", baseline.step_ms / r.step_ms)
          .add("peak_memory_vs_fp32", r.peak_bytes / baseline.peak_bytes)
          .add("threads", omp_get_max_threads())
          .add("device", g_device.str())
          .add("steps", steps)
          .print();
    }
  } catch (const Error& e) {
    bench::JsonLine("precision").add("device", g_device.str()).add("error", e.what()).print();
    return 1;
  }
  return 0;
}
