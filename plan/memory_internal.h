#pragma once
// Internal to hg_plan: the pieces predict_memory (plan/memory_model.cpp) adds up -- the allocator's
// rounding of one request, the model's parameter tensors, and the phases of a training step at which
// the peak can fall, with the activation bytes alive at each (plan/activation_bytes.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace hg::plan::detail {

// Bytes the allocator of `kind` books for a request of `bytes` (engine/allocator.cpp size classes on
// the CPU and for host memory; 512-byte multiples on CUDA, engine/cuda/cuda_allocator.cpp).
int64_t allocator_bytes(int64_t bytes, DeviceKind kind);

// Requested bytes and what the allocator books for them.
struct Bytes {
  int64_t requested = 0, booked = 0;
  void add(int64_t bytes, DeviceKind kind, int64_t count = 1) {
    requested += bytes * count;
    booked += allocator_bytes(bytes, kind) * count;
  }
  Bytes& operator+=(const Bytes& o) {
    requested += o.requested, booked += o.booked;
    return *this;
  }
  Bytes times(int64_t k) const { return Bytes{requested * k, booked * k}; }
};
inline Bytes operator+(Bytes x, const Bytes& y) { return x += y; }

// nn::GPT's parameter tensors in registration order (wte, wpe, h.i..., ln_f), with the block each
// belongs to (-1: outside the blocks).
struct ParamTensor {
  int64_t numel = 0;
  int64_t block = -1;
  bool head = false;  // wte and ln_f: their gradients exist from the start of the backward
  int position = 0;   // within its block, in registration order: ln_1 0-1, attn.c_attn 2-3,
                      // attn.c_proj 4-5, ln_2 6-7, mlp.c_fc 8-9, mlp.c_proj 10-11 (backward: last first)
};
std::vector<ParamTensor> parameter_tensors(const ModelShape& model);

// A point of the step at which the peak can fall: the activation bytes alive there and which
// gradients already exist (gradients set to none by zero_grad grow during the backward).
struct Phase {
  std::string where;
  Bytes activations;             // saved for backward + backward's live activation gradients + the batch
  Bytes workspace;               // op scratch alive there (the fused classifier's chunk buffers, ...)
  bool backward = false;         // false: the forward, no gradient exists yet
  bool all_grads = false;        // every gradient (end of the backward, the optimizer)
  int64_t grads_from_block = 0;  // (backward) blocks >= this have all their gradients
  int64_t partial_block = -1;    // this block's gradients of positions >= partial_from exist
  int partial_from = 10;
  int64_t completed_block = -1;  // this block's gradients are complete (ZeRO: its bucket / unit is reduced)
  // ZeRO 3: the units gathered there (block indices; -1: the root unit of wte, wpe).
  std::vector<int64_t> gathered;
};
std::vector<Phase> step_phases(const ModelShape& model, const TrainingConfig& config, DeviceKind kind);

// Host bytes of the offloaded activations at their peak (the end of the forward), in the host
// allocator's units (CPU size classes: host_offload_allocator or pinned memory).
int64_t offloaded_activation_bytes(const ModelShape& model, const TrainingConfig& config);

inline int64_t element_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }

}  // namespace hg::plan::detail
