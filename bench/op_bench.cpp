// Engine-level ops of bench_ops (--ops-only): the losses and conv_transpose2d through the public ops
// (engine/ops.h), the way a model calls them, on the shapes bench/peers/pytorch_ops.py --ops-only times
// in PyTorch. Two passes each:
//   forward:          the op under NoGradGuard (no graph is recorded);
//   forward_backward: the op on a leaf input that requires a gradient, then backward() of the scalar,
//                     the leaf's gradient dropped before the next call (PyTorch: x.grad = None).
// Losses (reduction mean unless said), over x, t [rows, cols] (rows 4096, cols 4096 = 64 MiB per f32
// tensor; --quick: rows 256), values uniform in [-2, 2) unless said:
//   mse_loss, l1_loss, smooth_l1_loss (beta 1), huber_loss (delta 1), binary_cross_entropy (x = sigmoid of
//   such values, t in [0, 1)), binary_cross_entropy_with_logits (t in [0, 1)), kl_div (x log-probabilities
//   of each row, t probabilities, batchmean), cosine_similarity along dim 1 (then mean),
//   cross_entropy over logits [rows * 4, cols / 4] with class targets, plain (the fused kernel) and with
//   label smoothing 0.1 (composed), and nll_loss over log-probabilities of the same shape.
//   bytes: the minimum traffic, forward 2 n (x and t read; class targets: n + 8 rows) and forward_backward
//   5 n (the forward's reads, then x and t read again and dx written) times the element size (nll_loss:
//   one value and one target per row forward, the [M, C] gradient written backward); gbs divides it by
//   the time, so a composed op that makes temporaries shows as a lower figure.
// conv_transpose2d (gflops: 2 N C OC H W KH KW per pass; forward_backward counts three passes: the
// forward, the input's gradient and the weight's; weight and bias take gradients, as in training):
//   dcgan: x [64, 128, 16, 16], weight [128, 64, 4, 4], stride 2, padding 1 -> [64, 64, 32, 32]
//   unet:  x [16, 128, 32, 32], weight [128, 64, 2, 2], stride 2            -> [16, 64, 64, 64]
//   (--quick: batch / 8). Bias on, as nn.ConvTranspose2d's default.
// Fields: bench, impl "halfgrad", dtype (f32, bf16), pass, shape, threads, best_ms, gbs (with
// fraction_of_memcpy: of the memcpy baseline's GB/s, whose lines come first, measured in the same
// process over an f32 [rows, cols] tensor) or gflops.
#include <omp.h>

#include <functional>
#include <string>
#include <vector>

#include "bench_sections.h"
#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "json_line.h"
#include "timing.h"

