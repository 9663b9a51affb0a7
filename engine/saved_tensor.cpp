#include "engine/saved_tensor.h"

namespace hg {

namespace {
thread_local std::shared_ptr<SavedTensorHooks> t_hooks;
}  // namespace

SavedTensor::SavedTensor(const Tensor& t, SavedRole role) {
  if (!t.defined()) return;
  const bool parameter = t.requires_grad() && t.is_leaf();
  if (t_hooks && !parameter) packed_ = t_hooks->pack(t, role);
  if (!packed_) tensor_ = t.detach();
}

Tensor SavedTensor::unpack() const {
  if (!packed_) {
    if (tensor_.defined()) tensor_.impl()->storage->ensure_ready();  // a released ZeRO-3 parameter comes back
    return tensor_;
  }
  return packed_->unpack();
}

SavedTensorHooksGuard::SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks) : previous_(std::move(t_hooks)) {
  t_hooks = std::move(hooks);
}

SavedTensorHooksGuard::~SavedTensorHooksGuard() { t_hooks = std::move(previous_); }

SavedTensorHooks* current_saved_tensor_hooks() { return t_hooks.get(); }

void begin_saved_tensor_group() {
  if (t_hooks) t_hooks->begin_group();
}

}  // namespace hg
