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

// Sets grad mode to `enabled` in its scope (hg::checkpoint turns it on to recompute inside backward).
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
};

class Node {
 public:
  explicit Node(std::string name, std::vector<Edge> edges) : name_(std::move(name)), edges_(std::move(edges)) {}
  virtual ~Node() = default;
  // Gradients with respect to each input (an undefined Tensor where none is needed).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Frees saved tensors once the node has run (unless the graph is retained).
  virtual void release() {}

  const std::string& name() const { return name_; }
  const std::vector<Edge>& edges() const { return edges_; }
  bool needs_input_grad(size_t i) const { return i < edges_.size() && edges_[i].node != nullptr; }

 private:
  std::string name_;
  std::vector<Edge> edges_;
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
