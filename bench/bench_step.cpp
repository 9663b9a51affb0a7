// bench_step: the GPT training step of bench_train's shapes, fused vs composed glue, fp32 and bf16
// (fp32 master weights), one JSON object per line. A (fused: the MLP's bias + GELU in one op, and
// attention_qkv: no head-split copies) and B (composed: Linear's bias epilogue then gelu; attention
// through narrow views of qkv) run INTERLEAVED in one process, step by step, so a
// loaded machine slows both alike; each step reports wall ms and process CPU ms
// (CLOCK_PROCESS_CPUTIME_ID, all threads), medians over the timed steps. Also the target for
// `perf record` (docs/cpu_step.md): --only fused|composed runs one variant. The fused variant also runs
// each residual add fused with the LayerNorm after it (Block::fuse_add_layer_norm). --fusion
// add_layer_norm compares that fusion alone: both variants keep every other fusion on, and B runs the
// residual adds and LayerNorms composed.
// --op add_layer_norm times the op alone instead (forward + backward of add_layer_norm against add then
// layer_norm, on the step's [B T, C] rows, interleaved, median thread CPU us per call).
// Usage: bench_step [--steps N] [--shape big|small|both] [--precision f32|bf16|both] [--only fused|composed]
//                   [--fusion all|add_layer_norm] [--op add_layer_norm]
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "bench_args.h"
#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "json_line.h"
#include "timing.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;
using hg::bench::median;

namespace {

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One model + optimizer at a precision; fused selects the fused ops (all of them, or with
// only_add_layer_norm the residual add + LayerNorm alone, the others fused in both variants).
struct Trainer {
  Trainer(const nn::GPTConfig& config, DType dtype, bool fused, bool only_add_layer_norm, int64_t B) {
    manual_seed(1);
    model = std::make_unique<nn::GPT>(config);
    model->to(dtype);
    for (auto& block : model->h) {
      block->mlp->fuse_bias_gelu = fused || only_add_layer_norm;
      block->attn->attention_from_qkv = fused || only_add_layer_norm;
      block->fuse_add_layer_norm = fused;
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

void bench_shape(const char* shape, int64_t T, int64_t B, DType dtype, int steps, const std::string& only,
                 const std::string& fusion) {
  const int64_t L = 4, H = 4, C = 256;
  const auto config = nn::GPTConfig().vocab_size(256).context(T).n_layer(L).n_head(H).n_embd(C);
  std::vector<std::pair<std::string, std::unique_ptr<Trainer>>> variants;
  for (const char* name : {"fused", "composed"})
    if (only.empty() || only == name)
      variants.emplace_back(
          name, std::make_unique<Trainer>(config, dtype, std::string(name) == "fused", fusion == "add_layer_norm", B));
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
        .add("fusion", fusion)
        .add("batch", (long long)B)
        .add("context", (long long)T)
        .add("threads", omp_get_max_threads())
        .add("steps", steps)
        .add("median_ms", median(wall[i]))
        .add("median_cpu_ms", median(cpu[i]))
        .add("gflops", flops / (median(wall[i]) * 1e6))
        .print();
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

// add_layer_norm vs add + layer_norm, forward and backward with both outputs used (as in a block),
// on rows = B T of width C; median thread CPU time per call over `reps` interleaved calls.
void bench_add_layer_norm_op(const char* shape, int64_t rows, int64_t C, DType dtype, int reps) {
  manual_seed(2);
  const Tensor x = randn({rows, C}, dtype).requires_grad_(), r = randn({rows, C}, dtype).requires_grad_();
  const Tensor w = ones({C}, dtype).requires_grad_(), b = zeros({C}, dtype).requires_grad_();
  const Tensor g_sum = randn({rows, C}, dtype), g_norm = randn({rows, C}, dtype);
  auto fused = [&] {
    const AddLayerNorm o = add_layer_norm(x, r, w, b);
    run_backward(o.normalized, g_norm, true);
    run_backward(o.sum, g_sum, false);
  };
  auto composed = [&] {
    const Tensor s = x + r;
    const Tensor n = layer_norm(s, w, b);
    run_backward(n, g_norm, true);
    run_backward(s, g_sum, false);
  };
  std::vector<double> times[2];
  for (int i = 0; i < reps + 3; ++i)
    for (int k = 0; k < 2; ++k) {
      for (Tensor t : {x, r, w, b}) t.set_grad(Tensor());
      const double t0 = thread_cpu_us();
      k == 0 ? fused() : composed();
      if (i >= 3) times[k].push_back(thread_cpu_us() - t0);
    }
  for (int k = 0; k < 2; ++k)
    bench::JsonLine("add_layer_norm_op")
        .add("shape", shape)
        .add("dtype", dtype_name(dtype))
        .add("variant", k == 0 ? "fused" : "composed")
        .add("rows", (long long)rows)
        .add("cols", (long long)C)
        .add("threads", omp_get_max_threads())
        .add("reps", reps)
        .add("median_thread_cpu_us", median(times[k]))
        .print();
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_step [--steps N] [--shape big|small|both] [--precision f32|bf16|both] [--only fused|composed]\n"
    "                  [--fusion all|add_layer_norm] [--op add_layer_norm]\n"
    "The GPT training step of bench_train's shapes, fused vs composed glue, interleaved in one process.\n"
    "Prints JSON lines to stdout: median wall ms and process CPU ms per step of each variant.\n"
    "  --steps N                    timed steps (default 10)\n"
    "  --shape big|small|both       bench_train's T256 B8 and/or T64 B4 GPT (default both)\n"
    "  --precision f32|bf16|both    fp32, and/or bf16 with fp32 master weights (default both)\n"
    "  --only fused|composed        run one variant only (a target for perf record)\n"
    "  --fusion all|add_layer_norm  compare every fusion (default), or the add + LayerNorm fusion alone\n"
    "  --op add_layer_norm          time that op alone instead (forward + backward, us per call)\n"
    "  -h, --help                   this text\n";

int main(int argc, char** argv) {
  int steps = 10;
  std::string shape = "both", precision = "both", only, fusion = "all", op;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (a == "--steps" && i + 1 < argc) steps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--shape" && i + 1 < argc) shape = argv[++i];
    else if (a == "--precision" && i + 1 < argc) precision = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--fusion" && i + 1 < argc) fusion = argv[++i];
    else if (a == "--op" && i + 1 < argc) op = argv[++i];
    else
      hg::bench::exit_unknown_argument("bench_step", argv[i], kUsage);
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
  if (fusion != "all" && fusion != "add_layer_norm") return usage_error("--fusion", fusion, "all or add_layer_norm");
  if (!op.empty() && op != "add_layer_norm") return usage_error("--op", op, "add_layer_norm");
  for (DType dtype : {DType::f32, DType::bf16}) {
    if (precision != "both" && precision != dtype_name(dtype)) continue;
    if (!op.empty()) {
      if (shape == "both" || shape == "big") bench_add_layer_norm_op("L4_H4_C256_T256_B8", 256 * 8, 256, dtype, steps);
      if (shape == "both" || shape == "small") bench_add_layer_norm_op("L4_H4_C256_T64_B4", 64 * 4, 256, dtype, steps);
      continue;
    }
    if (shape == "both" || shape == "big") bench_shape("L4_H4_C256_T256_B8", 256, 8, dtype, steps, only, fusion);
    if (shape == "both" || shape == "small") bench_shape("L4_H4_C256_T64_B4", 64, 4, dtype, steps, only, fusion);
  }
  return 0;
}
