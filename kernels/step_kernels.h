#pragma once
// The kernels of a capturable training step: its scalars (learning rate, loss scale, skip flag,
// step counts, gradient norm) live in device memory and are read by the kernels when they run, so a
// step makes no host read and can be captured into a CUDA graph. Declared like every kernel of
// kernels/kernels.h (conventions there): kernels::cpu::name(args...) in kernels/cpu/*.cpp and
// kernels::cuda::name(args..., stream) in kernels/cuda/*.cu. Kept in their own header so that the
// many files including kernels.h do not depend on the step's scalar types.
#include <cstdint>

#include "kernels/adamw8bit_math.h"
#include "kernels/adamw_math.h"
#include "kernels/declare_kernel.h"
#include "kernels/kernels.h"
#include "kernels/lr_schedule_math.h"
#include "kernels/unscale_math.h"

namespace hg::kernels {


// Used by optim/loss_scaler.h, optim/optimizer.h, train/trainer.h. Every scalar below is a device pointer
// for the CUDA backend (host memory for the CPU one) read when the kernel runs, so a step captured
// into a CUDA graph reads each step's values, and no call waits for the device.
//
// adamw_step with its step-dependent scalars in device memory (kernels/adamw_math.h AdamWStepScalars):
// when *found_inf != 0 nothing is written; else t = step[parity] + 1 and the update of adamw_step at
// step t with lr = *lr; step[1 - parity] receives the count after the call either way.
HG_DECLARE_KERNEL(void, adamw_step_device,
                  (void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, int64_t n,
                   const AdamWStepScalars& scalars, double beta1, double beta2, double eps, double weight_decay,
                   DType dtype));
// adamw_step_device with 8-bit moments (kernels/adamw8bit_math.h; bitsandbytes' block-wise 8-bit
// Adam): m and v are stored as one byte per element, an index into a dynamic (non-linear)
// quantisation map (signed for m, unsigned for v), scaled per block of kAdamW8BitBlock elements by
// that block's absmax (fp32). One fused pass per block: dequantise -> the AdamW update of adamw_step
// in fp32 -> new absmax of the block -> requantise (nearest map entry). Blocks start at element 0 of
// the call (a ZeRO shard must start on a block boundary of its parameter to match the unsharded run).
// Same skip / lr / step-count semantics as adamw_step_device. dtype: f32, f16 or bf16.
struct QuantizedMoments {
  uint8_t* exp_avg = nullptr;        // n codes (signed map)
  uint8_t* exp_avg_sq = nullptr;     // n codes (unsigned map)
  float* absmax_exp_avg = nullptr;   // ceil(n / kAdamW8BitBlock) block scales
  float* absmax_exp_avg_sq = nullptr;
};
HG_DECLARE_KERNEL(void, adamw8bit_step_device,
                  (void* param, void* master, const void* grad, const QuantizedMoments& moments, int64_t n,
                   const AdamWStepScalars& scalars, double beta1, double beta2, double eps, double weight_decay,
                   DType dtype));
namespace cpu {
// The optimizer-offload form (ZeRO-Offload with 8-bit state): the math of adamw8bit_step_device over
// an fp32 master copy in host memory, g = grad * grad_scale; param_out (nullable) receives the updated
// master rounded to param_dtype. Host-side scalars, like cpu::adamw_offload_step.
void adamw8bit_offload_step(float* master, const void* grad, DType grad_dtype, const QuantizedMoments& moments,
                            void* param_out, DType param_dtype, int64_t n, double lr, double beta1, double beta2,
                            double eps, double weight_decay, int64_t step, double grad_scale = 1.0);
}  // namespace cpu
// The multi-tensor pass of unscale_and_check with its multiplier read from device memory
// (kernels/unscale_math.h GradientMultiplier): unscale (x *= 1 / *scale; *found_inf = 1 when an
// element is inf or NaN, 0 otherwise -- found_inf is required) or clip (x *= coef when the norm is
// finite and over max_norm; found_inf unused, may be null). One launch; no host wait.
HG_DECLARE_KERNEL(void, scale_gradients,
                  (const TensorSpan* tensors, int64_t count, const GradientMultiplier& multiplier, float* found_inf));
// *accumulator += sum_i x[i]^2 (the sum of sum_of_squares, added in double; no host wait).
HG_DECLARE_KERNEL(void, sum_of_squares_into, (const void* x, int64_t n, DType dtype, double* accumulator));
// One thread: the loss scaler's policy on its device state (kernels/unscale_math.h update_loss_scale).
HG_DECLARE_KERNEL(void, loss_scale_update, (LossScaleState* state, const LossScalePolicy& policy, bool count_skip));
// One thread: *count += 1 unless found_inf is given and *found_inf != 0 (the steps actually taken).
HG_DECLARE_KERNEL(void, step_count_advance, (int64_t* count, const float* found_inf));
// One thread: *lr = lr_at(schedule, *step) (kernels/lr_schedule_math.h).
HG_DECLARE_KERNEL(void, lr_schedule_eval, (const LrScheduleDesc& schedule, const int64_t* step, double* lr));

}  // namespace hg::kernels
