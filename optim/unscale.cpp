// The fused unscale + inf/NaN check over many gradients (optim/unscale.h).
#include "optim/unscale.h"

#include <utility>

#include "engine/autograd.h"
#include "engine/kernel_dispatch.h"

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

}  // namespace hg::optim
