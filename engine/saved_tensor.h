#pragma once
// Tensors an op keeps for its backward, routed through saved-tensor hooks.
//
// An op saves what its backward needs as SavedTensor(x) instead of x.detach(). Without hooks that is
// exactly a detached handle. With hooks installed (SavedTensorHooksGuard, innermost wins), pack()
// may replace the value by something else -- a copy in host memory, for activation offload -- and
// the backward gets the value back through unpack(), as in PyTorch's saved-tensor hooks.
//
// CONVENTION
//   - Parameters (leaves that require grad) are never handed to hooks: they stay where they live.
//   - pack() returning nullptr means "keep the tensor as it is".
//   - An unpacked tensor has the saved tensor's shape, strides, offset, dtype and device, and equal
//     bytes; it may live in a different Storage than the original.
//   - Hooks are per thread (the thread that runs the forward).
#include <memory>

#include "engine/tensor.h"

namespace hg {

// Why a tensor is saved: by an op for its backward, or by hg::recompute (its inputs, the only
// activations a recompute region keeps).
enum class SavedRole { activation, recompute_input };

// A saved value in whatever form the hooks chose.
class PackedTensor {
 public:
  virtual ~PackedTensor() = default;
  virtual Tensor unpack() = 0;
};

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  // nullptr: keep `t` as it is.
  virtual std::shared_ptr<PackedTensor> pack(const Tensor& t, SavedRole role) = 0;
  // The saves that follow belong to a new group (see begin_saved_tensor_group).
  virtual void begin_group() {}
};

class SavedTensor {
 public:
  SavedTensor() = default;
  // Saves `t` detached, through the innermost hooks of this thread if any (an undefined `t` stays
  // undefined).
  SavedTensor(const Tensor& t, SavedRole role = SavedRole::activation);  // NOLINT: implicit on purpose
  bool defined() const { return tensor_.defined() || packed_ != nullptr; }
  // The saved value, detached.
  Tensor unpack() const;

 private:
  Tensor tensor_;
  std::shared_ptr<PackedTensor> packed_;
};

// Installs `hooks` for the saves of this thread in its scope (nests; the innermost is used).
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;

 private:
  std::shared_ptr<SavedTensorHooks> previous_;
};

// The innermost hooks of this thread (nullptr: none).
SavedTensorHooks* current_saved_tensor_hooks();

// Marks the start of a new group of saves -- a transformer block, a recompute region -- so that
// hooks which move saved tensors away can bring a whole group back, one group ahead of its use in
// backward. A no-op without hooks.
void begin_saved_tensor_group();

}  // namespace hg
