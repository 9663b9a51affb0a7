#pragma once
// DeviceStep: the capability of an optimizer that takes a training step's decisions in device memory
// (optim/optimizer.h Optimizer::device_step; optim/loss_scaler.h ON THE DEVICE; train/trainer.h).
// The loss scale, the inf/NaN verdict, the gradients' sum of squares and the learning rate are
// scalars that kernels read and write when they run, so a step reads nothing on the host and can be
// captured in a CUDA graph. Every built-in local optimizer has it (SGD, AdamW, Adam, RMSprop, Adagrad,
// Lion: their fused kernels read these scalars, kernels/optimizer_kernels.h). One that lacks it (a user's
// LocalOptimizer that does not call enable_device_step; ZeRO over an optimizer other than AdamW, or with
// optimizer offload, whose update runs on the host) is driven by the host forms of optim::Optimizer, one read per
// decision.
//
// The scalars live on the parameters' device: scale and found_inf f32, sum_sq and lr f64, each a
// contiguous one-element tensor (train/step_state.h keeps the trainer's).
#include "engine/tensor.h"

namespace hg::optim {

class DeviceStep {
 public:
  virtual ~DeviceStep() = default;
  // grads /= scale[0]; found_inf[0] = 1 when some gradient is inf or NaN, else 0. A sharded optimizer
  // combines the ranks' verdicts on the device (MAX), so every rank skips alike.
  virtual void unscale(const Tensor& scale, const Tensor& found_inf) = 0;
  // sum_sq[0] = the gradients' global sum of squares, then clipping to a norm of max_norm (the same
  // gradients and norm as Optimizer::clip_grad_norm, bit for bit).
  virtual void clip_grad_norm(double max_norm, const Tensor& sum_sq) = 0;
  // One update whose learning rate is lr[0], read when the kernels run (undefined: set_lr's value),
  // and which leaves every parameter and its state untouched, bit for bit, and counts no update when
  // found_inf[0] != 0 (undefined: never skips). Returns true: the skip is decided on the device.
  virtual bool step(const Tensor& lr, const Tensor& found_inf) = 0;
};

}  // namespace hg::optim
