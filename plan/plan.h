#pragma once
// hg::plan -- which combination of memory techniques fits a GPT into a memory budget, and how fast
// each one trains. The planner enumerates
//   precision x master weights x micro-batch / accumulation x recompute_every x activation offload
//   x ZeRO stage x optimizer offload x optimizer state width (32 or 8 bits)
// for a model shape, a batch (tokens per optimizer step) and a world size; predicts for each
// configuration the per-rank device bytes (parameters, gradients, optimizer state, activations
// counted from the model's own op shapes, workspaces, allocator rounding) and the host bytes, and a
// step time (compute + recompute FLOPs, offload bytes over the host link, collective bytes over the
// interconnect, the CPU optimizer); keeps the configurations that fit and ranks them, fastest first.
//
//   plan::PlanRequest request;
//   request.model = plan::ModelShape::of(gpt_config);
//   request.batch_tokens = 1 << 19; request.world = 8;
//   request.device_budget_bytes = 141e9; request.machine = plan::Machine::h200();
//   std::vector<plan::Candidate> ranked = plan::plan(request);   // fits only, best first
//   std::puts(plan::format_table(request, ranked, 10).c_str());
//
// The memory prediction is validated against the allocators' measured peaks (tests/test_plan.cpp on
// the CPU device, tests/test_cuda_plan.cpp on the emulated CUDA device; bench/bench_plan.cpp reports
// the error distribution): within 10% for every configuration of the grid.
//
// Split by idea: plan/memory_model.cpp (predict_memory), plan/step_time.cpp (Machine,
// predict_step_time, calibration), plan/search.cpp (enumeration and ranking, flags, table).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/activation_offload.h"

namespace hg::nn {
struct GPTConfig;
}

