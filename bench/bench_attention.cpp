// bench_attention: the fused attention (FlashAttention-2 kernels) against the composed path, one JSON
// object per line. Sections (all by default; name some to run only those):
//   parity   fused and composed vs the composed path in float64 on the same rounded inputs: forward
//            and backward, every dtype of the device, T in {1, 17, 64, 256, 1024}, D 64 and 128, with
//            and without dropout; the error relative to the largest reference value, beside the
//            tolerance the tests use (6 eps for f16/bf16, 2e-5 for f32, 1e-12 for f64).
//   memory   a GPT training step at T = 1024: the bytes its forward keeps for backward and the step's
//            peak, fused vs composed attention, beside the predicted T x T share L B H T^2 e; and the
//            peak of a classifier head (N 8192, C 256, V 8192) fused vs composed, beside N V e.
//   speed    attention forward + backward alone (B8 H4 T256 D64, the GPT benchmark's, and B2 H4 T1024
//            D64) and whole GPT steps (L4 H4 C256 T256 B8, and T1024 B2), fused vs composed, in one run.
//   gpu      (CUDA device) TFLOP/s at T 1024 and 4096, D 64 and 128, causal, bf16, forward and backward;
//            FLOPs 4 B H T^2 D forward (half of it causal), 2.5x that backward (FlashAttention-2's count:
//            "effective" TFLOP/s, since halfgrad's deterministic backward does 7 tile products, not 5).
// Usage: bench_attention [--device cpu|cuda] [--quick] [parity] [memory] [speed] [gpu]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "bench_args.h"
#include "engine/allocator.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "timing.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/attention_grads.h"

using namespace hg;
using hg::bench::Clock;
using hg::bench::median;
using hg::testing::max_abs;
using hg::testing::max_abs_diff;

namespace {

Device g_device = kCPU;
bool g_quick = false;

void sync_device() {
  if (g_device.is_cuda()) cuda::synchronize(g_device.index);
}

// Median milliseconds of `reps` runs of fn after one warm-up.
double time_ms(int reps, const std::function<void()>& fn) {
  fn();
  sync_device();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    sync_device();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return median(ms);
}

double tolerance(DType dtype) {
  switch (dtype) {
    case f16: return 6 * std::ldexp(1.0, -10);
    case bf16: return 6 * std::ldexp(1.0, -7);
    case f32: return 2e-5;
    default: return 1e-12;
  }
}

using Grads = hg::testing::AttentionGrads;

// One causal forward + backward (dropout masks from seed 5).
Grads forward_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, double p,
                       AttentionImpl impl) {
  return hg::testing::attention_forward_backward(q, k, v, dout, /*causal=*/true, p, impl);
}

void parity() {
  std::vector<DType> dtypes = g_device.is_cuda() ? std::vector<DType>{bf16, f16, f32}
                                                 : std::vector<DType>{f32, bf16, f16, f64};
  std::vector<int64_t> lengths = {1, 17, 64, 256, 1024};
  if (g_quick) lengths = {1, 17, 64};
  for (DType dtype : dtypes) {
    for (int64_t t : lengths) {
      for (int64_t d : {64, 128}) {
        for (double p : {0.0, 0.1}) {
          manual_seed(uint64_t(7 * t + d));
          const Shape shape{1, 2, t, d};
          const Tensor q = randn(shape, f64).to(dtype), k = randn(shape, f64).to(dtype);
          const Tensor v = randn(shape, f64).to(dtype), dout = randn(shape, f64).to(dtype);
          const Grads ref =
              forward_backward(q.to(f64), k.to(f64), v.to(f64), dout.to(f64), p, AttentionImpl::Composed);
          bench::JsonLine line("attention_parity");
          line.add("device", g_device.str()).add("dtype", dtype_name(dtype)).add("T", (long long)t);
          line.add("D", (long long)d).add("dropout", p).add("causal", true).add("tolerance", tolerance(dtype));
          for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composed}) {
            const Grads got = forward_backward(q.to(g_device), k.to(g_device), v.to(g_device), dout.to(g_device), p,
                                               impl);
            const std::string name = attention_impl_name(impl);
            double worst = 0;
            for (auto [a, b] : {std::pair{&got.out, &ref.out}, std::pair{&got.dq, &ref.dq}, std::pair{&got.dk, &ref.dk},
                                std::pair{&got.dv, &ref.dv}}) {
              worst = std::max(worst, max_abs_diff(a->to(kCPU), *b) / std::max(1.0, max_abs(*b)));
            }
            line.add(name + "_rel_error", worst);
            if (impl == AttentionImpl::Fused) line.add("pass", worst <= tolerance(dtype));
          }
          line.print();
        }
      }
    }
  }
}

nn::GPTConfig gpt_config(int64_t L, int64_t H, int64_t C, int64_t T, AttentionImpl impl) {
  return nn::GPTConfig().vocab_size(256).context(T).n_layer(L).n_head(H).n_embd(C).attention(impl);
}

