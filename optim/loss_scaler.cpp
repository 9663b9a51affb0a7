// LossScaler: the fused unscale/check pass per device, the skip-on-overflow step, the dynamic
// scale policy and its checkpoint state (the policy and the per-step order are in optim/loss_scaler.h).
#include "optim/loss_scaler.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "engine/autograd.h"
#include "engine/host_reads.h"
#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/step_kernels.h"
#include "optim/unscale.h"

namespace hg::optim {
namespace {

constexpr const char* kOp = "[LossScaler]";

void check_options(const DynamicLossScaleOptions& o) {
  const double max_float = double(std::numeric_limits<float>::max());
  HG_CHECK(std::isfinite(o.min_scale()) && o.min_scale() > 0.0, kOp, " invalid min_scale ", o.min_scale(),
           ": expected a finite value > 0");
  HG_CHECK(std::isfinite(o.max_scale()) && o.max_scale() >= o.min_scale() && o.max_scale() <= max_float, kOp,
           " invalid max_scale ", o.max_scale(), ": expected min_scale (", o.min_scale(),
           ") <= max_scale <= the largest float (", max_float, ")");
  HG_CHECK(std::isfinite(o.init_scale()) && o.init_scale() >= o.min_scale() && o.init_scale() <= o.max_scale(), kOp,
           " invalid init_scale ", o.init_scale(), ": expected min_scale (", o.min_scale(),
           ") <= init_scale <= max_scale (", o.max_scale(), ")");
  HG_CHECK(std::isfinite(o.growth_factor()) && o.growth_factor() > 1.0, kOp, " invalid growth_factor ",
           o.growth_factor(), ": expected a finite value > 1");
  HG_CHECK(std::isfinite(o.backoff_factor()) && o.backoff_factor() > 0.0 && o.backoff_factor() < 1.0, kOp,
           " invalid backoff_factor ", o.backoff_factor(), ": expected 0 < backoff_factor < 1");
  HG_CHECK(o.growth_interval() >= 1, kOp, " invalid growth_interval ", o.growth_interval(), ": expected >= 1 steps");
  HG_CHECK(o.hysteresis() >= 1, kOp, " invalid hysteresis ", o.hysteresis(),
           ": expected >= 1 (1 backs off at the first overflow)");
}

}  // namespace

LossScaler::LossScaler() = default;

LossScaler::LossScaler(LossScaleMode mode, double scale, DynamicLossScaleOptions options)
    : mode_(mode), options_(options) {
  host_.scale = float(scale);
  host_.hysteresis_left = options.hysteresis();
}

LossScaler::LossScaler(const LossScaler& other)
    : mode_(other.mode_),
      options_(other.options_),
      host_(other.host_),
      state_(other.state_.defined() ? other.state_.clone() : Tensor()),
      unscaled_(other.unscaled_),
      stepped_(other.stepped_),
      reducer_(other.reducer_) {}

LossScaler& LossScaler::operator=(const LossScaler& other) {
  if (this != &other) *this = LossScaler(other);
  return *this;
}

LossScaler LossScaler::none() { return LossScaler(); }

LossScaler LossScaler::fixed(double scale) {
  HG_CHECK(std::isfinite(scale) && scale > 0.0 && scale <= double(std::numeric_limits<float>::max()), kOp,
           " invalid static loss scale ", scale, ": expected a finite value > 0 that a float holds");
  return LossScaler(LossScaleMode::Static, scale, DynamicLossScaleOptions().hysteresis(1));
}

LossScaler LossScaler::dynamic(DynamicLossScaleOptions options) {
  check_options(options);
  return LossScaler(LossScaleMode::Dynamic, options.init_scale(), options);
}

static_assert(sizeof(kernels::LossScaleState) == 4 * sizeof(int64_t), "the state is held in an i64[4] tensor");

void LossScaler::ensure_state(const Device& device) {
  if (state_.defined()) {
    HG_CHECK(state_.device() == device, kOp, " the scaler's state lives on ", state_.device().str(),
             " but this step's tensors are on ", device.str(), "; one scaler serves one device");
    return;
  }
  Tensor host = empty({4}, DType::i64, kCPU);
  std::memcpy(host.data_ptr(), &host_, sizeof host_);
  state_ = device.is_cpu() ? host : host.to(device);
}

kernels::LossScaleState LossScaler::read_state() const {
  if (!state_.defined()) return host_;
  note_host_read("[LossScaler] a read of the scaler's state");
  kernels::LossScaleState s;
  const Tensor host = state_.device().is_cpu() ? state_ : state_.to(kCPU);  // the one read
  std::memcpy(&s, host.data_ptr(), sizeof s);
  return s;
}

Tensor LossScaler::view(DType dtype, int64_t offset) const {
  if (!state_.defined() || mode_ == LossScaleMode::None) return Tensor();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = state_.storage();
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(impl);
}

kernels::LossScalePolicy LossScaler::policy() const {
  kernels::LossScalePolicy p;
  p.dynamic = mode_ == LossScaleMode::Dynamic;
  p.growth_factor = options_.growth_factor();
  p.backoff_factor = options_.backoff_factor();
  p.min_scale = options_.min_scale();
  p.max_scale = options_.max_scale();
  p.growth_interval = options_.growth_interval();
  p.hysteresis = options_.hysteresis();
  p.consecutive_hysteresis = options_.consecutive_hysteresis();
  return p;
}

const char* LossScaler::mode_name() const {
  switch (mode_) {
    case LossScaleMode::None:
      return "none";
    case LossScaleMode::Static:
      return "static";
    case LossScaleMode::Dynamic:
      return "dynamic";
  }
  return "?";
}

Tensor LossScaler::scale(const Tensor& loss) const {
  HG_CHECK(loss.defined(), kOp, " scale: the loss is an undefined tensor");
  if (mode_ == LossScaleMode::None) return loss;
  const_cast<LossScaler*>(this)->ensure_state(loss.device());
  const Tensor scale = scale_tensor();  // S read by the multiply kernel: no host value
  return loss * (loss.dtype() == DType::f32 ? scale : scale.to(loss.dtype()));
}

bool LossScaler::unscale_(const std::vector<Tensor>& params) {
  if (mode_ == LossScaleMode::None) return true;
  if (!unscaled_) {
    for (const Tensor& p : params)
      if (p.defined() && p.grad().defined()) ensure_state(p.grad().device());
    if (!state_.defined()) return true;  // no gradient anywhere: nothing to unscale, nothing found
    unscale_gradients_on_device(params, scale_tensor(), found_inf_tensor());
    unscaled_ = true;
    reduce_found_inf();
  }
  return !found_inf();
}

bool LossScaler::unscale_(Optimizer& optimizer) {
  if (mode_ == LossScaleMode::None) return true;
  unscale_on_device(optimizer);
  return !found_inf();
}

void LossScaler::unscale_on_device(Optimizer& optimizer) {
  if (mode_ == LossScaleMode::None || unscaled_) return;
  const std::vector<Tensor> params = optimizer.parameters();
  HG_CHECK(!params.empty() || !optimizer.decides_on_device(), kOp, " unscale_: the optimizer ", optimizer.name(),
           " has no parameters");
  ensure_state(params.empty() ? kCPU : params.front().device());
  if (DeviceStep* device = optimizer.device_step()) {
    device->unscale(scale_tensor(), found_inf_tensor());
  } else {  // the optimizer decides on the host: S read, its verdict written back (no read)
    const bool found = optimizer.unscale_and_check(scale_value());
    found_inf_tensor().fill_(found ? 1.0 : 0.0);
  }
  unscaled_ = true;
  reduce_found_inf();
}

void LossScaler::reduce_found_inf() {
  if (!reducer_) return;
  const bool local = read_state().found_inf != 0.0f;
  found_inf_tensor().fill_(reducer_(local) ? 1.0 : 0.0);
}

bool LossScaler::step(Optimizer& optimizer) {
  if (mode_ == LossScaleMode::None) return optimizer.step();
  HG_CHECK(!stepped_, kOp, " step() called twice in one step; call update() after each step()");
  unscale_on_device(optimizer);
  stepped_ = true;
  // The host form reads the verdict anyway, so a skipped step does not call the optimizer at all.
  if (!found_inf() && optimizer.step()) return true;
  optimizer.zero_grad(/*set_to_none=*/false);  // skipped: the gradients are dropped in place
  found_inf_tensor().fill_(1.0);               // (also when the optimizer found what the pass could not see)
  return false;
}

bool LossScaler::step_on_device(Optimizer& optimizer, const Tensor& lr) {
  DeviceStep* device = optimizer.device_step();
  HG_CHECK(device != nullptr || !lr.defined(), kOp, " step: ", optimizer.name(),
           " reads its learning rate on the host (it has no device step); set it with set_lr");
  if (mode_ == LossScaleMode::None) return device ? device->step(lr, Tensor()) : optimizer.step();
  HG_CHECK(!stepped_, kOp, " step() called twice in one step; call update() after each step()");
  unscale_on_device(optimizer);
  stepped_ = true;
  if (device) return device->step(lr, found_inf_tensor());  // the kernels skip the update when found_inf is set
  if (found_inf()) {  // one host read: this optimizer cannot skip by itself
    optimizer.zero_grad(/*set_to_none=*/false);
    return true;
  }
  if (optimizer.step()) return true;
  found_inf_tensor().fill_(1.0);  // the optimizer found what the unscale pass could not see
  return false;
}

void LossScaler::update() {
  if (mode_ == LossScaleMode::None) return;
  HG_CHECK(unscaled_, kOp,
           " update() without unscale_() or step() in this step; the order is scale(loss)."
           "backward(), unscale_(), clip, step(), update()");
  HG_KERNEL(state_.device(), loss_scale_update, static_cast<kernels::LossScaleState*>(state_.data_ptr()), policy(),
            stepped_);
  unscaled_ = stepped_ = false;
}

std::vector<std::pair<std::string, Tensor>> LossScaler::state_tensors() const {
  const kernels::LossScaleState s = read_state();
  return {{"mode", scalar_tensor(double(int(mode_)), DType::i64)},
          {"scale", scalar_tensor(double(s.scale), DType::f64)},
          {"good_steps", scalar_tensor(double(s.good_steps), DType::i64)},
          {"hysteresis_left", scalar_tensor(double(s.hysteresis_left), DType::i64)},
          {"skipped_steps", scalar_tensor(double(s.skipped_steps), DType::i64)}};
}

void LossScaler::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) {
  const std::string op = std::string(kOp) + " load_state_tensors:";
  const std::set<std::string> known = {"mode", "scale", "good_steps", "hysteresis_left", "skipped_steps"};
  std::map<std::string, double> values;
  for (const auto& [key, value] : entries) {
    HG_CHECK(known.count(key), op, " unknown entry '", key,
             "'; a loss scaler keeps mode, scale, good_steps, hysteresis_left, skipped_steps");
    HG_CHECK(value.defined() && value.numel() == 1, op, " entry '", key, "' is ",
             value.defined() ? value.describe() : std::string("undefined"), "; expected a one-element tensor");
    HG_CHECK(values.emplace(key, value.item()).second, op, " entry '", key, "' appears more than once");
  }
  for (const std::string& k : known) HG_CHECK(values.count(k), op, " entry '", k, "' is missing");
  for (const char* k : {"mode", "good_steps", "hysteresis_left", "skipped_steps"}) {
    const double v = values[k];
    HG_CHECK(std::isfinite(v) && v >= 0 && v == std::floor(v), op, " entry '", k, "' holds ", v,
             "; expected an integer >= 0");
  }
  const int64_t mode = int64_t(values["mode"]);
  HG_CHECK(mode == int64_t(int(mode_)), op, " the state is of a '",
           mode == 0   ? "none"
           : mode == 1 ? "static"
           : mode == 2 ? "dynamic"
                       : "unknown",
           "' scaler (mode ", mode, ") but this one is '", mode_name(), "'");
  const double scale = values["scale"];
  if (mode_ == LossScaleMode::Dynamic) {
    HG_CHECK(std::isfinite(scale) && scale >= options_.min_scale() && scale <= options_.max_scale(), op, " scale ",
             scale, " is outside [min_scale, max_scale] = [", options_.min_scale(), ", ", options_.max_scale(), "]");
    const int64_t left = int64_t(values["hysteresis_left"]);
    HG_CHECK(left >= 1 && left <= options_.hysteresis(), op, " hysteresis_left ", left,
             " is outside [1, hysteresis = ", options_.hysteresis(), "]");
    HG_CHECK(int64_t(values["good_steps"]) < options_.growth_interval(), op, " good_steps ", values["good_steps"],
             " is not below growth_interval ", options_.growth_interval());
  } else {
    const double current = scale_value();
    HG_CHECK(scale == current, op, " the state's scale ", scale, " differs from this ", mode_name(),
             " scaler's scale ", current);
  }
  host_.scale = float(scale);
  host_.found_inf = 0.0f;
  host_.good_steps = int64_t(values["good_steps"]);
  host_.hysteresis_left = int64_t(values["hysteresis_left"]);
  host_.skipped_steps = int64_t(values["skipped_steps"]);
  if (state_.defined()) {  // the live device state takes the loaded values (a copy, no read)
    Tensor host = empty({4}, DType::i64, kCPU);
    std::memcpy(host.data_ptr(), &host_, sizeof host_);
    NoGradGuard no_grad;
    state_.copy_(host);
  }
  unscaled_ = stepped_ = false;
}

}  // namespace hg::optim
