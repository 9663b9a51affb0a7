#include "layers/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <typeinfo>

#include "engine/safetensors.h"

namespace hg::nn {

// "GPT" for hg::nn::GPT (the demangled class name without namespaces).
std::string Module::type_name() const {
  int status = 0;
  char* demangled = abi::__cxa_demangle(typeid(*this).name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : typeid(*this).name();
  std::free(demangled);
  const size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

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
                     std::vector<const TensorImpl*>* seen) const {
  for (const auto& [name, tensor] : parameters ? parameters_ : buffers_) {
    if (seen != nullptr) {
      if (std::find(seen->begin(), seen->end(), tensor.impl()) != seen->end()) continue;
      seen->push_back(tensor.impl());
    }
    out.emplace_back(prefix + name, tensor);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, out, seen);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  collect("", true, out, &seen);
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
  collect("", false, out, &seen);
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

namespace {
std::string joined(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : separator) + part;
  return out;
}
}  // namespace

namespace {

// Whether two tensors of one shape and dtype hold the same bytes.
bool same_values(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(kCPU).contiguous(), y = b.to(kCPU).contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * dtype_size(x.dtype())) == 0;
}

}  // namespace

Module::LoadReport Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, tensor] : state) {
    HG_CHECK(given.emplace(name, &tensor).second, "[load_state_dict] the state names \"", name, "\" twice");
    HG_CHECK(tensor.defined(), "[load_state_dict] \"", name, "\" is an undefined tensor in the state");
  }
  // Each tensor of the model under every name it has, in state_dict() order: a tied tensor (registered
  // twice) loads from whichever of its names the state holds. PyTorch's state_dict lists every name; a
  // deduplicated file (safetensors' save_model) one of them.
  NamedTensors every_name;
  collect("", true, every_name, nullptr);
  collect("", false, every_name, nullptr);
  std::vector<std::pair<Tensor, std::vector<std::string>>> targets;
  std::map<const TensorImpl*, size_t> target_of;
  for (const auto& [name, tensor] : every_name) {
    const auto [it, fresh] = target_of.emplace(tensor.impl(), targets.size());
    if (fresh) targets.push_back({tensor, {}});
    targets[it->second].second.push_back(name);
  }
  LoadReport report;
  std::vector<std::string> mismatched;
  std::vector<std::pair<Tensor, const Tensor*>> copies;  // (model tensor, its value), once all is checked
  for (const auto& [target, names] : targets) {
    const Tensor* source = nullptr;
    std::string source_name;
    bool named = false;  // the state holds one of its names
    for (const std::string& name : names) {
      auto it = given.find(name);
      if (it == given.end()) continue;
      named = true;
      const Tensor& value = *it->second;
      given.erase(it);
      if (value.shape() != target.shape()) {
        mismatched.push_back(detail::concat("\"", name, "\" has shape ", shape_str(value.shape()), " in the state but ",
                                            shape_str(target.shape()), " in the model"));
      } else if (value.dtype() != target.dtype()) {
        mismatched.push_back(detail::concat("\"", name, "\" is ", dtype_name(value.dtype()), " in the state but ",
                                            dtype_name(target.dtype()), " in the model; convert one with to(dtype)"));
      } else if (source == nullptr) {
        source = &value;
        source_name = name;
      } else if (!same_values(*source, value)) {
        mismatched.push_back(
            detail::concat("\"", source_name, "\" and \"", name,
                           "\" are one tied tensor in the model but hold different values in the state"));
      }
    }
    if (source != nullptr) {
      copies.emplace_back(target, source);
    } else if (!named) {
      report.missing.push_back(names.front());
    }
  }
  for (const auto& [name, tensor] : given) report.unexpected.push_back(name);
  HG_INPUT_CHECK(mismatched.empty(), "[load_state_dict] ", joined(mismatched, "; "));
  if (strict && !(report.missing.empty() && report.unexpected.empty())) {
    std::vector<std::string> parts;
    if (!report.missing.empty()) parts.push_back("missing from the state: " + joined(report.missing, ", "));
    if (!report.unexpected.empty()) parts.push_back("not in the model: " + joined(report.unexpected, ", "));
    HG_INPUT_FAIL("[load_state_dict] ", joined(parts, "; "), " (strict; load with strict = false to skip them)");
  }
  NoGradGuard no_grad;
  for (auto& [target, source] : copies)
    target.copy_(source->device() == target.device() ? *source : source->to(target.device()));
  return report;
}

Module::LoadReport Module::load_state_dict(const std::string& path, bool strict) {
  const safetensors::File file = safetensors::load(path);
  try {
    return load_state_dict(file.tensors, strict);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

// ---- the tree ----

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  std::vector<std::pair<std::string, Module*>> stack{{"", this}};
  while (!stack.empty()) {
    auto [path, module] = stack.back();
    stack.pop_back();
    const bool seen = std::any_of(out.begin(), out.end(), [&](const auto& entry) { return entry.second == module; });
    if (seen) continue;
    out.emplace_back(path, module);
    for (auto it = module->children_.rbegin(); it != module->children_.rend(); ++it)
      stack.emplace_back(path.empty() ? it->first : path + "." + it->first, it->second.get());
  }
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (auto& [path, module] : named_modules()) out.push_back(module);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->apply(fn);
  fn(*this);
  return *this;
}

void Module::freeze() {
  for (Tensor p : parameters()) {
    p.set_grad(Tensor());
    p.requires_grad_(false);
  }
}

void Module::unfreeze() {
  for (Tensor p : parameters()) p.requires_grad_(true);
}

int64_t Module::trainable_parameter_count() const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (p.requires_grad()) n += p.numel();
  return n;
}

// ---- the module stack: anomaly mode's names and errors' context ----

namespace {

thread_local std::vector<const Module*> t_modules;  // the forwards running on this thread, outermost first

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

// kernels/error.h's error_context: "(in encoder.layers.0 (TransformerEncoderLayer) of Seq2Seq)" when a
// forward runs, "(in LSTM)" at the top, "" outside every module. A module its caller does not own (called
// from outside the tree) is named by its class after " > ".
std::string module_error_context() {
  if (t_modules.empty()) return "";
  const Module& innermost = *t_modules.back();
  if (t_modules.size() == 1) return "(in " + innermost.type_name() + ")";
  std::string path;
  for (size_t i = 1; i < t_modules.size(); ++i) {
    std::string step;
    if (find_path(*t_modules[i - 1], t_modules[i], step)) {
      path += (path.empty() ? "" : ".") + step;
    } else {
      path += (path.empty() ? "" : " > ") + t_modules[i]->type_name();
    }
  }
  return "(in " + path + " (" + innermost.type_name() + ") of " + t_modules.front()->type_name() + ")";
}

[[maybe_unused]] const bool kErrorContextInstalled = [] {
  detail::error_context = &module_error_context;
  return true;
}();

}  // namespace

void ModuleScope::enter(const Module& module) {
  if (!t_modules.empty() && t_modules.back() == &module) return;  // GPT::loss calling GPT::forward
  if (detect_anomaly_enabled()) {
    std::string name;
    if (t_modules.empty() || !find_path(*t_modules.back(), &module, name)) name = module.type_name();
    anomaly::push_module(std::move(name));
    named_ = true;
  }
  t_modules.push_back(&module);
  entered_ = true;
}

void ModuleScope::leave() {
  t_modules.pop_back();
  if (named_) anomaly::pop_module();
}

}  // namespace hg::nn