void memory() {
  const int64_t L = 2, H = 4, C = 256, T = 1024, B = 2;
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composed}) {
    manual_seed(1);
    nn::GPT model(gpt_config(L, H, C, T, impl));
    model.to(g_device);
    const Tensor ids = randint(0, 256, {B, T}, i64, g_device), targets = randint(0, 256, {B, T}, i64, g_device);
    for (const Tensor& p : model.parameters()) p.set_grad(zeros_like(p));
    sync_device();
    const int64_t before = memory_stats(g_device).allocated_bytes;
    reset_peak_memory(g_device);
    const Tensor loss = model.loss(ids, targets);
    sync_device();
    const int64_t kept = memory_stats(g_device).allocated_bytes - before;
    loss.backward();
    sync_device();
    const int64_t peak = memory_stats(g_device).peak_allocated_bytes - before;
    bench::JsonLine("attention_memory")
        .add("device", g_device.str())
        .add("model", "gpt_L2_H4_C256_T1024_B2_f32")
        .add("attention", attention_impl_name(impl))
        .add("forward_kept_bytes", (long long)kept)
        .add("step_peak_bytes", (long long)peak)
        .add("predicted_tt_share_bytes", (long long)(L * B * H * T * T * 4))
        .print();
  }
}

// The head of a GPT with a large vocabulary: N = B T = 8192 rows, C = 256, V = 8192, f32; the peak of
// forward + backward above what was allocated before, composed (the N x V logits, their softmax inside
// the loss and their gradient) vs the fused classifier (one chunk).
void classifier_memory() {
  const int64_t N = 8192, C = 256, V = 8192;
  manual_seed(4);
  const Tensor x = randn({N, C}, f32, g_device).requires_grad_(), w = randn({V, C}, f32, g_device).requires_grad_();
  const Tensor targets = randint(0, V, {N}, i64, g_device);
  for (bool fused : {true, false}) {
    x.set_grad(zeros_like(x));
    w.set_grad(zeros_like(w));
    sync_device();
    const int64_t before = memory_stats(g_device).allocated_bytes;
    reset_peak_memory(g_device);
    const Tensor loss = fused ? linear_cross_entropy(x, w, targets) : cross_entropy(matmul(x, w.t()), targets);
    loss.backward();
    sync_device();
    const int64_t chunk = linear_cross_entropy_chunk_rows(N, C, V, f32);
    bench::JsonLine("classifier_memory")
        .add("device", g_device.str())
        .add("N", (long long)N).add("C", (long long)C).add("V", (long long)V).add("dtype", "f32")
        .add("classifier", fused ? "fused" : "composed")
        .add("step_peak_bytes", (long long)(memory_stats(g_device).peak_allocated_bytes - before))
        .add("logits_bytes", (long long)(N * V * 4))
        .add("chunk_rows", (long long)chunk)
        .add("chunk_logits_bytes", (long long)(chunk * V * 4))
        .print();
  }
}

void speed_op(int64_t B, int64_t H, int64_t T, int64_t D, DType dtype) {
  manual_seed(2);
  const Shape shape{B, H, T, D};
  const Tensor q = randn(shape, dtype, g_device), k = randn(shape, dtype, g_device), v = randn(shape, dtype, g_device);
  const Tensor dout = randn(shape, dtype, g_device);
  bench::JsonLine line("attention_speed");
  line.add("device", g_device.str()).add("dtype", dtype_name(dtype)).add("B", (long long)B).add("H", (long long)H);
  line.add("T", (long long)T).add("D", (long long)D).add("causal", true).add("threads", omp_get_max_threads());
  const int reps = g_quick ? 2 : 5;
  double times[2];
  for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composed}) {
    const double fwd = time_ms(reps, [&] {
      NoGradGuard no_grad;
      scaled_dot_product_attention(q, k, v, true, 0.0, impl);
    });
    const double both = time_ms(reps, [&] { forward_backward(q, k, v, dout, 0.0, impl); });
    const std::string name = attention_impl_name(impl);
    line.add(name + "_forward_ms", fwd).add(name + "_forward_backward_ms", both);
    times[impl == AttentionImpl::Fused ? 0 : 1] = both;
  }
  line.add("speedup_forward_backward", times[1] / times[0]).print();
}

