// bench_step: the GPT training step of bench_train's shapes, fused vs composed glue, fp32 and bf16
// (fp32 master weights), one JSON object per line. A (fused: the MLP's bias + GELU in one op, and
// attention_qkv: no head-split copies) and B (composed: Linear's bias epilogue then gelu; attention
// through narrow views of qkv) run INTERLEAVED in one process, step by step, so a
// loaded machine slows both alike; each step reports wall ms and process CPU ms
// (CLOCK_PROCESS_CPUTIME_ID, all threads), medians over the timed steps. Also the target for
// `perf record` (docs/cpu_step.md): --only fused|composed runs one variant.
// Usage: bench_step [--steps N] [--shape big|small|both] [--precision f32|bf16|both] [--only fused|composed]
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "engine/random.h"
#include "json_line.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One model + optimizer at a precision; fused selects the MLP's bias_gelu op.
struct Trainer {
  Trainer(const nn::GPTConfig& config, DType dtype, bool fused, int64_t B) {
    manual_seed(1);
    model = std::make_unique<nn::GPT>(config);
    model->to(dtype);
    for (auto& block : model->h) {
      block->mlp->fuse_bias_gelu = fused;
      block->attn->attention_from_qkv = fused;
    }
    optimizer = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(3e-4).weight_decay(0.1));
    optimizer->set_mixed_precision(optim::MixedPrecisionOptions().master_weights(dtype != DType::f32));
    ids = randint(0, config.vocab_size(), {B, config.context()}, i64);
    targets = randint(0, config.vocab_size(), {B, config.context()}, i64);
  }
  void step() {
    model->loss(ids, targets).backward();
    optimizer->clip_grad_norm(1.0);
    optimizer->step();
    optimizer->zero_grad();
  }
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  Tensor ids, targets;
};

void bench_shape(const char* shape, int64_t T, int64_t B, DType dtype, int steps, const std::string& only) {
  const int64_t L = 4, H = 4, C = 256;
  const auto config = nn::GPTConfig().vocab_size(256).context(T).n_layer(L).n_head(H).n_embd(C);
  std::vector<std::pair<std::string, std::unique_ptr<Trainer>>> variants;
  for (const char* name : {"fused", "composed"})
    if (only.empty() || only == name)
      variants.emplace_back(name, std::make_unique<Trainer>(config, dtype, std::string(name) == "fused", B));
  for (auto& v : variants)
    for (int i = 0; i < 2; ++i) v.second->step();
  std::vector<std::vector<double>> wall(variants.size()), cpu(variants.size());
  for (int s = 0; s < steps; ++s)
    for (size_t i = 0; i < variants.size(); ++i) {
      const double w0 = wall_ms(), c0 = cpu_ms();
      variants[i].second->step();
      wall[i].push_back(wall_ms() - w0);
      cpu[i].push_back(cpu_ms() - c0);
    }
  const double n = double(variants[0].second->model->parameter_count());
  const double flops = 6 * n * B * T + 12.0 * L * C * T * B * T;
  for (size_t i = 0; i < variants.size(); ++i)
    bench::JsonLine("gpt_step")
        .add("shape", shape)
        .add("dtype", dtype_name(dtype))
        .add("variant", variants[i].first)
        .add("batch", (long long)B)
        .add("context", (long long)T)
        .add("threads", omp_get_max_threads())
        .add("steps", steps)
        .add("median_ms", median(wall[i]))
        .add("median_cpu_ms", median(cpu[i]))
        .add("gflops", flops / (median(wall[i]) * 1e6))
        .print();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 10;
  std::string shape = "both", precision = "both", only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--shape" && i + 1 < argc) shape = argv[++i];
    else if (a == "--precision" && i + 1 < argc) precision = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "bench_step: unknown argument %s\n"
                   "usage: bench_step [--steps N] [--shape big|small|both] [--precision f32|bf16|both] "
                   "[--only fused|composed]\n", argv[i]);
      return 2;
    }
  }
  if (precision == "fp32") precision = "f32";  // bench_train's spelling
  const auto usage_error = [](const char* flag, const std::string& value, const char* expected) {
    std::fprintf(stderr, "bench_step: %s '%s': expected %s\n", flag, value.c_str(), expected);
    return 2;
  };
  if (shape != "both" && shape != "big" && shape != "small") return usage_error("--shape", shape, "big, small or both");
  if (precision != "both" && precision != "f32" && precision != "bf16")
    return usage_error("--precision", precision, "f32 (or fp32), bf16 or both");
  if (!only.empty() && only != "fused" && only != "composed") return usage_error("--only", only, "fused or composed");
  for (DType dtype : {DType::f32, DType::bf16}) {
    if (precision != "both" && precision != dtype_name(dtype)) continue;
    if (shape == "both" || shape == "big") bench_shape("L4_H4_C256_T256_B8", 256, 8, dtype, steps, only);
    if (shape == "both" || shape == "small") bench_shape("L4_H4_C256_T64_B4", 64, 4, dtype, steps, only);
  }
  return 0;
}
