// Anomaly mode (engine/anomaly.h): the switch, the module stack and the two checks.
#include "engine/anomaly.h"

#include <sstream>

#include "engine/autograd.h"
#include "engine/ops.h"

namespace hg {

namespace detail {
bool g_detect_anomaly = false;
}

namespace {
thread_local std::vector<std::string> t_module_stack;

std::string describe_shape(const Shape& shape, DType dtype) { return shape_str(shape) + " " + dtype_name(dtype); }
}  // namespace

void set_detect_anomaly(bool enabled) { detail::g_detect_anomaly = enabled; }

DetectAnomaly::DetectAnomaly(bool enabled) : previous_(detail::g_detect_anomaly) { detail::g_detect_anomaly = enabled; }
DetectAnomaly::~DetectAnomaly() { detail::g_detect_anomaly = previous_; }

bool has_non_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !is_floating(t.dtype())) return false;
  NoGradGuard no_grad;
  // x * 0 is 0 for finite x and NaN for NaN and +-inf, so the sum is NaN exactly when one is there.
  const double probe = sum(t.detach() * 0.0).item();
  return probe != probe;
}

namespace anomaly {

void push_module(std::string name) { t_module_stack.push_back(std::move(name)); }
void pop_module() {
  if (!t_module_stack.empty()) t_module_stack.pop_back();
}

std::string module_stack() {
  if (t_module_stack.empty()) return "(no module)";
  std::string out;
  for (const std::string& name : t_module_stack) out += (out.empty() ? "" : " > ") + name;
  return out;
}

void check_forward(const char* op, const std::vector<Tensor>& inputs, const Tensor& output, int output_index) {
  if (!has_non_finite(output)) return;
  std::ostringstream message;
  message << "[detect_anomaly] forward of op '" << op << "' produced NaN or inf in its output ";
  if (output_index >= 0) message << output_index << " ";
  message << describe_shape(output.shape(), output.dtype()) << "; inputs: ";
  for (size_t i = 0; i < inputs.size(); ++i) {
    message << (i ? ", " : "");
    if (!inputs[i].defined()) {
      message << "(none)";
      continue;
    }
    message << describe_shape(inputs[i].shape(), inputs[i].dtype());
    if (has_non_finite(inputs[i])) message << " (already NaN or inf)";
  }
  message << "; module stack: " << module_stack();
  throw Error(message.str());
}

void check_backward(const std::string& op, const std::string& where, const std::vector<Tensor>& grads,
                    const std::vector<Shape>& input_shapes, const std::vector<Tensor>& grad_outputs) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!has_non_finite(grads[i])) continue;
    std::ostringstream message;
    message << "[detect_anomaly] backward of op '" << op << "' produced NaN or inf in the gradient of input " << i
            << " " << describe_shape(grads[i].shape(), grads[i].dtype()) << "; inputs: ";
    for (size_t j = 0; j < input_shapes.size(); ++j) message << (j ? ", " : "") << shape_str(input_shapes[j]);
    message << (grad_outputs.size() == 1 ? "; incoming gradient " : "; incoming gradients ");
    for (size_t k = 0; k < grad_outputs.size(); ++k) {
      const Tensor& g = grad_outputs[k];
      message << (k ? ", " : "");
      if (!g.defined()) {
        message << "(none)";
        continue;
      }
      message << describe_shape(g.shape(), g.dtype()) << (has_non_finite(g) ? " (already NaN or inf)" : " (finite)");
    }
    message << "; module stack (forward): " << (where.empty() ? "(no module)" : where);
    throw Error(message.str());
  }
}

}  // namespace anomaly

}  // namespace hg