namespace hg::plan {

// The model the plan is for: a GPT (layers/gpt.h) by its shape.
struct ModelShape {
  int64_t vocab = 256, context = 64, layers = 4, heads = 4, dim = 128;
  bool fused_attention = true;   // FlashAttention kernels (B H T fp32 lse kept) or composed (B H T T probabilities)
  bool fused_classifier = true;  // chunked linear + cross-entropy (no B T V logits kept)
  double dropout = 0.0;          // > 0 keeps dropout masks / seeds
  static ModelShape of(const nn::GPTConfig& config);
  int64_t parameters() const;  // exact element count of nn::GPT with this shape (tied embedding)
};

enum class Precision { fp32, bf16, fp16 };
enum class DeviceKind { cpu, cuda };

const char* name(Precision p);  // "fp32", "bf16", "fp16" (train_gpt --precision)

// One training configuration: what train_gpt's flags select (Candidate::flags gives them).
struct TrainingConfig {
  Precision precision = Precision::fp32;
  bool master_weights = true;   // half precision: fp32 master copy in the optimizer (--master-weights)
  bool fp32_grads = false;      // half precision: fp32 gradient buffers (--fp32-grads)
  int64_t micro_batch = 1;      // sequences per micro-batch on each rank (--batch is the global one: x world)
  int64_t grad_accum = 1;       // micro-batches per optimizer step (--grad-accum)
  int64_t recompute_every = 0;  // --recompute-every (0: off)
  OffloadMode offload_activations = OffloadMode::off;  // --offload-activations (offload_mode_name)
  int zero_stage = -1;                                 // -1: one process, no ZeRO; 0..3 (--zero)
  bool offload_optimizer = false;                      // --offload-optimizer (ZeRO-Offload)
  int state_bits = 32;             // 32 or 8 (--optimizer-state-bits)
};

// Predicted bytes of one rank. Device bytes are what the allocator's peak_allocated_bytes reports
// (engine/allocator.h), including its rounding; host bytes are the offloaded state and activations.
struct MemoryPrediction {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;  // model state on the device
  int64_t activations = 0;  // the peak of what the forward keeps for backward (and backward's transients)
  int64_t workspace = 0;    // kernels' scratch at the peak (GEMM workspaces, classifier chunks, ...; under ZeRO 3
                            // the fused classifier's dW held through the backward: a term fitted to measured peaks)
  int64_t rounding = 0;     // allocator rounding of all of the above
  int64_t host = 0;         // host bytes: offloaded optimizer state, offloaded activations, pinned staging
  int64_t device_peak() const { return parameters + gradients + optimizer_state + activations + workspace + rounding; }
};

// The per-rank prediction for `config` at `world` ranks on a device of `kind` (its allocator's rounding).
MemoryPrediction predict_memory(const ModelShape& model, const TrainingConfig& config, int world, DeviceKind kind);

// The machine's constants, stated in one place (plan/step_time.cpp) and measurable by calibrate().
struct Machine {
  std::string name;
  DeviceKind kind = DeviceKind::cuda;
  double device_flops = 0;            // sustained dense FLOP/s of the model's GEMMs in the run's precision
  double device_flops_fp32 = 0;       // the same in fp32
  double device_bandwidth = 0;        // bytes/s, memory-bound ops (optimizer, elementwise)
  double host_link_bandwidth = 0;     // bytes/s each way between host and device (PCIe / C2C)
  double interconnect_bandwidth = 0;  // bytes/s per rank of a ring collective's bus bandwidth (NVLink)
  double host_adam_bandwidth = 0;     // bytes/s of the CPU AdamW over its state (optimizer offload)
  double cpu_adam8_bandwidth = 0;     // bytes/s of the CPU 8-bit AdamW over its (fewer) bytes (offload, CPU device)
  double block_seconds = 0;           // host time to issue one transformer block's forward and backward on
                                      // tiny tensors (eager dispatch): the floor of a small micro-batch
  static Machine h200();              // one H200 SXM in an 8-GPU NVLink node (published figures, derated)
  static Machine this_cpu();          // the CPU device of this process, from a short calibration run
  static Machine cpu_nominal();       // fixed CPU figures (no calibration): what every rank of a
                                      // multi-process run plans with, so that all ranks pick alike
};
// Measures this machine's constants with short runs (GEMM, copy, CPU AdamW); seconds_budget bounds it.
Machine calibrate(DeviceKind kind, double seconds_budget = 2.0);

struct StepTime {
  double compute = 0, recompute = 0, offload = 0, collectives = 0, optimizer = 0;
  double total = 0;  // what does not overlap, summed (plan/step_time.cpp states the overlap model)
};
StepTime predict_step_time(const ModelShape& model, const TrainingConfig& config, int world, int64_t batch_tokens,
                           const Machine& machine);

struct Candidate {
  TrainingConfig config;
  MemoryPrediction memory;
  StepTime time;
  int world = 1;  // ranks it was planned for: flags() writes the global --batch (micro_batch x world)
  // The train_gpt flags that select this configuration ("--precision bf16 --zero 2 ...").
  std::vector<std::string> flags() const;
};

struct PlanRequest {
  ModelShape model;
  int64_t batch_tokens = 0;          // tokens per optimizer step over all ranks (0: one sequence per rank)
  int world = 1;
  int64_t device_budget_bytes = 0;   // per rank
  int64_t host_budget_bytes = 0;     // per node (0: unlimited)
  Machine machine;
};

// What a CUDA rank's device budget loses before the allocator sees it (plan/search.cpp states each
// item and its source): the CUDA context, cuBLASLt's workspace (a direct cudaMalloc), NCCL's buffers
// when world > 1, and a fragmentation margin of the budget. 0 on the CPU device. Configurations must
// fit device_budget_bytes - device_headroom_bytes(request).
int64_t device_headroom_bytes(const PlanRequest& request);

// Every enumerated configuration that fits both budgets, fastest predicted step first (ties: less
// device memory). Empty when nothing fits.
std::vector<Candidate> plan(const PlanRequest& request);
// A ranked table of the first `rows` candidates (the recommended one first) with their predicted bytes,
// step time and flags.
std::string format_table(const PlanRequest& request, const std::vector<Candidate>& ranked, int rows);

}  // namespace hg::plan
