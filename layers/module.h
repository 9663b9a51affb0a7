#pragma once
// Module: a node in a tree of layers that owns named parameters and buffers.
//
// CONVENTION
//   - Names are hierarchical, joined with '.': a child registered as "attn" with a parameter
//     "weight" contributes "attn.weight" (GPT: "h.0.attn.c_attn.weight").
//   - A parameter is a leaf tensor with requires_grad; a buffer is state that is saved but not
//     trained. A tensor registered twice (tied weights) is listed once, under its first name.
//   - to(dtype) / to(device) and load_state_dict change tensors in place (the TensorImpl every
//     handle points to is updated), so layers keep using their members and optimizers built later
//     see the new tensors. Build the optimizer after converting the model.
//   - A frozen parameter (freeze()) is still a parameter (listed, saved, loaded, converted) whose
//     requires_grad is off: backward gives it no gradient, and an optimizer over it skips it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/anomaly.h"
#include "engine/ops.h"

namespace hg::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- building (what a layer's constructor calls; public so that a model can be assembled from outside) ----
  // Registers `tensor` as parameter `name` (a floating leaf; made to require grad) and returns it.
  Tensor register_parameter(const std::string& name, Tensor tensor);
  // Registers state that is saved and converted but not trained (BatchNorm's running statistics).
  Tensor register_buffer(const std::string& name, Tensor tensor);
  // Registers `module` as child `name` and returns it (typed, for the caller's member).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    check_name(name);
    HG_CHECK(module != nullptr, "[Module] register_module: child \"", name, "\" is a null pointer");
    children_.emplace_back(name, module);
    return module;
  }

  // ---- traversal (recursive, in registration order) ----
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  int64_t parameter_count() const;
  // Every module of the tree, this one first ("" names it), then depth-first in registration order
  // ("features", "features.0", ...); a module registered twice is listed once, under its first path.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // fn(m) for every module of the tree, each child's subtree before its parent (PyTorch's order):
  // model.apply([](nn::Module& m) { if (auto* l = dynamic_cast<nn::Linear*>(&m)) init::constant_(l->bias, 0.0); }).
  Module& apply(const std::function<void(Module&)>& fn);

  // ---- freezing ----
  // Stops training every parameter of this subtree: requires_grad off and the gradient dropped (unfreeze
  // turns requires_grad back on). Call it before backward; an optimizer skips a parameter without a
  // gradient, so one built over the whole model trains the rest.
  void freeze();
  void unfreeze();
  int64_t trainable_parameter_count() const;

  // ---- printing ----
  // The class name as printed ("Linear").
  std::string type_name() const;
  // The constructor arguments as PyTorch's extra_repr prints them ("in_features=4, out_features=8,
  // bias=True"); "" for a module that has none.
  virtual std::string extra_repr() const { return ""; }
  // The tree as PyTorch's repr prints it, each line followed by "# " and the shapes of the module's own
  // parameters ("(frozen)" after a frozen one) and the parameter count of its subtree; the top line
  // counts the whole model (a tied parameter once) and says how many are trainable.
  std::string repr() const;

  // ---- mode, dtype, device ----
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Casts every floating parameter and buffer in place; gradients are dropped.
  void to(DType dtype);
  void to(const Device& device);
  void zero_grad();
  // The dtype every parameter's gradient accumulates in (Tensor::set_grad_dtype): f32 keeps fp32
  // gradient buffers for a half model. Gradients must be cleared first.
  void set_grad_dtype(DType dtype);

  // ---- state ----
  // Parameters then buffers, by full name.
  NamedTensors state_dict() const;
  // What load_state_dict did not load: the model's names the state lacks, and the state's names the
  // model lacks (PyTorch's missing_keys and unexpected_keys).
  struct LoadReport {
    std::vector<std::string> missing, unexpected;
  };
  // Copies values in by name, checked before anything changes. A shape or dtype that differs is an
  // error (one message listing every such tensor with both shapes or dtypes); with strict, missing and
  // unexpected names are errors too (listed), otherwise they are returned. A tied tensor loads from any
  // of its names (PyTorch's state dicts list them all); names of one tied tensor that hold different
  // values are an error.
  LoadReport load_state_dict(const NamedTensors& state, bool strict = true);
  // load_state_dict from a safetensors file (PyTorch's names, as safetensors.torch.save_file writes them
  // from model.state_dict()); errors name the file.
  LoadReport load_state_dict(const std::string& path, bool strict = true);

  // ---- forward hooks ----
  // `pre` runs when a forward of this module begins and `post` when it ends (returning or throwing),
  // through the ModuleScope its forward opens first thing; a nested scope of the same module (GPT::loss
  // calling GPT::forward) runs them again. ZeRO stage 3 gathers the module's parameters in `pre` and
  // releases them in `post`. `post` runs in a destructor: it must not throw.
  void set_forward_hooks(std::function<void()> pre, std::function<void()> post);
  void clear_forward_hooks() { set_forward_hooks(nullptr, nullptr); }
  bool has_forward_hooks() const { return static_cast<bool>(pre_forward_); }
  void run_pre_forward() const { pre_forward_(); }
  void run_post_forward() const noexcept {
    if (post_forward_) post_forward_();
  }

 private:
  void check_name(const std::string& name) const;
  // Appends this subtree's parameters (or buffers) with their full names; a tensor already in `seen` is
  // skipped (and each one added to it), or, with seen null, listed under every name it has.
  void collect(const std::string& prefix, bool parameters, NamedTensors& out,
               std::vector<const TensorImpl*>* seen) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::function<void()> pre_forward_, post_forward_;
  friend class EvalModeScope;
};

