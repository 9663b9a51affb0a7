#pragma once
// Activation offload: saved activations leave device memory during the forward and come back during
// the backward, one group (a transformer block) ahead of their use.
//
//   {
//     hg::ActivationOffload offload(hg::OffloadMode::all);   // or recompute_inputs
//     loss = model.loss(ids, targets);                       // forward: saves are copied out
//   }
//   loss.backward();                                         // backward: saves come back
//
// It is a set of saved-tensor hooks (engine/saved_tensor.h). pack() copies the Storage under a saved
// tensor to host memory -- once per Storage, however many views of it are saved -- and keeps only
// that copy, so the device memory is freed as soon as the forward lets go of it. unpack() brings the
// Storage back and rebuilds the view (shape, strides, offset). Groups come from
// begin_saved_tensor_group() (GPT calls it per block, hg::recompute per region): the first unpack
// in group g brings back the whole of group g and starts bringing back group g - 1.
//
// On a CUDA device: copies run on the copy stream into pinned memory. Device -> host waits for the
// compute stream's work so far (an event), and the device block is marked used on the copy stream
// (record_stream), so the caching allocator does not hand it out again before the copy has read it.
// Host -> device is issued when a group is prefetched, into a block allocated on the compute stream,
// after an event that orders it behind the compute work that may have used the block before; the
// compute stream waits for the copy's event at the first unpack. Pinned buffers are returned once
// their copies have completed.
// On the CPU device the copies are plain memcpy into host_offload_allocator(), a pool kept apart from
// the CPU allocator: the same data flow, with the split visible in the statistics (a CPU has no
// faster memory to relieve, so this is for tests and measurements).
//
// Modes: recompute_inputs offloads only what hg::recompute saves (DeepSpeed's CPU checkpointing);
// all offloads every saved activation (PyTorch's save_on_cpu). Parameters are never offloaded.
#include <cstdint>
#include <memory>
#include <string>

#include "engine/saved_tensor.h"

namespace hg {

// What moves to host memory during a forward: nothing (off, the trainer's and the planner's default;
// an ActivationOffload refuses it), the inputs of recompute regions, or every saved activation.
// train_gpt --offload-activations off|inputs|all.
enum class OffloadMode { off, recompute_inputs, all };
// "off", "inputs" or "all"; throws naming the accepted values.
OffloadMode parse_offload_mode(const std::string& text);
const char* offload_mode_name(OffloadMode mode);

struct OffloadStats {
  int64_t tensors_packed = 0;      // saved tensors handed to the hooks and moved
  int64_t storages_offloaded = 0;  // distinct storages copied out
  int64_t bytes_offloaded = 0;     // bytes copied out
  int64_t groups = 0;              // groups that received saves
};

class ActivationOffload {
 public:
  explicit ActivationOffload(OffloadMode mode);
  // Uninstalls the hooks; what was packed stays valid (and comes back) until the backward.
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;
  OffloadStats stats() const;

  class Hooks;

 private:
  std::shared_ptr<Hooks> hooks_;
  SavedTensorHooksGuard guard_;
};

}  // namespace hg
