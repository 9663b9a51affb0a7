#pragma once
// Shared by tests/test_plan.cpp (CPU device), tests/test_cuda_plan.cpp (CUDA device) and
// bench/bench_plan.cpp: the grid of training configurations on which the memory planner's prediction
// (plan::predict_memory) is checked against the allocator's measured peak (plan::measure_memory).
// A small GPT whose activations and model state are both significant: L4 H4 C64 T32 V256
// (~0.22M parameters, 3.4 MB of fp32 model state; one block keeps ~17 B T C activation elements).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "plan/measure_memory.h"
#include "plan/plan.h"

namespace hg::test {

struct PlanCase {
  plan::ModelShape model;
  plan::TrainingConfig config;
};

// heads 4 (head dimension 16) on the CPU; 1 on CUDA, whose fused attention kernels take head
// dimensions 64 and 128 only (others fall back to the composed path).
inline plan::ModelShape plan_grid_model(int64_t heads = 4, int64_t layers = 4) {
  plan::ModelShape m;
  m.vocab = 256, m.context = 32, m.layers = layers, m.heads = heads, m.dim = 64;
  return m;
}

// "bf16 B4 ckpt1 zero2 off-opt composed drop0.1 ..." : what differs from the defaults.
inline std::string plan_case_label(const PlanCase& c) {
  const plan::TrainingConfig& t = c.config;
  std::string s = std::string(plan::name(t.precision)) + " B" + std::to_string(t.micro_batch);
  if (t.precision != plan::Precision::fp32 && !t.master_weights) s += " no-master";
  if (t.fp32_grads) s += " fp32-grads";
  if (t.grad_accum > 1) s += " accum" + std::to_string(t.grad_accum);
  if (t.recompute_every > 0) s += " ckpt" + std::to_string(t.recompute_every);
  if (t.offload_activations != OffloadMode::off)
    s += std::string(" act-off-") + offload_mode_name(t.offload_activations);
  if (t.zero_stage >= 0) s += " zero" + std::to_string(t.zero_stage);
  if (t.offload_optimizer) s += " opt-off";
  if (t.state_bits != 32) s += " state" + std::to_string(t.state_bits);
  if (!c.model.fused_attention) s += " composed-attn";
  if (!c.model.fused_classifier) s += " full-logits";
  if (c.model.dropout > 0) s += " dropout";
  if (c.model.dim != 64 || c.model.context != 32 || c.model.layers != 4 || c.model.heads != 4)
    s += " L" + std::to_string(c.model.layers) + "H" + std::to_string(c.model.heads) + "C" +
         std::to_string(c.model.dim) + "T" + std::to_string(c.model.context);
  return s;
}

// At least 20 configurations covering every technique the planner enumerates (8-bit state: with the
// local AdamW; its ZeRO form is measured once ZeroOptimizer has it).
// On `base` (the default model above, or bench/bench_plan.cpp's larger ones); `scale` divides the
// micro-batches (the emulated CUDA device runs the grid at scale 2 on L2: about a minute).
inline std::vector<PlanCase> plan_grid(const plan::ModelShape& base = plan_grid_model(), int64_t scale = 1) {
  using plan::Precision;
  std::vector<PlanCase> grid;
  auto add = [&](auto&& edit) {
    PlanCase c{base, plan::TrainingConfig()};
    c.config.micro_batch = 4;
    edit(c);
    c.config.micro_batch = std::max<int64_t>(1, c.config.micro_batch / scale);
    grid.push_back(c);
  };
  add([](PlanCase&) {});
  add([](PlanCase& c) { c.config.micro_batch = 8; });
  add([](PlanCase& c) { c.config.precision = Precision::bf16; });
  add([](PlanCase& c) { c.config.precision = Precision::bf16, c.config.master_weights = false; });
  add([](PlanCase& c) { c.config.precision = Precision::fp16; });
  add([](PlanCase& c) { c.config.precision = Precision::bf16, c.config.fp32_grads = true; });
  add([](PlanCase& c) { c.config.grad_accum = 2; });
  add([](PlanCase& c) { c.config.recompute_every = 1; });
  add([](PlanCase& c) { c.config.recompute_every = 2, c.config.micro_batch = 8; });
  add([](PlanCase& c) { c.config.precision = Precision::bf16, c.config.recompute_every = 1; });
  add([](PlanCase& c) {
    c.config.recompute_every = 1, c.config.offload_activations = OffloadMode::recompute_inputs;
  });
  add([](PlanCase& c) { c.config.offload_activations = OffloadMode::all; });
  add([](PlanCase& c) { c.config.precision = Precision::bf16, c.config.offload_activations = OffloadMode::all; });
  // Stages 0, 1 and 2 predict the same bytes at world 1: one row of the three, and ZeRO with
  // accumulation instead, whose gradients persist across micro-batches (stage 2's reduced buckets,
  // stage 3's shards); test_dist_plan measures all stages at world > 1.
  add([](PlanCase& c) { c.config.zero_stage = 1; });
  add([](PlanCase& c) { c.config.zero_stage = 2, c.config.grad_accum = 2; });
  add([](PlanCase& c) { c.config.zero_stage = 3; });
  add([](PlanCase& c) { c.config.zero_stage = 3, c.config.grad_accum = 2; });
  add([](PlanCase& c) { c.config.precision = Precision::bf16, c.config.zero_stage = 2; });
  add([](PlanCase& c) { c.config.precision = Precision::fp16, c.config.zero_stage = 3; });
  add([](PlanCase& c) { c.config.zero_stage = 2, c.config.offload_optimizer = true; });
  add([](PlanCase& c) {
    c.config.precision = Precision::bf16, c.config.zero_stage = 1, c.config.offload_optimizer = true;
  });
  add([](PlanCase& c) { c.model.fused_attention = false; });
  add([](PlanCase& c) {
    c.model.fused_attention = false, c.config.precision = Precision::bf16, c.config.micro_batch = 8;
  });
  // A long context: the composed attention's B H T T backward outgrows the MLP's.
  add([](PlanCase& c) { c.model.fused_attention = false, c.model.context = 128, c.config.micro_batch = 2; });
  add([](PlanCase& c) { c.model.dropout = 0.1; });
  add([](PlanCase& c) { c.model.dropout = 0.1, c.model.fused_attention = false; });
  add([](PlanCase& c) { c.model.fused_classifier = false; });
  add([](PlanCase& c) { c.config.zero_stage = 3, c.config.recompute_every = 2, c.config.micro_batch = 8; });
  add([](PlanCase& c) { c.config.state_bits = 8; });
  add([](PlanCase& c) { c.config.state_bits = 8, c.config.precision = Precision::bf16; });
  add([](PlanCase& c) {
    c.config.state_bits = 8, c.config.precision = Precision::bf16, c.config.master_weights = false;
  });
  return grid;
}

struct PlanRow {
  std::string label;
  int64_t predicted = 0, measured = 0, predicted_host = 0, measured_host = 0;
  double error() const { return double(predicted - measured) / double(measured); }
  double host_error() const {
    return measured_host > 0 ? double(predicted_host - measured_host) / double(measured_host) : 0.0;
  }
};

inline PlanRow run_plan_case(const PlanCase& c, const Device& device) {
  const plan::DeviceKind kind = device.is_cpu() ? plan::DeviceKind::cpu : plan::DeviceKind::cuda;
  const plan::MemoryPrediction p = plan::predict_memory(c.model, c.config, 1, kind);
  const plan::MeasuredMemory m = plan::measure_memory(c.model, c.config, device);
  return PlanRow{plan_case_label(c), p.device_peak(), m.device_peak, p.host, m.host_peak};
}

inline std::string plan_table(const std::vector<PlanRow>& rows) {
  std::string out = "config                                      predicted    measured    error   host pred / meas\n";
  char line[256];
  for (const PlanRow& r : rows) {
    std::snprintf(line, sizeof line, "%-42s %10lld  %10lld  %+6.1f%%   %lld / %lld\n", r.label.c_str(),
                  (long long)r.predicted, (long long)r.measured, 100.0 * r.error(), (long long)r.predicted_host,
                  (long long)r.measured_host);
    out += line;
  }
  return out;
}

}  // namespace hg::test
