// bench_adamw8bit: 8-bit against 32-bit AdamW (optim/adamw.h, 8-BIT STATE) on bench_train's GPT
// benchmark model (L4 H4 C256, vocabulary 256, T256 B8), one JSON object per line:
//   "adamw8bit_state": optimizer state bytes per parameter, counted from the buffers each optimizer
//     really allocated after its first step (moments, block scales; the fp32 master copy of a half
//     model reported apart), 8-bit against 32-bit;
//   "adamw8bit_loss": both models (same initial weights) trained side by side on the same batches,
//     every --report steps the mean loss of the last --report steps of each, and at the end the final
//     losses and their difference in % of the 32-bit one (the issue asks for <= 2% after 500 steps).
// The batches come from a fixed random first-order Markov chain over the 256 tokens (each token's
// successor drawn from a peaked distribution), so the loss falls towards the chain's entropy rate
// (reported as "floor") instead of to zero, and a difference between the optimizers stays visible.
// No timing: the figures do not depend on the machine's load.
// Usage: bench_adamw8bit [--steps 500] [--report 50] [--context 256] [--batch 8] [--device cpu|cuda]
//                        [--precision fp32|bf16]
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/random.h"
#include "json_line.h"
#include "layers/nn.h"
#include "optim/optim.h"

using namespace hg;

