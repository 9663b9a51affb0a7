// bench_conv: conv2d forward + backward (data and filter) on the CPU, im2col + GEMM
// (kernels/cpu/conv2d.cpp) against a naive direct convolution (seven nested loops, fp32, OpenMP over
// images and output channels) measured in the same process on the same data. One JSON line per
// shape: GFLOP/s of each pass and of forward + backward, and the speedup over the direct loops.
// FLOPs: forward 2 N OC OH OW (C / groups) KH KW; backward data and backward filter the same each.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "bench_args.h"
#include "json_line.h"
#include "timing.h"
#include "kernels/kernels.h"

using namespace hg;
using hg::kernels::Conv2dGeometry;
using hg::kernels::ConvPass;

namespace {

using hg::bench::Clock;
using hg::bench::median_seconds;

// ---- the baseline: direct loops (groups = 1, dilation 1) ----

// Calls tap(c, p, q, h, v) for each filter tap (p, q) of every input channel c that output position (i, j)
// reads, with (h, v) the input row and column it reads; taps that fall on the padding are skipped.
template <class Tap>
inline void for_each_tap(const Conv2dGeometry& g, int64_t i, int64_t j, Tap&& tap) {
  for (int64_t c = 0; c < g.in_channels; ++c)
    for (int64_t p = 0; p < g.kernel_h; ++p) {
      const int64_t h = i * g.stride_h - g.pad_h + p;
      if (h < 0 || h >= g.height) continue;
      for (int64_t q = 0; q < g.kernel_w; ++q) {
        const int64_t v = j * g.stride_w - g.pad_w + q;
        if (v < 0 || v >= g.width) continue;
        tap(c, p, q, h, v);
      }
    }
}

void direct_forward(const Conv2dGeometry& g, const float* x, const float* w, float* y) {
  const int64_t oh = g.out_h(), ow = g.out_w();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          float sum = 0;
          for_each_tap(g, i, j, [&](int64_t c, int64_t p, int64_t q, int64_t h, int64_t v) {
            sum += w[((o * g.in_channels + c) * g.kernel_h + p) * g.kernel_w + q] *
                   x[((n * g.in_channels + c) * g.height + h) * g.width + v];
          });
          y[((n * g.out_channels + o) * oh + i) * ow + j] = sum;
        }
}

void direct_backward(const Conv2dGeometry& g, const float* x, const float* w, const float* dy, float* dx, float* dw) {
  const int64_t oh = g.out_h(), ow = g.out_w();
  std::fill(dx, dx + g.batch * g.in_channels * g.height * g.width, 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.batch; ++n)  // dx: each image's slice is one thread's
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const float d = dy[((n * g.out_channels + o) * oh + i) * ow + j];
          for_each_tap(g, i, j, [&](int64_t c, int64_t p, int64_t q, int64_t h, int64_t v) {
            dx[((n * g.in_channels + c) * g.height + h) * g.width + v] +=
                d * w[((o * g.in_channels + c) * g.kernel_h + p) * g.kernel_w + q];
          });
        }
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < g.out_channels; ++o)  // dw: each output channel's filters are one thread's
    for (int64_t c = 0; c < g.in_channels; ++c)
      for (int64_t p = 0; p < g.kernel_h; ++p)
        for (int64_t q = 0; q < g.kernel_w; ++q) {
          float sum = 0;
          for (int64_t n = 0; n < g.batch; ++n)
            for (int64_t i = 0; i < oh; ++i) {
              const int64_t h = i * g.stride_h - g.pad_h + p;
              if (h < 0 || h >= g.height) continue;
              for (int64_t j = 0; j < ow; ++j) {
                const int64_t v = j * g.stride_w - g.pad_w + q;
                if (v < 0 || v >= g.width) continue;
                sum += dy[((n * g.out_channels + o) * oh + i) * ow + j] *
                       x[((n * g.in_channels + c) * g.height + h) * g.width + v];
              }
            }
          dw[((o * g.in_channels + c) * g.kernel_h + p) * g.kernel_w + q] = sum;
        }
}

