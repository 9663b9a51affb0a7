#pragma once
// Reverse-mode automatic differentiation over a dynamic graph.
//
// Each differentiable op, after computing its output, calls record_op() with its inputs and a
// backward function written next to the forward (engine/ops/*.cpp). The graph is a DAG of Nodes:
// a node's edges point at the nodes that produced its inputs (or at a leaf's AccumulateGrad).
// backward() counts, for every node reachable from the root, how many consumers will send it a
// gradient, then runs nodes in an order where each node runs only once all of its consumers have
// contributed (a topological order of the reversed graph), summing the contributions. Backward
// functions run with grad mode off: they compose engine ops on saved (detached) tensors.
//
// MULTI-OUTPUT NODES (record_op_multi; PyTorch's shape): an op may produce several tensors from one
// node (add_layer_norm gives the sum and its LayerNorm). Each output tensor remembers which output of
// its grad_fn it is (TensorImpl::output_nr); an Edge names the producing node AND that output index.
// run_backward keeps, per node, one received-gradient slot per output and sums the contributions
// slot by slot; the node runs once every consumer of every output has reported, and its backward gets
// one gradient per output -- undefined for an output nobody used (or whose consumers sent nothing).
//
// CONVENTION
//   - Saved tensors are captured detached (no grad_fn), so a node never owns itself through its
//     own output (no reference cycles).
//   - After a node runs, its backward function and saved tensors are released unless
//     retain_graph; running it again is a clear error.
//   - Gradients reaching a leaf are summed into leaf.grad() (a second backward adds).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace hg {

// Whether ops record the graph in this thread (on by default).
bool grad_mode_enabled();

// Turns graph recording off in its scope (inference, optimizer updates, backward itself).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Sets grad mode to `enabled` in its scope (hg::recompute turns it on to recompute inside backward).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled);
  ~GradModeGuard();
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

class Node;
struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t output_nr = 0;      // which output of `node` the input was
};

class Node {
 public:
  Node(std::string name, std::vector<Edge> edges, uint32_t num_outputs = 1)
      : name_(std::move(name)), edges_(std::move(edges)), num_outputs_(num_outputs) {}
  virtual ~Node() = default;
  // Gradients with respect to each input (an undefined Tensor where none is needed), given one
  // gradient per output (grad_outputs.size() == num_outputs(); undefined where none arrived).
  virtual std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) = 0;
  // Frees saved tensors once the node has run (unless the graph is retained).
  virtual void release() {}

  const std::string& name() const { return name_; }
  const std::vector<Edge>& edges() const { return edges_; }
  uint32_t num_outputs() const { return num_outputs_; }
  bool needs_input_grad(size_t i) const { return i < edges_.size() && edges_[i].node != nullptr; }

 private:
  std::string name_;
  std::vector<Edge> edges_;
  uint32_t num_outputs_;
};

// needs[i]: whether input i wants a gradient; a backward function may skip the others.
using NeedsGrad = std::vector<bool>;
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, const NeedsGrad& needs)>;

// True when grad mode is on and any input requires grad: the op should record itself.
bool should_record(std::initializer_list<const Tensor*> inputs);
bool should_record(const std::vector<Tensor>& inputs);

// Makes `output` the result of op `name` over `inputs` in the graph, differentiated by `backward`.
// Call only when should_record() said so.
void record_op(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward);

// An op with several outputs: grad_outputs[k] is the gradient of outputs[k], undefined when no
// consumer of that output sent one (at least one is defined whenever the function runs). Returns one
// gradient per input, as BackwardFn.
using MultiBackwardFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs, const NeedsGrad& needs)>;

// Makes outputs[k] output k of one node of op `name` over `inputs`, differentiated by `backward`.
// The outputs must be distinct tensors (distinct TensorImpls). Call only when should_record() said so.
void record_op_multi(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor*>& outputs,
                     MultiBackwardFn backward);

// Registers `hook` to run each time a backward has finished summing a gradient into leaf.grad()
// (once per backward, after every contribution to the leaf arrived). Data-parallel training starts
// communicating a gradient from here while the rest of the backward runs (dist/). Hooks run in
// registration order, in grad mode off. Returns a handle for remove_post_accumulate_grad_hook (which
// removes that hook only); clear_post_accumulate_grad_hooks removes them all.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void()> hook);
void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle);
void clear_post_accumulate_grad_hooks(const Tensor& leaf);

// Runs backward from `root` seeded with `grad_root` (same shape as root).
void run_backward(const Tensor& root, const Tensor& grad_root, bool retain_graph);

// Whether this thread is inside run_backward (a checkpointed region recomputing its forward is).
bool backward_in_progress();

}  // namespace hg
