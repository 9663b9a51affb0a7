// LocalOptimizer: parameter groups, per-parameter state, the step loop and state (de)serialisation.
// The update rule itself is the subclass's (optim/sgd.cpp, optim/adamw.cpp).
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <unordered_set>

#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/philox.h"
#include "optim/clip.h"
#include "optim/unscale.h"

namespace hg::optim {

// ---- Optimizer: the defaults of the protocol -------------------------------------------------------

bool Optimizer::unscale_and_check(double scale) { return unscale_gradients(parameters(), 1.0 / scale); }

double Optimizer::grad_norm() { return optim::grad_norm(parameters()); }

double Optimizer::clip_grad_norm(double max_norm) { return optim::clip_grad_norm(parameters(), max_norm); }

// ---- LocalOptimizer --------------------------------------------------------------------------------

std::unique_ptr<Optimizer::WholeParameters> LocalOptimizer::whole_parameters() {
  struct RefreshMasters final : WholeParameters {
    LocalOptimizer* owner;
    explicit RefreshMasters(LocalOptimizer* o) : owner(o) {}
    void commit() override {
      NoGradGuard no_grad;
      size_t index = 0;
      for (const ParamGroup& g : owner->groups_)
        for (const Tensor& p : g.params) {
          const auto& buffers = owner->state_[index++].buffers;
          if (const auto it = buffers.find("master"); it != buffers.end()) it->second.copy_(p);
        }
    }
  };
  return std::make_unique<RefreshMasters>(this);
}

std::vector<Tensor> LocalOptimizer::parameters() const {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

LocalOptimizer::LocalOptimizer(std::string name) : name_(std::move(name)) {}

void LocalOptimizer::check_lr(double lr) const {
  HG_CHECK(std::isfinite(lr) && lr >= 0.0, "[", name_, "] invalid learning rate ", lr, ": expected lr >= 0");
}

void LocalOptimizer::check_weight_decay(double weight_decay) const {
  HG_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0, "[", name_, "] invalid weight_decay ", weight_decay,
           ": expected weight_decay >= 0");
}

void LocalOptimizer::check_range(const char* option, double value, double lo, double hi, bool hi_open,
                                 int64_t group) const {
  const bool inside = std::isfinite(value) && value >= lo && (hi_open ? value < hi : value <= hi);
  HG_CHECK(inside, "[", name_, "] invalid ", option, " ", value,
           group >= 0 ? detail::concat(" in group ", group) : std::string(), ": expected ", lo, " <= ", option,
           hi_open ? " < " : " <= ", hi);
}

size_t LocalOptimizer::group_index(const Tensor& param) const {
  const auto it = group_of_.find(param.impl());
  HG_CHECK(it != group_of_.end(), "[", name_, "] ", param.describe(), " is not one of this optimizer's parameters");
  return it->second;
}

void LocalOptimizer::check_overrides(const ParamGroup& group, size_t index) const {
  const std::vector<GroupOptionName> known = group_options();
  std::string names;
  for (const GroupOptionName& option : known) names += (names.empty() ? "" : ", ") + option.name;
  for (const auto& [key, value] : group.overrides) {
    const auto it = std::find_if(known.begin(), known.end(), [&key = key](const auto& o) { return o.name == key; });
    HG_CHECK(key != "lr" && key != "weight_decay", "[", name_, "] group ", index, " overrides '", key,
             "'; set the group's ", key, " field instead");
    HG_CHECK(it != known.end(), "[", name_, "] group ", index, " overrides unknown hyper-parameter '", key, "'; ",
             name_, "'s groups may override: ",
             names.empty() ? std::string("none besides lr and weight_decay") : names);
    HG_CHECK(!it->flag || value == 0.0 || value == 1.0, "[", name_, "] group ", index, " sets the flag '", key, "' to ",
             value, "; expected 0 (false) or 1 (true)");
  }
  check_group(group, index);
}

Tensor& LocalOptimizer::state_buffer(ParamState& state, const std::string& name, const Tensor& param,
                                     double initial) const {
  auto it = state.buffers.find(name);
  if (it == state.buffers.end())
    it = state.buffers.emplace(name, full_like(param, initial).to(state_dtype(param))).first;
  return it->second;
}

void LocalOptimizer::check_param(const Tensor& p, size_t group, size_t index_in_group) const {
  HG_CHECK(p.defined(), "[", name_, "] parameter ", index_in_group, " of group ", group, " is an undefined tensor");
  const std::string where =
      detail::concat("[", name_, "] parameter ", index_in_group, " of group ", group, " (", p.describe(), ")");
  HG_CHECK(is_floating(p.dtype()), where, " is not floating; expected a f32, f64, f16 or bf16 tensor");
  HG_CHECK(p.is_leaf(), where, " is not a leaf: it is the output of '", p.grad_fn()->name(),
           "'; pass the leaf tensor it was computed from");
  HG_CHECK(p.is_contiguous(), where,
           " is not contiguous; parameters are updated in place and must be contiguous (make the leaf from a "
           "contiguous() copy)");
}

void LocalOptimizer::init_groups(std::vector<ParamGroup> groups) {
  size_t total = 0;
  for (const ParamGroup& g : groups) total += g.params.size();
  HG_CHECK(total > 0, "[", name_, "] got an empty parameter list; expected at least one parameter");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void LocalOptimizer::add_param_group(ParamGroup group) {
  const size_t g = groups_.size();
  check_lr(group.lr);
  check_weight_decay(group.weight_decay);
  check_overrides(group, g);
  std::unordered_set<const TensorImpl*> seen;
  for (const ParamGroup& existing : groups_) {
    for (const Tensor& p : existing.params) seen.insert(p.impl());
  }
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    check_param(p, g, i);
    HG_CHECK(seen.insert(p.impl()).second, "[", name_, "] parameter ", i, " of group ", g, " (", p.describe(),
             ") appears more than once; each parameter belongs to exactly one group");
  }
  state_.resize(state_.size() + group.params.size());
  for (const Tensor& p : group.params) group_of_[p.impl()] = g;
  groups_.push_back(std::move(group));
}

void LocalOptimizer::set_lr(double lr) {
  check_lr(lr);
  for (ParamGroup& g : groups_) g.lr = lr;
}

// The device step of an optimizer whose update() reads device_lr() and skip_flag() (AdamW): the fused
// unscale and clip passes over its gradients, and step() with the two scalars bound for its duration.
class LocalOptimizer::LocalDeviceStep final : public DeviceStep {
 public:
  explicit LocalDeviceStep(LocalOptimizer& owner) : owner_(owner) {}
  void unscale(const Tensor& scale, const Tensor& found_inf) override {
    unscale_gradients_on_device(owner_.parameters(), scale, found_inf);
  }
  void clip_grad_norm(double max_norm, const Tensor& sum_sq) override {
    clip_grad_norm_on_device(owner_.parameters(), max_norm, sum_sq);
  }
  bool step(const Tensor& lr, const Tensor& found_inf) override {
    check_scalar(lr, DType::f64, "the learning rate");
    check_scalar(found_inf, DType::f32, "found_inf");
    struct Bound {
      LocalOptimizer& o;
      ~Bound() { o.device_lr_ = o.skip_flag_ = Tensor(); }
    } bound{owner_};
    owner_.device_lr_ = lr;
    owner_.skip_flag_ = found_inf;
    return owner_.step();
  }