namespace {

constexpr int64_t kVocab = 256;

// next[a] = a peaked distribution over successors of token a (softmax of 3 * N(0, 1) logits).
struct MarkovChain {
  std::vector<std::discrete_distribution<int>> next;
  double entropy_rate = 0.0;  // nats per token under the stationary distribution (uniform start approx.)
  explicit MarkovChain(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal;
    for (int64_t a = 0; a < kVocab; ++a) {
      std::vector<double> w(kVocab);
      double total = 0;
      for (double& x : w) total += (x = std::exp(3.0 * normal(rng)));
      double h = 0;
      for (double x : w) h -= x / total * std::log(x / total);
      entropy_rate += h / double(kVocab);
      next.emplace_back(w.begin(), w.end());
    }
  }
  // ids [B, T] and targets [B, T] (the ids shifted by one).
  std::pair<Tensor, Tensor> batch(std::mt19937& rng, int64_t B, int64_t T, const Device& device) {
    std::vector<int64_t> seq(size_t(B * (T + 1)));
    std::uniform_int_distribution<int> first(0, int(kVocab) - 1);
    for (int64_t b = 0; b < B; ++b) {
      int64_t* s = seq.data() + b * (T + 1);
      s[0] = first(rng);
      for (int64_t t = 1; t <= T; ++t) s[t] = next[size_t(s[t - 1])](rng);
    }
    std::vector<int64_t> ids, targets;
    for (int64_t b = 0; b < B; ++b) {
      ids.insert(ids.end(), seq.begin() + b * (T + 1), seq.begin() + b * (T + 1) + T);
      targets.insert(targets.end(), seq.begin() + b * (T + 1) + 1, seq.begin() + (b + 1) * (T + 1));
    }
    return {from_vector(ids, {B, T}, i64, device), from_vector(targets, {B, T}, i64, device)};
  }
};

struct Trained {
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  double window_sum = 0.0;
};

Trained make(int state_bits, int64_t T, DType dtype, const Device& device) {
  manual_seed(1);  // the same initial weights for both
  Trained t;
  t.model = std::make_unique<nn::GPT>(nn::GPTConfig().vocab_size(kVocab).context(T).n_layer(4).n_head(4).n_embd(256));
  t.model->to(dtype);
  t.model->to(device);
  t.optimizer = std::make_unique<optim::AdamW>(
      t.model->parameters(),
      optim::AdamWOptions().lr(1e-3).weight_decay(0.1).decay_only_matrices(true).state_bits(state_bits));
  return t;
}

void report_state(const Trained& t, int state_bits) {
  int64_t moments = 0, master = 0, quantised = 0;
  const std::vector<Tensor> params = t.model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    if (t.optimizer->quantizes(params[i])) quantised += params[i].numel();
    for (const auto& [name, buffer] : t.optimizer->state(int64_t(i)).buffers) {
      const int64_t bytes = buffer.numel() * int64_t(buffer.element_size());
      (name == "master" ? master : moments) += bytes;
    }
  }
  const double n = double(t.model->parameter_count());
  bench::JsonLine("adamw8bit_state")
      .add("state_bits", state_bits)
      .add("params", (long long)t.model->parameter_count())
      .add("quantised_params", (long long)quantised)
      .add("moment_bytes", (long long)moments)
      .add("moment_bytes_per_param", double(moments) / n)
      .add("master_bytes_per_param", double(master) / n)
      .print();
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_adamw8bit [--steps N] [--report N] [--context T] [--batch B] [--device cpu|cuda]\n"
    "                       [--precision f32|bf16]\n"
    "8-bit against 32-bit AdamW on bench_train's GPT (L4 H4 C256, vocabulary 256): state bytes per\n"
    "parameter and the two loss curves side by side (no timing). Prints JSON lines to stdout\n"
    "(\"adamw8bit_state\", \"adamw8bit_loss\").\n"
    "  --steps N            training steps of each model (default 500)\n"
    "  --report N           a loss line every N steps, the mean of the last N (default 50)\n"
    "  --context T          sequence length (default 256)\n"
    "  --batch B            sequences per batch (default 8)\n"
    "  --device cpu|cuda    where both models train (default cpu)\n"
    "  --precision f32|bf16 model dtype; bf16 keeps an fp32 master copy (default f32)\n"
    "  -h, --help           this text\n";

int main(int argc, char** argv) {
  int64_t steps = 500, report = 50, T = 256, B = 8;
  Device device = kCPU;
  DType dtype = f32;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (i + 1 >= argc) hg::bench::exit_unknown_argument("bench_adamw8bit", argv[i], kUsage);
    const std::string value = argv[++i];
    if (flag == "--steps") steps = std::max<int64_t>(1, std::stoll(value));
    else if (flag == "--report") report = std::max<int64_t>(1, std::stoll(value));
    else if (flag == "--context") T = std::max<int64_t>(2, std::stoll(value));
    else if (flag == "--batch") B = std::max<int64_t>(1, std::stoll(value));
    else if (flag == "--device") device = Device::parse(value);
    else if (flag == "--precision") dtype = value == "bf16" ? bf16 : f32;
    else hg::bench::exit_unknown_argument("bench_adamw8bit", flag.c_str(), kUsage);
  }
  try {
    MarkovChain chain(7);
    std::mt19937 rng(11);
    Trained runs[2] = {make(32, T, dtype, device), make(8, T, dtype, device)};
    const int bits[2] = {32, 8};
    double last_window[2] = {0, 0};
    for (int64_t step = 1; step <= steps; ++step) {
      const auto [ids, targets] = chain.batch(rng, B, T, device);
      for (int r = 0; r < 2; ++r) {
        Tensor loss = runs[r].model->loss(ids, targets);
        runs[r].window_sum += loss.item();
        loss.backward();
        optim::clip_grad_norm(runs[r].model->parameters(), 1.0);
        runs[r].optimizer->step();
        runs[r].optimizer->zero_grad();
        if (step == 1) report_state(runs[r], bits[r]);
      }
      if (step % report == 0 || step == steps) {
        const int64_t window = step % report == 0 ? report : step % report;
        for (int r = 0; r < 2; ++r) last_window[r] = runs[r].window_sum / double(window), runs[r].window_sum = 0;
        bench::JsonLine("adamw8bit_loss")
            .add("step", (long long)step)
            .add("loss_32bit", last_window[0])
            .add("loss_8bit", last_window[1])
            .add("window", (long long)window)
            .print();
      }
    }
    bench::JsonLine("adamw8bit_loss_final")
        .add("model", "gpt_L4_H4_C256_T" + std::to_string(T) + "_B" + std::to_string(B))
        .add("precision", dtype == bf16 ? "bf16" : "fp32")
        .add("device", device.str())
        .add("steps", (long long)steps)
        .add("final_loss_32bit", last_window[0])
        .add("final_loss_8bit", last_window[1])
        .add("difference_percent", 100.0 * (last_window[1] - last_window[0]) / last_window[0])
        .add("floor", chain.entropy_rate)
        .add("start", std::log(double(kVocab)))
        .print();
  } catch (const Error& e) {
    bench::JsonLine("adamw8bit").add("error", e.what()).print();
    return 1;
  }
  return 0;
}