Conv2dGeometry shape(int64_t n, int64_t c, int64_t hw, int64_t oc, int64_t k, int64_t stride, int64_t pad) {
  Conv2dGeometry g;
  g.batch = n, g.in_channels = c, g.height = hw, g.width = hw, g.out_channels = oc, g.kernel_h = k, g.kernel_w = k;
  g.stride_h = g.stride_w = stride, g.pad_h = g.pad_w = pad;
  return g;
}

void run_shape(const char* name, const Conv2dGeometry& g, int reps) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const int64_t nx = g.batch * g.in_channels * g.height * g.width, ny = g.batch * g.out_channels * g.out_pixels();
  const size_t sx = static_cast<size_t>(nx), sy = static_cast<size_t>(ny), sw = static_cast<size_t>(g.weight_numel());
  std::vector<float> x(sx), w(sw), dy(sy), y(sy), dx(sx), dw(sw);
  for (auto* v : {&x, &w, &dy})
    for (float& e : *v) e = normal(rng);
  auto workspace = [&](ConvPass pass) {
    return std::vector<unsigned char>(kernels::cpu::conv2d_workspace_bytes(g, pass, DType::f32));
  };
  auto ws_f = workspace(ConvPass::Forward), ws_d = workspace(ConvPass::BackwardData),
       ws_w = workspace(ConvPass::BackwardFilter);
  const double fwd = median_seconds(reps, [&] {
    kernels::cpu::conv2d_forward(g, x.data(), w.data(), nullptr, y.data(), ws_f.data(), ws_f.size(), DType::f32);
  });
  const double bwd = median_seconds(reps, [&] {
    kernels::cpu::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), ws_d.data(), ws_d.size(), DType::f32);
    kernels::cpu::conv2d_backward_filter(g, x.data(), dy.data(), dw.data(), ws_w.data(), ws_w.size(), DType::f32);
  });
  const double direct_fwd = median_seconds(reps, [&] { direct_forward(g, x.data(), w.data(), y.data()); });
  const double direct_bwd =
      median_seconds(reps, [&] { direct_backward(g, x.data(), w.data(), dy.data(), dx.data(), dw.data()); });
  const double flops = 2.0 * double(ny) * double(g.col_rows());
  bench::JsonLine("conv2d_cpu")
      .add("shape", name)
      .add("n", (long long)g.batch)
      .add("c", (long long)g.in_channels)
      .add("hw", (long long)g.height)
      .add("oc", (long long)g.out_channels)
      .add("k", (long long)g.kernel_h)
      .add("stride", (long long)g.stride_h)
      .add("threads", omp_get_max_threads())
      .add("gemm", kernels::cpu::gemm_f32_path())
      .add("forward_gflops", flops / fwd / 1e9)
      .add("backward_gflops", 2 * flops / bwd / 1e9)
      .add("fwd_bwd_gflops", 3 * flops / (fwd + bwd) / 1e9)
      .add("direct_fwd_bwd_gflops", 3 * flops / (direct_fwd + direct_bwd) / 1e9)
      .add("speedup_vs_direct", (direct_fwd + direct_bwd) / (fwd + bwd))
      .add("fwd_bwd_ms", 1e3 * (fwd + bwd))
      .print();
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_conv\n"
    "conv2d forward + backward on the CPU, im2col + GEMM against direct loops in the same process, on\n"
    "five shapes. Prints one JSON line per shape to stdout: GFLOP/s of each pass and the speedup.\n"
    "Takes no options.\n"
    "  -h, --help  this text\n";

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    hg::bench::exit_unknown_argument("bench_conv", argv[i], kUsage);
  }
  run_shape("train_cnn conv2 (16x16 digits)", shape(64, 16, 8, 32, 3, 1, 1), 9);
  run_shape("resnet-like 3x3", shape(16, 64, 28, 64, 3, 1, 1), 3);
  run_shape("strided 5x5", shape(32, 32, 32, 64, 5, 2, 2), 3);
  run_shape("zoo lenet conv2 (5x5, 16 -> 32 at 14x14)", shape(128, 16, 14, 32, 5, 1, 2), 3);
  run_shape("zoo diffusion down1 (3x3, 16 -> 16 at 28x28)", shape(128, 16, 28, 16, 3, 1, 1), 3);
  return 0;
}
