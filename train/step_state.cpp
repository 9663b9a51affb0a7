// StepState (train/step_state.h): the device scalars of a step and their one readback.
#include "train/step_state.h"

#include <vector>

#include "engine/autograd.h"
#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "kernels/step_kernels.h"

namespace hg::train {

StepState::StepState(const Device& device, int64_t steps_taken)
    : figures_(zeros({6}, DType::f64, device)), scratch_(zeros({1}, DType::f64, device)) {
  loss_sum = figures_.narrow(0, 0, 1);
  sum_of_squares = figures_.narrow(0, 1, 1);
  lr = figures_.narrow(0, 2, 1);
  step_count = scalar_tensor(double(steps_taken), DType::i64).reshape({1}).to(device);
  found_inf = zeros({1}, DType::f32, device);
  one = ones({1}, DType::f32, device);
}

void StepState::add_loss(const Tensor& loss) {
  NoGradGuard no_grad;
  scratch_.copy_(loss.detach().reshape({1}));  // summed in double, in micro-batch order
  loss_sum.copy_(loss_sum + scratch_);
}

void StepState::count_step(const Tensor& found) {
  HG_KERNEL(step_count.device(), step_count_advance, static_cast<int64_t*>(step_count.data_ptr()),
            found.defined() ? static_cast<const float*>(found.data_ptr()) : nullptr);
}

StepState::Figures StepState::read(const optim::LossScaler& scaler) {
  NoGradGuard no_grad;
  if (scaler.enabled()) {
    figures_.narrow(0, 3, 1).copy_(scaler.scale_tensor().reshape({1}));
    figures_.narrow(0, 4, 1).copy_(scaler.skipped_steps_tensor().reshape({1}));
  }
  figures_.narrow(0, 5, 1).copy_(step_count);
  const std::vector<double> v = figures_.to_vector<double>();  // the step's one read
  Figures f;
  f.loss_sum = v[0];
  f.sum_of_squares = v[1];
  f.lr = v[2];
  f.loss_scale = scaler.enabled() ? v[3] : 1.0;
  f.skipped = int64_t(v[4]);
  f.steps = int64_t(v[5]);
  return f;
}

}  // namespace hg::train
