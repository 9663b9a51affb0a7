#pragma once
// StepState: the named scalars of a training step taken on the device (train/trainer.h ON THE
// DEVICE), in device memory, so that the step reads nothing on the host. The f64 ones are views of
// one buffer, so a logged step reads them all back with one copy (read()). Who writes each:
//
//   loss_sum        the trainer: each micro-batch's loss added on the device (add_loss)
//   sum_of_squares  the optimizer's device step clip_grad_norm (the gradients' sum of squares)
//   lr              the schedule: optim::write_lr_on_device, from step_count
//   found_inf       without a loss scaler, a sharded optimizer's own check (device step unscale by
//                   `one`); with one, the scaler keeps its own flag (LossScaler::found_inf_tensor)
//   step_count      t, the optimizer steps taken: count_step adds 1 unless the step's found_inf is set
//   loss_scale, skipped: the scaler's, copied in by read()
#include <cstdint>

#include "engine/tensor.h"
#include "optim/loss_scaler.h"

namespace hg::train {

class StepState {
 public:
  // The scalars on `device`, with t = steps_taken.
  StepState(const Device& device, int64_t steps_taken);

  Tensor loss_sum, sum_of_squares, lr;  // f64[1]
  Tensor step_count;                    // i64[1]
  Tensor found_inf, one;                // f32[1]

  // loss_sum += loss (a one-element tensor of any floating dtype), on the device.
  void add_loss(const Tensor& loss);
  // t += 1 unless found_inf[0] != 0 (an f32 scalar; undefined: always), on the device.
  void count_step(const Tensor& found_inf);

  // Everything at once, in one copy to the host (the scaler's scale and skipped count when it is on).
  struct Figures {
    double loss_sum = 0, sum_of_squares = 0, lr = 0, loss_scale = 1;
    int64_t skipped = 0, steps = 0;
  };
  Figures read(const optim::LossScaler& scaler);

 private:
  Tensor figures_;  // f64[6]: loss_sum, sum_of_squares, lr, loss scale, skipped, t
  Tensor scratch_;  // f64[1]: a micro-batch's loss widened
};

}  // namespace hg::train
