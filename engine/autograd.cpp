#include "engine/autograd.h"

#include <algorithm>
#include <atomic>

#include <unordered_map>

#include "engine/anomaly.h"
#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "engine/profiler/profiler.h"

namespace hg {

namespace {

thread_local bool t_grad_mode = true;
thread_local int t_backward_depth = 0;

// A function node: the backward written next to an op's forward. One output (BackwardFn, given
// grad_outputs[0]) or several (MultiBackwardFn, given them all).
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, std::vector<Edge> edges, BackwardFn backward, MultiBackwardFn multi_backward,
               uint32_t num_outputs, std::vector<Shape> input_shapes, std::vector<DType> input_dtypes)
      : Node(name, std::move(edges), num_outputs),
        backward_(std::move(backward)),
        multi_backward_(std::move(multi_backward)),
        input_shapes_(std::move(input_shapes)),
        input_dtypes_(std::move(input_dtypes)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    HG_CHECK(backward_ != nullptr || multi_backward_ != nullptr, "[backward] trying to backward through the graph a "
             "second time: the saved tensors of '", name(), "' were freed by the first backward; call "
             "backward(grad, retain_graph=true) the first time if you need to");
    NeedsGrad needs(edges().size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = needs_input_grad(i);
    std::vector<Tensor> grads = multi_backward_ ? multi_backward_(grad_outputs, needs) : backward_(grad_outputs[0], needs);
    HG_CHECK(grads.size() == edges().size(), "[backward] '", name(), "' returned ", grads.size(),
             " gradients for ", edges().size(), " inputs");
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!needs[i] || !grads[i].defined()) continue;
      HG_CHECK(grads[i].shape() == input_shapes_[i], "[backward] '", name(), "' produced a gradient of shape ",
               shape_str(grads[i].shape()), " for input ", i, " of shape ", shape_str(input_shapes_[i]));
      if (grads[i].dtype() != input_dtypes_[i]) grads[i] = grads[i].to(input_dtypes_[i]);
    }
    if (detect_anomaly_enabled()) anomaly::check_backward(name(), recorded_in, grads, input_shapes_, grad_outputs);
    return grads;
  }

  void release() override {
    backward_ = nullptr;
    multi_backward_ = nullptr;
  }

  std::string recorded_in;  // the module stack at record time (anomaly mode only)

 private:
  BackwardFn backward_;
  MultiBackwardFn multi_backward_;
  std::vector<Shape> input_shapes_;
  std::vector<DType> input_dtypes_;
};

// True when `t` (held through `refs` references, the caller's among them) is the only way to reach
// its bytes, so it can become a leaf's .grad without a copy: no other tensor or view shares its
// impl or its storage, the storage is an ordinary allocator block of exactly its bytes (not memory
// owned elsewhere, not lent out by ZeRO-3 or offload), it is contiguous from offset 0, and it has
// no autograd state of its own.
bool sole_owner_of_bytes(const Tensor& t, long refs) {
  const TensorImpl& impl = *t.impl();
  const Storage& storage = *impl.storage;
  return t.impl_ptr().use_count() == refs && impl.storage.use_count() == 1 && storage.from_allocator() &&
         storage.ready() && !storage.released() && impl.offset == 0 && t.is_contiguous() &&
         storage.nbytes() == size_t(t.numel()) * dtype_size(impl.dtype) && !impl.requires_grad && !impl.grad_fn &&
         !impl.grad && impl.post_accumulate_grad_hooks.empty();
}

// True when `g` can be added into `acc` (a leaf's .grad) in place by kernels::accumulate: same device
// and dtype, both contiguous, neither with autograd state (a create_graph backward sums through
// differentiable ops instead), and g's bytes either are acc's own or do not overlap them.
bool accumulates_in_place(const Tensor& acc, const Tensor& g) {
  if (acc.device() != g.device() || acc.dtype() != g.dtype() || !acc.is_contiguous() || !g.is_contiguous() ||
      acc.requires_grad() || g.requires_grad() || acc.grad_fn() || g.grad_fn())
    return false;
  if (acc.storage() != g.storage()) return true;
  const int64_t bytes = acc.numel() * int64_t(dtype_size(acc.dtype()));
  const auto* a = static_cast<const char*>(acc.data_ptr());
  const auto* b = static_cast<const char*>(g.data_ptr());
  return a == b || a + bytes <= b || b + bytes <= a;
}

