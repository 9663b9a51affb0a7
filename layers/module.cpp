#include "layers/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <typeinfo>
#include <map>

namespace hg::nn {

void Module::check_name(const std::string& name) const {
  HG_CHECK(!name.empty() && name.find('.') == std::string::npos, "[Module] invalid name \"", name,
           "\": expected a non-empty name without '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& entry) { return entry.first == name; });
  };
  HG_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), "[Module] the name \"", name,
           "\" is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor) {
  check_name(name);
  HG_CHECK(tensor.defined() && is_floating(tensor.dtype()), "[Module] parameter \"", name,
           "\" must be a floating tensor, got ", tensor.describe());
  if (!tensor.is_leaf()) tensor = tensor.detach();
  tensor.requires_grad_(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

void Module::set_forward_hooks(std::function<void()> pre, std::function<void()> post) {
  HG_CHECK(static_cast<bool>(pre) == static_cast<bool>(post), "[Module] set_forward_hooks: give both a pre and a post "
           "hook, or neither (to clear them)");
  pre_forward_ = std::move(pre);
  post_forward_ = std::move(post);
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(name);
  HG_CHECK(tensor.defined(), "[Module] buffer \"", name, "\" is undefined");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::collect(const std::string& prefix, bool parameters, NamedTensors& out,
                     std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, tensor] : parameters ? parameters_ : buffers_) {
    if (std::find(seen.begin(), seen.end(), tensor.impl()) != seen.end()) continue;
    seen.push_back(tensor.impl());
    out.emplace_back(prefix + name, tensor);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, out, seen);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", true, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", false, out, seen);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

EvalModeScope::EvalModeScope(Module& module) {
  std::vector<Module*> stack{&module};
  while (!stack.empty()) {
    Module* m = stack.back();
    stack.pop_back();
    recorded_.emplace_back(m, m->training_);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it) stack.push_back(it->second.get());
  }
  for (auto& [m, was_training] : recorded_) m->training_ = false;
}

EvalModeScope::~EvalModeScope() {
  for (auto& [m, was_training] : recorded_) m->training_ = was_training;
}

void assign_in_place(const Tensor& target, const Tensor& source) {
  TensorImpl& t = *target.impl();
  t.storage = source.storage();
  t.shape = source.shape();
  t.strides = source.strides();
  t.offset = source.offset();
  t.dtype = source.dtype();
  t.grad = nullptr;
}

void Module::to(DType dtype) {
  HG_CHECK(is_floating(dtype), "[Module::to] expected a floating dtype, got ", dtype_name(dtype));
  NoGradGuard no_grad;
  for (auto& [name, t] : state_dict())
    if (is_floating(t.dtype()) && t.dtype() != dtype) assign_in_place(t, t.to(dtype));
}

void Module::to(const Device& device) {
  NoGradGuard no_grad;
  for (auto& [name, t] : state_dict())
    if (t.device() != device) assign_in_place(t, t.to(device));
}

void Module::set_grad_dtype(DType dtype) {
  for (Tensor p : parameters()) p.set_grad_dtype(dtype);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(entry);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, tensor] : state) given[name] = &tensor;
  NoGradGuard no_grad;
  std::vector<std::string> missing;
  for (auto& [name, target] : state_dict()) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& source = *it->second;
    HG_CHECK(source.shape() == target.shape(), "[load_state_dict] \"", name, "\" has shape ",
             shape_str(source.shape()), " in the state but ", shape_str(target.shape()), " in the model");
    HG_CHECK(source.dtype() == target.dtype(), "[load_state_dict] \"", name, "\" is ", dtype_name(source.dtype()),
             " in the state but ", dtype_name(target.dtype()), " in the model; convert one with to(dtype)");
    target.copy_(source);
    given.erase(it);
  }
  if (!strict) return;
  if (!missing.empty()) {
    std::string names;
    for (const auto& n : missing) names += (names.empty() ? "" : ", ") + n;
    HG_FAIL("[load_state_dict] missing from the state: ", names);
  }
  if (!given.empty()) {
    std::string names;
    for (const auto& [n, t] : given) names += (names.empty() ? "" : ", ") + n;
    HG_FAIL("[load_state_dict] not in the model: ", names);
  }
}

// ---- anomaly-mode module stack ----

namespace {

thread_local std::vector<const Module*> t_modules;  // parallel to engine/anomaly.h's name stack

// "GPT" for hg::nn::GPT (the demangled class name without namespaces).
std::string class_name(const Module& module) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(typeid(module).name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : typeid(module).name();
  std::free(demangled);
  const size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

// The dotted path from `from` down to `target` through registered children, or "" if none.
bool find_path(const Module& from, const Module* target, std::string& path) {
  for (const auto& [name, child] : from.children()) {
    if (child.get() == target) {
      path = name;
      return true;
    }
    std::string rest;
    if (find_path(*child, target, rest)) {
      path = name + "." + rest;
      return true;
    }
  }
  return false;
}

}  // namespace

void ModuleScope::enter(const Module& module) {
  if (!t_modules.empty() && t_modules.back() == &module) return;  // GPT::loss calling GPT::forward
  std::string name;
  if (t_modules.empty() || !find_path(*t_modules.back(), &module, name)) name = class_name(module);
  t_modules.push_back(&module);
  anomaly::push_module(std::move(name));
  entered_ = true;
}

void ModuleScope::leave() {
  t_modules.pop_back();
  anomaly::pop_module();
}

}  // namespace hg::nn
