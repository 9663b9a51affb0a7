#pragma once
// Internal to hg_plan: the pieces predict_memory (plan/memory_model.cpp) adds up -- the allocator's
// rounding of one request, the model's parameter tensors, and the activation bytes of a step
// (plan/activation_bytes.cpp).
#include <cstdint>
#include <vector>

#include "plan/plan.h"

namespace hg::plan::detail {

// Bytes the allocator of `kind` books for a request of `bytes` (engine/allocator.cpp size classes on
// the CPU; 512-byte multiples on CUDA, engine/cuda/cuda_allocator.cpp).
int64_t allocator_bytes(int64_t bytes, DeviceKind kind);

// Element counts of nn::GPT's parameter tensors, in registration order (wte, wpe, h.i..., ln_f).
std::vector<int64_t> parameter_numels(const ModelShape& model);

// What one step's forward and backward add on top of the model state at their peak.
struct ActivationBytes {
  int64_t activations = 0;  // tensors saved for backward + backward's live activation gradients (requested bytes)
  int64_t workspace = 0;    // op scratch alive at the peak
  int64_t rounding = 0;     // allocator rounding of the two
  int64_t host = 0;         // offloaded activations (host memory)
  // Gradient bytes already created when the peak is reached (set_to_none gradients grow during the
  // backward): a fraction in [0, 1] of the full gradient bytes.
  double gradients_alive = 1.0;
};
ActivationBytes activation_bytes(const ModelShape& model, const TrainingConfig& config, DeviceKind kind);

inline int64_t element_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

}  // namespace hg::plan::detail