// The sink for a leaf: sums incoming gradients into leaf.grad().
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad", {}), leaf_(std::move(leaf)) {}

  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) override {
    const Tensor& grad_output = grad_outputs[0];
    Tensor leaf(leaf_);
    const DType dtype = leaf.grad_dtype();
    // References to the incoming gradient's impl beside the engine's slot: `g` below when it is the
    // same tensor (a converted one is a new tensor that only `g` holds).
    const bool converted = grad_output.dtype() != dtype;
    Tensor g = converted ? grad_output.to(dtype) : grad_output;
    HG_CHECK(g.shape() == leaf_->shape, "[backward] gradient of shape ", shape_str(g.shape()),
             " reached a leaf of shape ", shape_str(leaf_->shape));
    if (leaf_->grad == nullptr) {
      // The first gradient becomes .grad. It is adopted when nothing else can see its bytes (a
      // weight gradient fresh from its GEMM: the usual case, no copy); otherwise copied, since it
      // may alias another tensor's memory (a view, a gradient handed to two inputs, the caller's).
      leaf_->grad = sole_owner_of_bytes(g, converted ? 1 : 2) ? g.impl_ptr() : g.clone().impl_ptr();
    } else {
      // Later gradients (gradient accumulation, a .grad kept from an earlier backward) are added in
      // place: one pass reading both and writing .grad, where add-then-copy_ allocated a gradient-sized
      // temporary and passed over it twice more; the same bits.
      Tensor acc(leaf_->grad);
      if (accumulates_in_place(acc, g)) {
        HG_KERNEL(acc.device(), accumulate, acc.data_ptr(), g.data_ptr(), acc.numel(), acc.dtype());
      } else {
        acc.copy_(add(acc, g));
      }
    }
    for (const auto& [handle, hook] : leaf_->post_accumulate_grad_hooks) hook();
    return {};
  }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  if (auto existing = impl->grad_accumulator.lock()) return existing;
  auto node = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
  impl->grad_accumulator = node;
  return node;
}

Edge edge_for(const Tensor& input) {
  if (!input.defined() || !input.requires_grad()) return Edge{};
  if (input.grad_fn()) return Edge{input.grad_fn(), input.impl()->output_nr};
  return Edge{grad_accumulator(input), 0};
}

}  // namespace

bool grad_mode_enabled() { return t_grad_mode; }
bool backward_in_progress() { return t_backward_depth > 0; }

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, std::function<void()> hook) {
  HG_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(), "[register_post_accumulate_grad_hook] expected "
           "a leaf tensor that requires grad, got ", leaf.defined() ? leaf.describe() : std::string("an undefined tensor"));
  static std::atomic<uint64_t> next_handle{1};
  const uint64_t handle = next_handle++;
  leaf.impl()->post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle) {
  if (!leaf.defined()) return;
  auto& hooks = leaf.impl()->post_accumulate_grad_hooks;
  hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](const auto& h) { return h.first == handle; }),
              hooks.end());
}

void clear_post_accumulate_grad_hooks(const Tensor& leaf) {
  if (leaf.defined()) leaf.impl()->post_accumulate_grad_hooks.clear();
}

NoGradGuard::NoGradGuard() : previous_(t_grad_mode) { t_grad_mode = false; }
NoGradGuard::~NoGradGuard() { t_grad_mode = previous_; }

