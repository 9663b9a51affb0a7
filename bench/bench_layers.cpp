// bench_layers: the classic small models' layers, forward + backward, one JSON object per line, on the
// shapes of bench/peers/pytorch_layers.py (run both in one session on one machine to compare):
//   lstm_L2_H512_B32_T64   LSTM(512, 512, num_layers=2), input [T 64, B 32, 512], h0 = c0 = zeros
//   gru_L2_H512_B32_T64    GRU at the same sizes
//   resnet_block_B64_C32_28x28   x + bn2(conv2(relu(bn1(conv1(x))))) then relu, 3x3 convolutions with
//                          padding 1 and no bias, BatchNorm2d in training mode, x [64, 32, 28, 28]
//   encoder_layer_d256_h4_T128_B16   TransformerEncoderLayer(256, 4, dim_feedforward 1024, dropout 0,
//                          batch_first), x [16, 128, 256], no mask
// Each step: the forward, the sum of the output times a fixed random gradient, backward, gradients
// dropped. Fields: bench, model, dtype, threads, best_ms, median_ms (of `repeats` steps after warm-up).
// Usage: bench_layers [--quick] [--only NAME]
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "bench_args.h"
#include "engine/random.h"
#include "json_line.h"
#include "layers/nn.h"
#include "timing.h"

using namespace hg;
using namespace hg::nn;

namespace {

constexpr const char* kUsage =
    "usage: bench_layers [--quick] [--only NAME]\n"
    "Forward + backward of an LSTM and a GRU (2 x 512, B 32, T 64), a ResNet block with BatchNorm (B 64, C 32,\n"
    "28 x 28) and a TransformerEncoderLayer (d 256, 4 heads, T 128, B 16) on the CPU; one JSON line each.\n"
    "The same workloads in PyTorch: bench/peers/pytorch_layers.py.\n"
    "  --quick      3 timed steps instead of 10 (smoke runs)\n"
    "  --only NAME  only the workload whose name starts with NAME (lstm, gru, resnet, encoder)\n"
    "  -h, --help   this text\n";

class ResNetBlock : public UnaryModule {
 public:
  explicit ResNetBlock(int64_t channels) {
    const auto conv = [&](const char* name) {
      return register_module(name,
                             std::make_shared<Conv2d>(Conv2dOptions(channels, channels, 3).padding(1).bias(false)));
    };
    conv1 = conv("conv1");
    bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(channels));
    conv2 = conv("conv2");
    bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(channels));
  }
  Tensor forward(const Tensor& x) override {
    return relu(x + bn2->forward(conv2->forward(relu(bn1->forward(conv1->forward(x))))));
  }
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
};

// A model and its forward on a fixed input.
struct Built {
  std::shared_ptr<Module> model;
  std::function<Tensor()> forward;
};
struct Workload {
  std::string name;
  std::function<Built()> build;
};

std::vector<Workload> workloads() {
  return {
      {"lstm_L2_H512_B32_T64",
       [] {
         auto m = std::make_shared<LSTM>(LSTMOptions(512, 512).num_layers(2));
         const Tensor x = randn({64, 32, 512}).requires_grad_();
         return Built{m, [m, x] { return m->forward(x).output; }};
       }},
      {"gru_L2_H512_B32_T64",
       [] {
         auto m = std::make_shared<GRU>(GRUOptions(512, 512).num_layers(2));
         const Tensor x = randn({64, 32, 512}).requires_grad_();
         return Built{m, [m, x] { return m->forward(x).output; }};
       }},
      {"resnet_block_B64_C32_28x28",
       [] {
         auto m = std::make_shared<ResNetBlock>(32);
         const Tensor x = randn({64, 32, 28, 28}).requires_grad_();
         return Built{m, [m, x] { return m->forward(x); }};
       }},
      {"encoder_layer_d256_h4_T128_B16",
       [] {
         auto m = std::make_shared<TransformerEncoderLayer>(
             TransformerLayerOptions(256, 4).dim_feedforward(1024).dropout(0.0).batch_first(true));
         const Tensor x = randn({16, 128, 256}).requires_grad_();
         return Built{m, [m, x] { return m->forward(x); }};
       }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (bench::is_help(argv[i])) bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      bench::exit_unknown_argument("bench_layers", argv[i], kUsage);
    }
  }
  manual_seed(1);
  for (const Workload& w : workloads()) {
    if (w.name.rfind(only, 0) != 0) continue;
    const Built built = w.build();
    const Tensor gy = randn(built.forward().shape());
    const auto step = [&] {
      sum(built.forward() * gy).backward();
      built.model->zero_grad();
    };
    const int repeats = quick ? 3 : 10;
    const std::vector<double> times = bench::timed_calls(repeats, step);
    const double best = *std::min_element(times.begin(), times.end());
    bench::JsonLine("layers")
        .add("model", w.name)
        .add("impl", "halfgrad")
        .add("dtype", "f32")
        .add("threads", (long long)omp_get_max_threads())
        .add("best_ms", best * 1e3)
        .add("median_ms", bench::median(times) * 1e3)
        .print();
  }
  return 0;
}
