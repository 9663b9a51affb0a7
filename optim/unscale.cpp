// The fused unscale + inf/NaN check over many gradients (optim/unscale.h).
#include "optim/unscale.h"

#include <utility>

#include "engine/autograd.h"
#include "engine/kernel_dispatch.h"
#include "kernels/step_kernels.h"

namespace hg::optim {

bool unscale_gradients(const std::vector<Tensor>& params, double inv_scale) {
  NoGradGuard no_grad;
  // Every gradient, grouped by device (in the order of first appearance): one fused pass each.
  std::vector<std::pair<Device, std::vector<kernels::TensorSpan>>> groups;
  for (size_t i = 0; i < params.size(); ++i) {
    HG_CHECK(params[i].defined(), "[LossScaler] unscale_: parameter ", i, " is an undefined tensor");
    Tensor grad = params[i].grad();
    if (!grad.defined()) continue;
    HG_CHECK(is_floating(grad.dtype()), "[LossScaler] unscale_: the gradient of parameter ", i, " is ", grad.describe(),
             "; expected a floating tensor");
    if (!grad.is_contiguous()) {  // unscaled in place: give the parameter a contiguous gradient
      grad = grad.contiguous();
      params[i].set_grad(grad);
    }
    size_t g = 0;
    while (g < groups.size() && !(groups[g].first == grad.device())) ++g;
    if (g == groups.size()) groups.emplace_back(grad.device(), std::vector<kernels::TensorSpan>{});
    groups[g].second.push_back({grad.data_ptr(), grad.numel(), grad.dtype()});
  }
  bool found = false;
  for (const auto& [device, spans] : groups) {
    found = HG_KERNEL(device, unscale_and_check, spans.data(), int64_t(spans.size()), inv_scale) || found;
  }
  return found;
}

std::vector<kernels::TensorSpan> gradient_spans(const std::vector<Tensor>& params, const Device& device,
                                                const char* who) {
  std::vector<kernels::TensorSpan> spans;
  for (size_t i = 0; i < params.size(); ++i) {
    HG_CHECK(params[i].defined(), who, " parameter ", i, " is an undefined tensor");
    Tensor grad = params[i].grad();
    if (!grad.defined()) continue;
    HG_CHECK(is_floating(grad.dtype()), who, " the gradient of parameter ", i, " is ", grad.describe(),
             "; expected a floating tensor");
    HG_CHECK(grad.device() == device, who, " the gradient of parameter ", i, " is ", grad.describe(),
             "; expected it on ", device.str(), " (where the step's scalars live)");
    if (!grad.is_contiguous()) {
      grad = grad.contiguous();
      params[i].set_grad(grad);
    }
    spans.push_back({grad.data_ptr(), grad.numel(), grad.dtype()});
  }
  return spans;
}

void unscale_gradients_on_device(const std::vector<Tensor>& params, const Tensor& scale, const Tensor& found_inf) {
  HG_CHECK(scale.defined() && found_inf.defined() && scale.numel() == 1 && found_inf.numel() == 1 &&
               scale.dtype() == DType::f32 && found_inf.dtype() == DType::f32 && scale.device() == found_inf.device(),
           "[LossScaler] unscale_: expected the loss scale and found_inf as f32 scalars on one device");
  NoGradGuard no_grad;
  const std::vector<kernels::TensorSpan> spans = gradient_spans(params, found_inf.device(), "[LossScaler] unscale_:");
  kernels::GradientMultiplier m;
  m.kind = kernels::GradientMultiplier::unscale;
  m.scale = static_cast<const float*>(scale.data_ptr());
  HG_KERNEL(found_inf.device(), scale_gradients, spans.data(), int64_t(spans.size()), m,
            static_cast<float*>(found_inf.data_ptr()));
}

}  // namespace hg::optim