 private:
  void check_scalar(const Tensor& t, DType dtype, const char* what) const {
    HG_CHECK(!t.defined() || (t.numel() == 1 && t.dtype() == dtype && t.is_contiguous()), "[", owner_.name(),
             "] device step: expected ", what, " as a contiguous ", dtype_name(dtype), " scalar, got ", t.describe());
  }
  LocalOptimizer& owner_;
};

kernels::AdamWStepScalars LocalOptimizer::step_scalars(const ParamGroup& group, const Tensor& param,
                                                       ParamState& state) const {
  if (!state.step_count.defined()) {  // updates so far (state.step counts this one already)
    Tensor count = zeros({3}, DType::i64, kCPU);
    count.data<int64_t>()[0] = state.step - 1;
    state.step_count = param.device().is_cpu() ? count : count.to(param.device());
    state.parity = 0;
  }
  kernels::AdamWStepScalars s;
  s.lr_value = group.lr;
  if (const Tensor& lr = device_lr(); lr.defined()) {
    HG_CHECK(lr.device() == param.device(), "[", name_, "] the device learning rate is on ", lr.device().str(),
             " but parameter ", param.describe(), " is not");
    s.lr = static_cast<const double*>(lr.data_ptr());
  }
  if (const Tensor& flag = skip_flag(); flag.defined()) {
    HG_CHECK(flag.device() == param.device(), "[", name_, "] the skip flag is on ", flag.device().str(),
             " but parameter ", param.describe(), " is not");
    s.found_inf = static_cast<const float*>(flag.data_ptr());
  }
  // The count stays in slot 0 (parity 0 for ever): a CUDA graph replays the captured call with the
  // captured arguments, so the slots cannot swap on the host.
  s.step = static_cast<int64_t*>(state.step_count.data_ptr());
  s.parity = state.parity;
  s.blocks_done = reinterpret_cast<unsigned long long*>(s.step + 2);
  return s;
}

void LocalOptimizer::enable_device_step() {
  device_step_impl_ = std::make_unique<LocalDeviceStep>(*this);
  set_device_step(device_step_impl_.get());
}

void LocalOptimizer::set_lr(size_t group, double lr) {
  HG_CHECK(group < groups_.size(), "[", name_, "] set_lr: group ", group, " out of range (the optimizer has ",
           groups_.size(), " groups)");
  check_lr(lr);
  groups_[group].lr = lr;
}

const ParamState& LocalOptimizer::state(int64_t index) const {
  HG_CHECK(index >= 0 && index < num_params(), "[", name_, "] state: parameter index ", index,
           " out of range (the optimizer has ", num_params(), " parameters)");
  return state_[size_t(index)];
}

void LocalOptimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const ParamGroup& g : groups_) {
    for (const Tensor& p : g.params) {
      if (set_to_none) {
        p.set_grad(Tensor());
      } else if (Tensor grad = p.grad(); grad.defined()) {
        grad.zero_();
      }
    }
  }
}

