// Optimizer: parameter groups, per-parameter state, the step loop and state (de)serialisation.
// The update rule itself is the subclass's (optim/sgd.cpp, optim/adamw.cpp).
#include "optim/optimizer.h"

#include <charconv>
#include <cmath>
#include <set>
#include <unordered_set>

namespace hg::optim {

Optimizer::Optimizer(std::string name) : name_(std::move(name)) {}

void Optimizer::check_lr(double lr) const {
  HG_CHECK(std::isfinite(lr) && lr >= 0.0, "[", name_, "] invalid learning rate ", lr, ": expected lr >= 0");
}

void Optimizer::check_weight_decay(double weight_decay) const {
  HG_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0, "[", name_, "] invalid weight_decay ", weight_decay,
           ": expected weight_decay >= 0");
}

void Optimizer::check_param(const Tensor& p, size_t group, size_t index_in_group) const {
  HG_CHECK(p.defined(), "[", name_, "] parameter ", index_in_group, " of group ", group, " is an undefined tensor");
  const std::string where =
      detail::concat("[", name_, "] parameter ", index_in_group, " of group ", group, " (", p.describe(), ")");
  HG_CHECK(is_floating(p.dtype()), where, " is not floating; expected a f32, f64, f16 or bf16 tensor");
  HG_CHECK(p.is_leaf(), where, " is not a leaf: it is the output of '", p.grad_fn()->name(),
           "'; pass the leaf tensor it was computed from");
  HG_CHECK(p.requires_grad(), where, " does not require grad; call requires_grad_() on it or leave it out");
  HG_CHECK(p.is_contiguous(), where,
           " is not contiguous; parameters are updated in place and must be contiguous (make the leaf from a "
           "contiguous() copy)");
}

void Optimizer::init_groups(std::vector<ParamGroup> groups) {
  size_t total = 0;
  for (const ParamGroup& g : groups) total += g.params.size();
  HG_CHECK(total > 0, "[", name_, "] got an empty parameter list; expected at least one parameter");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t g = groups_.size();
  check_lr(group.lr);
  check_weight_decay(group.weight_decay);
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
  groups_.push_back(std::move(group));
}

void Optimizer::set_lr(double lr) {
  check_lr(lr);
  for (ParamGroup& g : groups_) g.lr = lr;
}

void Optimizer::set_lr(size_t group, double lr) {
  HG_CHECK(group < groups_.size(), "[", name_, "] set_lr: group ", group, " out of range (the optimizer has ",
           groups_.size(), " groups)");
  check_lr(lr);
  groups_[group].lr = lr;
}

const ParamState& Optimizer::state(int64_t index) const {
  HG_CHECK(index >= 0 && index < num_params(), "[", name_, "] state: parameter index ", index,
           " out of range (the optimizer has ", num_params(), " parameters)");
  return state_[size_t(index)];
}

void Optimizer::zero_grad(bool set_to_none) {
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

void Optimizer::step() {
  NoGradGuard no_grad;
  size_t index = 0;
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      ParamState& st = state_[index++];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      HG_CHECK(grad.shape() == p.shape() && grad.dtype() == p.dtype() && grad.device() == p.device(), "[", name_,
               "] parameter ", index - 1, " is ", p.describe(), " but its gradient is ", grad.describe(),
               "; expected the same shape, dtype and device");
      if (!grad.is_contiguous()) grad = grad.contiguous();
      ++st.step;
      update(group, p, grad, st);
    }
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& st = state_[i];
    if (!st.initialized()) continue;
    out.emplace_back(std::to_string(i) + ".step", scalar_tensor(double(st.step), DType::i64));
    for (const auto& [name, buffer] : st.buffers) out.emplace_back(std::to_string(i) + "." + name, buffer);
  }
  return out;
}

void Optimizer::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) {
  const std::string op = "[" + name_ + "] load_state_tensors:";
  const std::vector<std::string> buffer_names = state_buffer_names();
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
    bool known = false;
    for (const std::string& b : buffer_names) known = known || b == what;
    std::string expected = "step";
    for (const std::string& b : buffer_names) expected += ", " + b;
    HG_CHECK(known, op, " entry '", key, "' names unknown state '", what, "'; ", name_, " keeps: ", expected);
    const DType dtype = state_dtype(p);
    HG_CHECK(value.shape() == p.shape() && value.dtype() == dtype && value.device() == p.device(), op, " entry '", key,
             "' is ", value.describe(), " but parameter ", index, " is ", p.describe(), "; expected ",
             dtype_name(dtype), shape_str(p.shape()), " ", p.device().str());
    Tensor copy = empty(p.shape(), dtype, p.device());
    {
      NoGradGuard no_grad;
      copy.copy_(value);
    }
    loaded[index].buffers[what] = copy;
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (present[i].empty()) continue;
    HG_CHECK(present[i].count("step"), op, " parameter ", i, " has state but no '", i, ".step'");
    for (const std::string& b : buffer_names) {
      HG_CHECK(present[i].count(b), op, " parameter ", i, " has state but no '", i, ".", b, "'");
    }
  }
  state_ = std::move(loaded);
}

}  // namespace hg::optim