// A module with one input and one output, so it can sit in a Sequential.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// Opened first thing by a layer's forward: runs the module's forward hooks around the forward, and puts
// `module` on this thread's module stack for its scope. The stack names where an error was raised: every
// hg::Error thrown inside the forward ends with the module's path, "(in encoder.layers.0.self_attn
// (MultiheadAttention) of Seq2Seq)" (kernels/error.h error_context; the path is resolved only when an
// error is made). In anomaly mode the module is also named on engine/anomaly.h's stack. The name is the
// module's registered name under the module that called it (the path through the tree, "h.0" when GPT
// runs its block 0), or its class name at the top of the stack. Off anomaly mode and without hooks it
// costs a push and a pop of one pointer.
class ModuleScope {
 public:
  explicit ModuleScope(const Module& module) {
    if (module.has_forward_hooks()) {
      module.run_pre_forward();
      hooked_ = &module;
    }
    enter(module);
  }
  ~ModuleScope() {
    if (entered_) leave();
    if (hooked_) hooked_->run_post_forward();
  }
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  void enter(const Module& module);
  void leave();
  bool entered_ = false, named_ = false;  // on the module stack; on anomaly mode's too
  const Module* hooked_ = nullptr;
};

// Eval mode for a scope (inference inside a training run: generation, the cached forward): records the
// training flag of `module` and of every module below it, puts the whole tree in eval mode, and at the
// end (returning or throwing) gives each module back exactly its own recorded flag -- a child left in
// eval under a training parent stays in eval. Nested scopes restore in reverse order.
class EvalModeScope {
 public:
  explicit EvalModeScope(Module& module);
  ~EvalModeScope();
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  std::vector<std::pair<Module*, bool>> recorded_;  // every module of the tree, pre-order, and its flag
};

// A double as Python's repr prints it (0.1, 1e-05, 1.0: the shortest form that reads back), and a
// bool as "True" / "False": what extra_repr needs to print like PyTorch.
std::string repr_float(double value);
inline const char* repr_bool(bool value) { return value ? "True" : "False"; }
// "(4, 5)" or "(5,)": a shape as Python prints a tuple.
std::string tuple_repr(const Shape& shape);

// Replaces the contents of `target` (every handle to it) with `source`'s storage, layout and dtype.
void assign_in_place(const Tensor& target, const Tensor& source);

}  // namespace hg::nn