void LocalOptimizer::set_mixed_precision(const MixedPrecisionOptions& options) {
  if (options.master_weights() != mixed_precision_.master_weights()) {
    for (const ParamState& st : state_) {
      HG_CHECK(!st.initialized(), "[", name_, "] set_mixed_precision: cannot turn master weights ",
               options.master_weights() ? "on" : "off",
               " after the first step (the state would no longer match); set it before stepping");
    }
  }
  mixed_precision_ = options;
}

void LocalOptimizer::update_elements(const ParamGroup& group, const Tensor& param, const Tensor& grad,
                                     ParamState& state) {
  HG_CHECK(elementwise(), "[", name_, "] update_elements: this optimizer's update is not element-wise");
  HG_CHECK(param.defined() && grad.defined() && param.is_contiguous() && grad.is_contiguous() &&
               !is_half(param.dtype()) && grad.shape() == param.shape() && grad.dtype() == param.dtype() &&
               grad.device() == param.device(),
           "[", name_, "] update_elements: got elements ",
           param.defined() ? param.describe() : std::string("undefined"), " and gradient ",
           grad.defined() ? grad.describe() : std::string("undefined"),
           "; expected contiguous f32 or f64 tensors of one shape, dtype and device");
  HG_CHECK(state.step >= 1, "[", name_, "] update_elements: the state's step is ", state.step,
           "; count this update first (1 at the first one)");
  NoGradGuard no_grad;
  update(group, param, grad, state);
}

bool LocalOptimizer::step() {
  NoGradGuard no_grad;
  // Stochastic rounding draws from the step count on the host: a skip decided on the device is
  // read here (one host wait) so that a skipped step re-rounds nothing.
  if (skip_flag_.defined() && mixed_precision_.stochastic_rounding() && skip_flag_.item() != 0.0) return true;
  size_t index = 0;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      ParamState& st = state_[index++];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      const bool fp32_grad_of_half = is_half(p.dtype()) && grad.dtype() == DType::f32;
      HG_CHECK(
          grad.shape() == p.shape() && (grad.dtype() == p.dtype() || fp32_grad_of_half) && grad.device() == p.device(),
          "[", name_, "] parameter ", index - 1, " is ", p.describe(), " but its gradient is ", grad.describe(),
          "; expected the same shape and device, and the parameter's dtype (or f32 for a half parameter)");
      if (!grad.is_contiguous()) grad = grad.contiguous();
      ++st.step;
      update_param(group, p, grad, st, index - 1);
    }
  }
  return true;
}

