#pragma once
// measure_memory: what predict_memory (plan/plan.h) is checked against -- the allocator's measured
// peak of one training step of a configuration, run in this process as train_gpt runs it.
//
//   plan::MeasuredMemory m = plan::measure_memory(shape, config, Device::parse("cuda:0"));
//   double error = double(predict_memory(shape, config, 1, DeviceKind::cuda).device_peak()) / m.device_peak - 1;
//
// The model and the optimizer are built as samples/train_gpt.cpp builds them (GPT in the precision on
// the device, fp32 gradients when asked, recompute_every, a local AdamW with the master-weights setting,
// or dist::ZeroOptimizer of the stage at world 1 with persistence threshold 4 C), then one warm-up step
// (grad_accum micro-batches of random tokens, forward under the activation offload, backward, clip to
// norm 1, AdamW step, zero_grad) creates the optimizer state and fills the caches; the peak is reset and
// a second step measured. Device bytes: peak_allocated_bytes above what was allocated before the model
// was built. Host bytes: the peak of host_offload_allocator() (CPU device) or of pinned memory (CUDA)
// above its level before.
#include <cstdint>

#include "engine/device.h"
#include "plan/plan.h"

namespace hg::dist {
class Communicator;
}

namespace hg::plan {

struct MeasuredMemory {
  int64_t device_peak = 0;  // allocator bytes at the step's peak (model state + activations + scratch)
  int64_t host_peak = 0;    // offload pool / pinned bytes at the step's peak
};

// At world 1 (zero_stage -1 runs a local AdamW; 0..3 a ZeroOptimizer over a one-rank communicator),
// or over `comm`'s ranks (collective: every rank calls it with the same arguments; config.micro_batch
// is each rank's). 8-bit optimizer state (config.state_bits 8) with the local AdamW only.
MeasuredMemory measure_memory(const ModelShape& model, const TrainingConfig& config, const Device& device,
                              dist::Communicator* comm = nullptr);

}  // namespace hg::plan
