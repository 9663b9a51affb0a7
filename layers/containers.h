#pragma once
// The containers beside Sequential (layers/basic.h): ModuleList and ModuleDict hold submodules without
// calling them (the owner's forward decides how), and Functional makes a function a module, so that it
// can sit in a Sequential. Each registers what it holds as its children, so their parameters, buffers
// and state-dict names ("layers.0.weight", "heads.cls.bias") are the owner's, as in PyTorch.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"

namespace hg::nn {

// Submodules by position, named "0", "1", ... (torch.nn.ModuleList).
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  // Appends `module` (PyTorch's append).
  ModuleList& push_back(std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // The module at `index`; an index past the end is an error naming the size.
  const std::shared_ptr<Module>& operator[](size_t index) const;
  // The module at `index` as an M; an error when it is another class.
  template <class M>
  std::shared_ptr<M> at(size_t index) const {
    return checked_cast<M>((*this)[index], std::to_string(index));
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  template <class M>
  static std::shared_ptr<M> checked_cast(const std::shared_ptr<Module>& module, const std::string& key) {
    auto typed = std::dynamic_pointer_cast<M>(module);
    HG_CHECK(typed != nullptr, "[", module->type_name(), "] entry \"", key, "\" is a ", module->type_name(),
             ", not the requested class");
    return typed;
  }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Submodules by name, in insertion order (torch.nn.ModuleDict). Keys follow registration's rule: not
// empty, no '.'.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules);
  // Adds `module` under `key`; a key already present is an error.
  ModuleDict& insert(const std::string& key, std::shared_ptr<Module> module);
  size_t size() const { return children().size(); }
  bool contains(const std::string& key) const;
  // The module under `key`; a missing key is an error that lists the keys.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <class M>
  std::shared_ptr<M> at(const std::string& key) const {
    return ModuleList::checked_cast<M>((*this)[key], key);
  }
  std::vector<std::string> keys() const;
};

// A function as a one-input module with no parameters (libtorch's torch::nn::Functional), e.g.
// Functional([](const Tensor& x) { return leaky_relu(x, 0.2); }, "LeakyReLU(0.2)"). `description` is
// what the module prints.
class Functional : public UnaryModule {
 public:
  explicit Functional(std::function<Tensor(const Tensor&)> function, std::string description = "");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return description_; }

 private:
  std::function<Tensor(const Tensor&)> function_;
  std::string description_;
};

}  // namespace hg::nn