namespace hg::bench {
namespace {

struct OpCase {
  std::string name, shape;
  Tensor input;                                  // the leaf whose gradient forward_backward computes
  std::function<Tensor(const Tensor&)> forward;  // of the input, a scalar
  double forward_bytes = 0, forward_backward_bytes = 0, flops = 0;  // flops: of the forward
  std::vector<Tensor> parameters;  // leaves that also take a gradient (a convolution's weight and bias)
};

Tensor uniform(const Shape& shape, double low, double high, DType dtype) {
  return cast(rand(shape, f32) * (high - low) + low, dtype);
}

std::vector<OpCase> loss_cases(int64_t rows, int64_t cols, DType dtype) {
  const double n = double(rows * cols), size = double(dtype_size(dtype));
  const Tensor x = uniform({rows, cols}, -2, 2, dtype), t = uniform({rows, cols}, -2, 2, dtype);
  const Tensor unit = uniform({rows, cols}, 0, 1, dtype), probs = cast(sigmoid(x), dtype);
  const Tensor row_log_probs = log_softmax(x, 1), row_probs = softmax(t, 1);
  const int64_t class_rows = rows * 4, classes = cols / 4;
  const Tensor logits = uniform({class_rows, classes}, -2, 2, dtype), log_probs = log_softmax(logits, 1);
  const Tensor targets = randint(0, classes, {class_rows}, i64);
  const std::string pair = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
  const std::string classified = "[" + std::to_string(class_rows) + ", " + std::to_string(classes) + "]";
  const auto elementwise = [&](const char* name, const Tensor& input, std::function<Tensor(const Tensor&)> fn) {
    return OpCase{name, pair, input, std::move(fn), 2 * n * size, 5 * n * size, 0, {}};
  };
  const auto classification = [&](const char* name, const Tensor& input, std::function<Tensor(const Tensor&)> fn) {
    const double index_bytes = double(class_rows) * 8;
    return OpCase{name, classified, input, std::move(fn), n * size + index_bytes, 3 * n * size + 2 * index_bytes, 0,
                  {}};
  };
  return {
      elementwise("mse_loss", x, [t](const Tensor& v) { return mse_loss(v, t); }),
      elementwise("l1_loss", x, [t](const Tensor& v) { return l1_loss(v, t); }),
      elementwise("smooth_l1_loss", x, [t](const Tensor& v) { return smooth_l1_loss(v, t, Reduction::Mean, 1.0); }),
      elementwise("huber_loss", x, [t](const Tensor& v) { return huber_loss(v, t, Reduction::Mean, 1.0); }),
      elementwise("binary_cross_entropy", probs,
                  [unit](const Tensor& v) { return binary_cross_entropy(v, unit); }),
      elementwise("binary_cross_entropy_with_logits", x,
                  [unit](const Tensor& v) { return binary_cross_entropy_with_logits(v, unit); }),
      elementwise("kl_div", row_log_probs,
                  [row_probs](const Tensor& v) { return kl_div(v, row_probs, Reduction::BatchMean); }),
      elementwise("cosine_similarity", x, [t](const Tensor& v) { return mean(cosine_similarity(v, t, 1)); }),
      classification("cross_entropy", logits, [targets](const Tensor& v) { return cross_entropy(v, targets); }),
      classification("cross_entropy_label_smoothing", logits,
                     [targets](const Tensor& v) {
                       return cross_entropy(v, targets, CrossEntropyOptions().set_label_smoothing(0.1));
                     }),
      // nll reads one log-probability and one target per row; its backward writes the whole [M, C] gradient.
      OpCase{"nll_loss", classified, log_probs, [targets](const Tensor& v) { return nll_loss(v, targets); },
             double(class_rows) * (size + 8), 2 * double(class_rows) * (size + 8) + n * size, 0, {}},
  };
}

std::vector<OpCase> conv_transpose_cases(bool quick, DType dtype) {
  struct Geometry {
    const char* name;
    int64_t batch, in_channels, out_channels, side, kernel, stride, padding;
  };
  std::vector<OpCase> cases;
  for (const Geometry g : {Geometry{"conv_transpose2d_dcgan", 64, 128, 64, 16, 4, 2, 1},
                           Geometry{"conv_transpose2d_unet", 16, 128, 64, 32, 2, 2, 0}}) {
    const int64_t batch = quick ? g.batch / 8 : g.batch;
    const Tensor x = uniform({batch, g.in_channels, g.side, g.side}, -1, 1, dtype);
    const Tensor w = uniform({g.in_channels, g.out_channels, g.kernel, g.kernel}, -0.1, 0.1, dtype).requires_grad_();
    const Tensor b = uniform({g.out_channels}, -0.1, 0.1, dtype).requires_grad_();
    const Size2d stride{g.stride, g.stride}, padding{g.padding, g.padding};
    OpCase c;
    c.name = g.name;
    c.shape = "x [" + std::to_string(batch) + ", " + std::to_string(g.in_channels) + ", " + std::to_string(g.side) +
              ", " + std::to_string(g.side) + "] k" + std::to_string(g.kernel) + " s" + std::to_string(g.stride) +
              " p" + std::to_string(g.padding) + " -> " + std::to_string(g.out_channels) + " channels";
    c.input = x;
    c.forward = [w, b, stride, padding](const Tensor& v) {
      return sum(conv_transpose2d(v, w, b, stride, padding));
    };
    c.flops = 2.0 * double(batch * g.in_channels * g.out_channels * g.side * g.side * g.kernel * g.kernel);
    c.parameters = {w, b};
    cases.push_back(c);
  }
  return cases;
}

void report(const OpCase& c, DType dtype, const char* pass, double seconds, double bytes, double flops,
            double memcpy_gbs) {
  JsonLine line(c.name);
  line.add("impl", "halfgrad").add("dtype", dtype_name(dtype)).add("pass", pass).add("shape", c.shape);
  line.add("threads", (long long)omp_get_max_threads()).add("best_ms", seconds * 1e3);
  if (bytes > 0) {
    line.add("bytes", bytes).add("gbs", bytes / seconds / 1e9);
    line.add("fraction_of_memcpy", bytes / seconds / 1e9 / memcpy_gbs);
  }
  if (flops > 0) line.add("gflops", flops / seconds / 1e9);
  line.print();
}

void run_case(const OpCase& c, DType dtype, int repeats, double memcpy_gbs) {
  const double forward_s = best_seconds(repeats, [&] {
    NoGradGuard no_grad;
    (void)c.forward(c.input).item();
  });
  report(c, dtype, "forward", forward_s, c.forward_bytes, c.flops, memcpy_gbs);
  const Tensor leaf = c.input.detach().requires_grad_();
  const double step_s = best_seconds(repeats, [&] {
    c.forward(leaf).backward();
    leaf.set_grad(Tensor());
    for (const Tensor& p : c.parameters) p.set_grad(Tensor());
  });
  report(c, dtype, "forward_backward", step_s, c.forward_backward_bytes, 3 * c.flops, memcpy_gbs);
}

}  // namespace

void run_op_bench(bool quick) {
  const int64_t rows = quick ? 256 : 4096, cols = 4096;
  const int repeats = quick ? 3 : 5;
  const double memcpy_gbs = run_memcpy_baseline(rows, cols, repeats);
  manual_seed(1);
  for (const DType dtype : {f32, bf16}) {
    for (const OpCase& c : loss_cases(rows, cols, dtype)) run_case(c, dtype, repeats, memcpy_gbs);
    for (const OpCase& c : conv_transpose_cases(quick, dtype)) run_case(c, dtype, repeats, memcpy_gbs);
  }
}

}  // namespace hg::bench
