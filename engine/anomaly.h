#pragma once
// Anomaly mode: find the first op that produced NaN or inf.
//
// While it is on (hg::DetectAnomaly in a scope, or set_detect_anomaly(true)), every op recorded for
// autograd has its forward output checked for NaN/inf, and every backward function the gradients it
// returns. The first one that holds a non-finite value throws hg::Error naming the op, the
// direction (forward or backward), the shapes and dtypes of its inputs and output (marking inputs
// that were already non-finite), and the stack of modules it ran in, e.g.
//   [detect_anomaly] forward of op 'linear' produced NaN or inf in its output [2, 8, 64] f32;
//   inputs: [2, 8, 16] f32, [64, 16] f32 (already NaN or inf), [64] f32;
//   module stack: GPT > h.0 > mlp > c_fc
// Backward errors name the module stack the op was recorded in.
//
// COST: off (the default), each recorded op and each backward node tests one global bool. On, each
// check is a reduction plus a device-to-host read (a synchronisation): a debugging mode, several
// times slower, as in PyTorch's torch.autograd.detect_anomaly.
//
// Module stack: layers push themselves with nn::ModuleScope (layers/module.h) at the top of their
// forward -- only while anomaly mode is on; names are resolved from the module tree (the child's
// registered name under the module that called it). Ops outside any module show "(no module)".
//
// CONVENTION
//   - The switch is process-wide (one bool, not thread-local): DataLoader threads do not record ops;
//     the module stack is per thread.
//   - Only ops that record themselves for autograd are checked (grad mode on and an input requiring
//     grad), i.e. the training forward and backward -- not NoGradGuard regions such as evaluation.
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace hg {

namespace detail {
extern bool g_detect_anomaly;
}

inline bool detect_anomaly_enabled() { return detail::g_detect_anomaly; }
void set_detect_anomaly(bool enabled);

// Turns anomaly mode on (or off) in its scope, restoring the previous setting at exit.
class DetectAnomaly {
 public:
  explicit DetectAnomaly(bool enabled = true);
  ~DetectAnomaly();
  DetectAnomaly(const DetectAnomaly&) = delete;
  DetectAnomaly& operator=(const DetectAnomaly&) = delete;

 private:
  bool previous_;
};

// True when a floating tensor holds NaN or inf (false for integer tensors); any device.
bool has_non_finite(const Tensor& t);

namespace anomaly {
// The module-name stack of this thread (pushed by nn::ModuleScope while anomaly mode is on).
void push_module(std::string name);
void pop_module();
// "GPT > h.0 > attn", or "(no module)".
std::string module_stack();
// Throws the forward error when `output` of op `op` holds NaN/inf (called by record_op and, with the
// output's index >= 0, by record_op_multi).
void check_forward(const char* op, const std::vector<Tensor>& inputs, const Tensor& output, int output_index = -1);
// Throws the backward error when a gradient in `grads` holds NaN/inf; `where` is the module stack
// recorded with the op; grad_outputs: the incoming gradient of each output (undefined where none).
void check_backward(const std::string& op, const std::string& where, const std::vector<Tensor>& grads,
                    const std::vector<Shape>& input_shapes, const std::vector<Tensor>& grad_outputs);
}  // namespace anomaly

}  // namespace hg
