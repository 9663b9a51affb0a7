#include "layers/containers.h"

#include <algorithm>

namespace hg::nn {

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& module : modules) push_back(std::move(module));
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> module) {
  HG_CHECK(module != nullptr, "[ModuleList] cannot add a null module (entry ", modules_.size(), ")");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t index) const {
  HG_CHECK(index < modules_.size(), "[ModuleList] index ", index, " is out of range: the list holds ", modules_.size(),
           " modules");
  return modules_[index];
}

ModuleDict::ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (auto& [key, module] : modules) insert(key, std::move(module));
}

ModuleDict& ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  HG_CHECK(module != nullptr, "[ModuleDict] cannot add a null module under \"", key, "\"");
  HG_CHECK(!contains(key), "[ModuleDict] the key \"", key, "\" is already present");
  register_module(key, std::move(module));
  return *this;
}

bool ModuleDict::contains(const std::string& key) const {
  const auto& held = children();
  return std::any_of(held.begin(), held.end(), [&](const auto& entry) { return entry.first == key; });
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [name, module] : children())
    if (name == key) return module;
  std::string known;
  for (const std::string& k : keys()) known += (known.empty() ? "" : ", ") + k;
  HG_FAIL("[ModuleDict] no module under \"", key, "\"; the keys are: ", known.empty() ? "(none)" : known);
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, module] : children()) out.push_back(name);
  return out;
}

Functional::Functional(std::function<Tensor(const Tensor&)> function, std::string description)
    : function_(std::move(function)), description_(std::move(description)) {
  HG_CHECK(static_cast<bool>(function_), "[Functional] expected a function, got an empty one");
}

Tensor Functional::forward(const Tensor& x) {
  ModuleScope scope(*this);
  return function_(x);
}

}  // namespace hg::nn