namespace {

// A well-mixed 64-bit key per (seed, parameter index) (splitmix64's finaliser), so the stochastic
// rounding streams of different parameters do not overlap.
uint64_t rounding_key(uint64_t seed, size_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t(index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void LocalOptimizer::update_param(const ParamGroup& group, const Tensor& param, Tensor grad, ParamState& state,
                                  size_t index) {
  if (!is_half(param.dtype())) {
    update(group, param, grad, state);
    return;
  }
  const bool stochastic = mixed_precision_.stochastic_rounding();
  Tensor master;
  if (keeps_master(param)) {
    auto it = state.buffers.find("master");
    if (it == state.buffers.end()) it = state.buffers.emplace("master", param.to(DType::f32)).first;
    master = it->second;
    if (!stochastic && grad.dtype() == param.dtype() && update_with_master(group, param, master, grad, state)) return;
  } else {
    master = param.to(DType::f32);  // a working copy, dropped after the update
  }
  update(group, master, grad.dtype() == DType::f32 ? grad : grad.to(DType::f32), state);
  Tensor target = param;
  if (stochastic) {
    // Draws depend on (seed, parameter index, step) only: a resumed run rounds as the original.
    const uint64_t n = uint64_t(param.numel());
    HG_KERNEL(param.device(), stochastic_round, static_cast<const float*>(master.data_ptr()), target.data_ptr(),
              param.numel(), rounding_key(mixed_precision_.rounding_seed(), index),
              uint64_t(state.step - 1) * philox_blocks(n), param.dtype());
  } else {
    target.copy_(master);  // round to nearest even
  }
}

std::vector<std::string> LocalOptimizer::buffers_of(const Tensor& p) const {
  std::vector<std::string> names = state_buffer_names_for(p);
  if (keeps_master(p)) names.push_back("master");
  return names;
}

std::vector<std::pair<std::string, Tensor>> LocalOptimizer::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& st = state_[i];
    if (!st.initialized()) continue;
    int64_t updates = st.step;
    if (st.step_count.defined()) updates = st.step_count.narrow(0, st.parity, 1).to(kCPU).to_vector<int64_t>()[0];
    if (updates == 0) continue;  // every update so far was skipped: the state is still the fresh one
    out.emplace_back(std::to_string(i) + ".step", scalar_tensor(double(updates), DType::i64));
    for (const auto& [name, buffer] : st.buffers) out.emplace_back(std::to_string(i) + "." + name, buffer);
  }
  return out;
}

void LocalOptimizer::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) {
  const std::string op = "[" + name_ + "] load_state_tensors:";
  std::vector<const Tensor*> params;
  for (const ParamGroup& g : groups_) {
    for (const Tensor& p : g.params) params.push_back(&p);
  }

  std::vector<ParamState> loaded(state_.size());
  std::vector<std::set<std::string>> present(state_.size());
  for (const auto& [key, value] : entries) {
    const size_t dot = key.find('.');
    size_t index = 0;
    const char* end = key.data() + (dot == std::string::npos ? key.size() : dot);
    const auto parsed = std::from_chars(key.data(), end, index);
    HG_CHECK(dot != std::string::npos && dot > 0 && parsed.ec == std::errc() && parsed.ptr == end, op, " entry '", key,
             "' is not named '{parameter index}.{state}'");
    const std::string what = key.substr(dot + 1);
    HG_CHECK(index < params.size(), op, " entry '", key, "' names parameter ", index, " but the optimizer has ",
             params.size(), " parameters");
    HG_CHECK(value.defined(), op, " entry '", key, "' is an undefined tensor");
    HG_CHECK(present[index].insert(what).second, op, " entry '", key, "' appears more than once");
    const Tensor& p = *params[index];
    if (what == "step") {
      HG_CHECK(value.numel() == 1, op, " entry '", key, "' is ", value.describe(),
               "; expected a one-element step count");
      const double step = value.item();
      HG_CHECK(step >= 1 && step == std::floor(step), op, " entry '", key, "' holds ", step,
               "; expected an integer step count >= 1");
      loaded[index].step = int64_t(step);
      continue;
    }
    const std::vector<std::string> buffer_names = buffers_of(p);
    bool known = false;
    for (const std::string& b : buffer_names) known = known || b == what;
    std::string expected = "step";
    for (const std::string& b : buffer_names) expected += ", " + b;
    HG_CHECK(known, op, " entry '", key, "' names unknown state '", what, "'; ", name_, " keeps for parameter ", index,
             ": ", expected);
    const auto [shape, dtype] =
        what == "master" ? std::pair<Shape, DType>{p.shape(), accumulate_dtype(p.dtype())} : state_buffer_layout(p, what);
    HG_CHECK(value.shape() == shape && value.dtype() == dtype && value.device() == p.device(), op, " entry '", key,
             "' is ", value.describe(), " but parameter ", index, " is ", p.describe(), "; expected ",
             dtype_name(dtype), shape_str(shape), " ", p.device().str());
    Tensor copy = empty(shape, dtype, p.device());
    {
      NoGradGuard no_grad;
      copy.copy_(value);
    }
    loaded[index].buffers[what] = copy;
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (present[i].empty()) continue;
    HG_CHECK(present[i].count("step"), op, " parameter ", i, " has state but no '", i, ".step'");
    for (const std::string& b : buffers_of(*params[i])) {
      HG_CHECK(present[i].count(b), op, " parameter ", i, " has state but no '", i, ".", b, "'");
    }
  }
  state_ = std::move(loaded);
}

}  // namespace hg::optim