// A GPT training step (forward, backward, AdamW) three ways in one run: fused attention and classifier
// (today's default), composed attention with the fused classifier, and both composed (before issue 17).
void speed_step(int64_t L, int64_t H, int64_t C, int64_t T, int64_t B) {
  bench::JsonLine line("attention_gpt_step");
  line.add("device", g_device.str()).add("model", "gpt_L" + std::to_string(L) + "_H" + std::to_string(H) + "_C" +
                                                      std::to_string(C) + "_T" + std::to_string(T) + "_B" +
                                                      std::to_string(B));
  line.add("threads", omp_get_max_threads());
  struct Variant {
    const char* name;
    AttentionImpl attention;
    bool fused_classifier;
  };
  double times[3];
  int v = 0;
  for (const Variant& variant : {Variant{"fused", AttentionImpl::Fused, true},
                                 Variant{"composed_attention", AttentionImpl::Composed, true},
                                 Variant{"all_composed", AttentionImpl::Composed, false}}) {
    manual_seed(1);
    nn::GPT model(gpt_config(L, H, C, T, variant.attention).fused_classifier(variant.fused_classifier));
    model.to(g_device);
    optim::AdamW optimizer(model.parameters(), optim::AdamWOptions().lr(3e-4).weight_decay(0.1));
    const Tensor ids = randint(0, 256, {B, T}, i64, g_device), targets = randint(0, 256, {B, T}, i64, g_device);
    const double ms = time_ms(g_quick ? 2 : 5, [&] {
      model.loss(ids, targets).backward();
      optimizer.step();
      optimizer.zero_grad();
    });
    line.add(std::string(variant.name) + "_step_ms", ms);
    times[v++] = ms;
  }
  line.add("speedup_attention", times[1] / times[0]).add("speedup_vs_all_composed", times[2] / times[0]).print();
}

void speed() {
  speed_op(8, 4, 256, 64, f32);
  speed_op(2, 4, 1024, 64, f32);
  speed_step(4, 4, 256, 256, 8);
  if (!g_quick) speed_step(4, 4, 256, 1024, 2);
}

void gpu() {
  if (!g_device.is_cuda()) return;
  for (int64_t T : {1024, 4096}) {
    for (int64_t D : {64, 128}) {
      const int64_t B = 16384 / T, H = 2048 / D;  // 16k tokens, hidden 2048 (FlashAttention-2's setup)
      manual_seed(3);
      const Shape shape{B, H, T, D};
      const Tensor q = randn(shape, bf16, g_device), k = randn(shape, bf16, g_device);
      const Tensor v = randn(shape, bf16, g_device), dout = randn(shape, bf16, g_device);
      const double forward_flops = 4.0 * B * H * T * T * D * 0.5;  // causal: half the score matrix
      bench::JsonLine line("attention_gpu");
      line.add("device", g_device.str()).add("dtype", "bf16").add("B", (long long)B).add("H", (long long)H);
      line.add("T", (long long)T).add("D", (long long)D).add("causal", true);
      for (AttentionImpl impl : {AttentionImpl::Fused, AttentionImpl::Composed}) {
        const std::string name = attention_impl_name(impl);
        try {
          const double fwd = time_ms(10, [&] {
            NoGradGuard no_grad;
            scaled_dot_product_attention(q, k, v, true, 0.0, impl);
          });
          const double both = time_ms(10, [&] { forward_backward(q, k, v, dout, 0.0, impl); });
          line.add(name + "_forward_ms", fwd).add(name + "_forward_tflops", forward_flops / (fwd / 1e3) / 1e12);
          line.add(name + "_backward_ms", both - fwd);
          // Effective: FlashAttention-2's count (5 tile products); the deterministic backward does 7.
          line.add(name + "_backward_effective_tflops", 2.5 * forward_flops / ((both - fwd) / 1e3) / 1e12);
        } catch (const Error& e) {
          line.add(name + "_error", e.what());
        }
      }
      line.add("cudnn_sdpa", "not measured: halfgrad calls cuDNN's legacy convolution API only, not its graph API");
      line.print();
    }
  }
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_attention [--device cpu|cuda] [--quick] [parity] [memory] [speed] [gpu]\n"
    "Fused (FlashAttention-2) vs composed attention. Prints JSON lines to stdout.\n"
    "  --device cpu|cuda  where it runs (default cpu)\n"
    "  --quick            smaller sizes, fewer repeats (smoke runs)\n"
    "  parity             fused and composed against float64, forward and backward, every dtype\n"
    "  memory             saved-for-backward bytes and step peak at T 1024, and a classifier head\n"
    "  speed              attention forward + backward and whole GPT steps, fused vs composed\n"
    "  gpu                (CUDA) TFLOP/s at T 1024 and 4096, D 64 and 128\n"
    "  (no section named: all four)\n"
    "  -h, --help         this text\n";

int main(int argc, char** argv) {
  std::set<std::string> sections;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (arg == "--quick") {
      g_quick = true;
    } else if (arg == "--device" && i + 1 < argc) {
      g_device = Device::parse(argv[++i]);
    } else if (arg == "parity" || arg == "memory" || arg == "speed" || arg == "gpu") {
      sections.insert(arg);
    } else {
      hg::bench::exit_unknown_argument("bench_attention", argv[i], kUsage);
    }
  }
  if (sections.empty()) sections = {"parity", "memory", "speed", "gpu"};
  try {
    if (sections.count("parity")) parity();
    if (sections.count("memory")) {
      memory();
      classifier_memory();
    }
    if (sections.count("speed")) speed();
    if (sections.count("gpu")) gpu();
  } catch (const Error& e) {
    bench::JsonLine("attention").add("device", g_device.str()).add("error", e.what()).print();
    return 1;
  }
  return 0;
}
