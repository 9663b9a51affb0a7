#pragma once
// CPU attention, fused vs composed, forward + backward: a timing bench_attention can call (header
// only). The composed side is the engine op scaled_dot_product_attention plus its autograd backward
// (batched GEMMs, the causal softmax, batched GEMM, and their backwards), as a training step runs it;
// the fused side is kernels::cpu::attention_forward + attention_backward on the same contiguous
// [B, H, T, D] operands, with its outputs allocated once (the engine op would allocate O, lse and
// delta per call, a few microseconds). Reports the median of `repeats` timed runs after one warm-up.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/ops.h"
#include "engine/tensor.h"
#include "kernels/kernels.h"

namespace hg::bench {

struct AttentionCpuTiming {
  double fused_ms = 0, composed_ms = 0;  // forward + backward, median
};

inline double median_ms(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

template <class F>
double time_median_ms(int repeats, F&& run) {
  run();  // warm-up: first-touch of buffers, thread pool start
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return median_ms(samples);
}

inline AttentionCpuTiming time_attention_cpu(int64_t batch, int64_t heads, int64_t t, int64_t d, DType dtype,
                                             bool causal, int repeats) {
  Tensor q = randn({batch, heads, t, d}, dtype), k = randn({batch, heads, t, d}, dtype),
         v = randn({batch, heads, t, d}, dtype);
  const Tensor dout = randn({batch, heads, t, d}, dtype);
  AttentionCpuTiming timing;

  Tensor o = empty({batch, heads, t, d}, dtype), dq = empty_like(o), dk = empty_like(o), dv = empty_like(o);
  const DType acc = accumulate_dtype(dtype);
  Tensor lse = empty({batch, heads, t}, acc), delta = empty({batch, heads, t}, acc);
  kernels::AttentionProblem p;
  p.batch = batch, p.heads = heads, p.tq = t, p.tk = t, p.d = d, p.causal = causal;
  p.scale = 1.0 / std::sqrt(double(d));
  const auto view = [&](const Tensor& x) { return kernels::AttentionTensor{x.data_ptr(), heads * t * d, t * d, d}; };
  timing.fused_ms = time_median_ms(repeats, [&] {
    kernels::cpu::attention_forward(p, view(q), view(k), view(v), view(o), lse.data_ptr(), dtype);
    kernels::cpu::attention_backward(p, view(q), view(k), view(v), view(o), view(dout), lse.data_ptr(),
                                     delta.data_ptr(), view(dq), view(dk), view(dv), dtype);
  });

  q.requires_grad_(), k.requires_grad_(), v.requires_grad_();
  timing.composed_ms = time_median_ms(repeats, [&] { scaled_dot_product_attention(q, k, v, causal).backward(dout); });
  return timing;
}

}  // namespace hg::bench
