// The user-defined step's context (train/custom_step.h): backward and step of a named Update.
#include "train/custom_step.h"

#include "engine/autograd.h"
#include "engine/ops.h"
#include "kernels/error.h"
#include "optim/clip_value.h"

namespace hg::train {
namespace {
constexpr const char* kWho = "[Trainer custom step]";
}  // namespace

UpdateState& StepContext::find(const std::string& update) const {
  for (UpdateState& u : updates_)
    if (u.spec.name == update) return u;
  std::string names;
  for (const UpdateState& u : updates_) names += (names.empty() ? "'" : ", '") + u.spec.name + "'";
  throw Error(std::string(kWho) + " no Update named '" + update + "'; expected one of " + names);
}

void StepContext::backward(const std::string& update, const Tensor& loss) {
  UpdateState& u = find(update);
  HG_CHECK(loss.defined() && loss.numel() == 1 && is_floating(loss.dtype()), kWho, " backward('", update,
           "'): the loss is ", loss.defined() ? loss.describe() : std::string("undefined"),
           "; expected a floating scalar");
  u.backwards += 1;
  u.spec.optimizer->set_gradient_sync(u.backwards >= int64_t(batches_.size()));
  u.spec.scaler.scale(loss * (1.0 / double(batches_.size()))).backward();
}

bool StepContext::step(const std::string& update) {
  UpdateState& u = find(update);
  optim::Optimizer& opt = *u.spec.optimizer;
  optim::LossScaler& scaler = u.spec.scaler;
  scaler.unscale_(opt);
  if (u.spec.clip > 0) u.grad_norm = opt.clip_grad_norm(u.spec.clip);
  if (u.spec.clip_value > 0) optim::clip_grad_value_(opt.parameters(), u.spec.clip_value);
  if (u.spec.schedule) {
    u.lr = u.spec.schedule->lr(u.steps);
    opt.set_lr(u.lr);
  }
  const bool stepped = scaler.step(opt);
  if (stepped) {
    u.steps += 1;
    u.stepped = true;
  }
  scaler.update();
  opt.zero_grad();
  u.backwards = 0;
  return stepped;
}

void StepContext::zero_grad(const std::string& update) { find(update).spec.optimizer->zero_grad(); }

void StepContext::log(const std::string& name, double value) {
  HG_CHECK(!name.empty(), kWho, " log(): an empty name; expected the metric's name");
  logged_.emplace_back(name, value);
}

void StepContext::log(const std::string& name, const Tensor& value) {
  HG_CHECK(value.defined() && value.numel() == 1, kWho, " log('", name,
           "'): ", value.defined() ? value.describe() : std::string("undefined"), "; expected one value");
  log(name, value.item());
}

int64_t StepContext::optimizer_steps(const std::string& update) const { return find(update).steps; }

optim::LossScaler& StepContext::scaler(const std::string& update) { return find(update).spec.scaler; }

}  // namespace hg::train