GradModeGuard::GradModeGuard(bool enabled) : previous_(t_grad_mode) { t_grad_mode = enabled; }
GradModeGuard::~GradModeGuard() { t_grad_mode = previous_; }

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool should_record(const std::vector<Tensor>& inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {

// The node of op `name` over `inputs` (its edges, and the inputs' shapes and dtypes for the checks).
std::shared_ptr<FunctionNode> make_function_node(const char* name, const std::vector<Tensor>& inputs,
                                                 BackwardFn backward, MultiBackwardFn multi_backward,
                                                 uint32_t num_outputs) {
  std::vector<Edge> edges;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  edges.reserve(inputs.size());
  for (const Tensor& input : inputs) {
    edges.push_back(edge_for(input));
    shapes.push_back(input.defined() ? input.shape() : Shape{});
    dtypes.push_back(input.defined() ? input.dtype() : DType::f32);
  }
  return std::make_shared<FunctionNode>(name, std::move(edges), std::move(backward), std::move(multi_backward),
                                        num_outputs, std::move(shapes), std::move(dtypes));
}

void attach(const std::shared_ptr<Node>& node, Tensor& output, uint32_t output_nr) {
  TensorImpl* out = output.impl();
  out->grad_fn = node;
  out->output_nr = output_nr;
  out->requires_grad = true;
}

}  // namespace

void record_op(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward) {
  auto node = make_function_node(name, inputs, std::move(backward), nullptr, 1);
  if (detect_anomaly_enabled()) {
    anomaly::check_forward(name, inputs, output);
    node->recorded_in = anomaly::module_stack();
  }
  attach(node, output, 0);
}

void record_op_multi(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor*>& outputs,
                     MultiBackwardFn backward) {
  HG_CHECK(!outputs.empty() && backward != nullptr, "[record_op_multi] '", name,
           "' expected at least one output and a backward function");
  for (size_t k = 0; k < outputs.size(); ++k) {
    HG_CHECK(outputs[k] != nullptr && outputs[k]->defined(), "[record_op_multi] '", name, "' output ", k,
             " is undefined; expected every output to be a tensor");
    for (size_t j = 0; j < k; ++j)
      HG_CHECK(!outputs[j]->is_same(*outputs[k]), "[record_op_multi] '", name, "' outputs ", j, " and ", k,
               " are the same tensor; expected distinct tensors");
  }
  auto node = make_function_node(name, inputs, nullptr, std::move(backward), uint32_t(outputs.size()));
  if (detect_anomaly_enabled()) {
    for (size_t k = 0; k < outputs.size(); ++k) anomaly::check_forward(name, inputs, *outputs[k], int(k));
    node->recorded_in = anomaly::module_stack();
  }
  for (size_t k = 0; k < outputs.size(); ++k) attach(node, *outputs[k], uint32_t(k));
}

void run_backward(const Tensor& root, const Tensor& grad_root, bool retain_graph) {
  HG_CHECK(root.requires_grad(), "[backward] the tensor ", root.describe(),
           " does not require grad and has no grad_fn: nothing to differentiate");
  NoGradGuard no_grad;
  struct Depth {
    Depth() { ++t_backward_depth; }
    ~Depth() { --t_backward_depth; }
  } depth;
  std::shared_ptr<Node> start = root.is_leaf() ? grad_accumulator(root) : root.grad_fn();
  const uint32_t start_output = root.is_leaf() ? 0 : root.impl()->output_nr;

  // Count the consumers of every reachable node (over all of its outputs).
  std::unordered_map<Node*, int> pending;
  std::vector<Node*> stack{start.get()};
  pending[start.get()] = 0;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->edges()) {
      if (!edge.node) continue;
      auto [it, inserted] = pending.try_emplace(edge.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(edge.node.get());
    }
  }

  // Run nodes whose consumers have all reported, with what each output received (summed per output;
  // undefined where nothing arrived). A node that received nothing at all (every contribution was
  // undefined) is not run, but still reports to its inputs.
  std::unordered_map<Node*, std::vector<Tensor>> received;
  auto slots_of = [&received](Node* node) -> std::vector<Tensor>& {
    std::vector<Tensor>& slots = received[node];
    if (slots.empty()) slots.resize(node->num_outputs());
    return slots;
  };
  slots_of(start.get())[start_output] = grad_root;
  std::vector<std::shared_ptr<Node>> ready{start};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    std::vector<Tensor> input_grads;
    if (auto it = received.find(node.get()); it != received.end()) {
      std::vector<Tensor> grads = std::move(it->second);
      received.erase(it);
      if (profiler::op_ranges_enabled()) {
        profiler::ScopedRange range(node->name() + " backward", profiler::Category::op);
        input_grads = node->apply(grads);
      } else {
        input_grads = node->apply(grads);
      }
    }
    if (!retain_graph) node->release();
    for (size_t i = 0; i < node->edges().size(); ++i) {
      const Edge& edge = node->edges()[i];
      if (!edge.node) continue;
      if (i < input_grads.size() && input_grads[i].defined()) {
        HG_CHECK(edge.output_nr < edge.node->num_outputs(), "[backward] '", node->name(), "' input ", i,
                 " names output ", edge.output_nr, " of '", edge.node->name(), "', which has ",
                 edge.node->num_outputs());
        Tensor& slot = slots_of(edge.node.get())[edge.output_nr];
        slot = slot.defined() ? add(slot, input_grads[i]) : input_grads[i];
      }
      if (--pending[edge.node.get()] == 0) ready.push_back(edge.node);
    }
  }
}

}  // namespace hg
