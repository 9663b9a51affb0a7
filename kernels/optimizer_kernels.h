#pragma once
// The fused optimizer steps of SGD, Adam, RMSprop, Adagrad and Lion: one pass over the parameter, its gradient,
// its state buffers (and the fp32 master copy of a half parameter) per step, where the composed update ran
// one engine op per term. Declared like every kernel of kernels/kernels.h (conventions there):
// kernels::cpu::name(args...) in kernels/cpu/*.cpp and kernels::cuda::name(args..., stream) in
// kernels/cuda/*.cu; kept in a header of their own so that the many files including kernels.h do not
// depend on them (as kernels/step_kernels.h).
//
// Common to all: param and grad are n contiguous elements of `dtype` (f32, f64, f16, bf16); the state
// buffers and master are in accumulate_dtype(dtype) (fp32 for half parameters). master is nullable:
// without it theta is read from param, updated in acc_t and rounded once on store; with it (mixed
// precision) theta is read from and written to master and param receives its rounding to nearest even.
// Elements are independent: the result depends neither on threads nor on the launch shape, and the two
// backends give the same bits (kernels/optimizer_math.h). The per-element math is in the named headers.
//
// The step's scalars are AdamW's capturable ones (kernels/adamw_math.h AdamWStepScalars), read when the
// kernel runs: the learning rate (device memory, or lr_value), the skip flag (found_inf != 0: nothing is
// written, bit for bit) and the count of updates applied, step[parity], of which t = step[parity] + 1 is
// this one (Adam's bias corrections, Adagrad's lr decay, SGD's first update); step[1 - parity] receives
// the count after the call and, with blocks_done, step[parity] too (kernels/adamw_math.h). So an
// optimizer whose scalars live on the device steps with no host read and can be captured in a CUDA
// graph (optim/device_step.h), and the host form passes the same struct with host values.
#include <cstdint>

#include "kernels/adamw_math.h"
#include "kernels/declare_kernel.h"
#include "kernels/dtype.h"
#include "kernels/error.h"

namespace hg::kernels {

// What sgd_step and rmsprop_step check on both backends: a momentum buffer exactly when momentum > 0.
inline void check_momentum_buffer(const char* kernel, const void* momentum_buffer, double momentum) {
  HG_CHECK((momentum_buffer != nullptr) == (momentum > 0.0), "[", kernel,
           "] expected a momentum buffer exactly when momentum > 0; got momentum ", momentum,
           momentum_buffer ? " with one" : " without one");
}

// SGD (kernels/sgd_math.h); momentum_buffer non-null exactly when momentum > 0 (set to the gradient at
// t = 1, blended into after).
HG_DECLARE_KERNEL(void, sgd_step,
                  (void* param, void* master, const void* grad, void* momentum_buffer, int64_t n,
                   const AdamWStepScalars& scalars, double weight_decay, double momentum, double dampening,
                   bool nesterov, DType dtype));
// Adam (kernels/adam_math.h); max_exp_avg_sq non-null: AMSGrad.
HG_DECLARE_KERNEL(void, adam_step,
                  (void* param, void* master, const void* grad, void* exp_avg, void* exp_avg_sq, void* max_exp_avg_sq,
                   int64_t n, const AdamWStepScalars& scalars, double beta1, double beta2, double eps,
                   double weight_decay, DType dtype));
// RMSprop (kernels/rmsprop_math.h); momentum_buffer non-null exactly when momentum > 0, grad_avg
// non-null: centered.
HG_DECLARE_KERNEL(void, rmsprop_step,
                  (void* param, void* master, const void* grad, void* square_avg, void* momentum_buffer, void* grad_avg,
                   int64_t n, const AdamWStepScalars& scalars, double alpha, double eps, double weight_decay,
                   double momentum, DType dtype));
// Adagrad (kernels/adagrad_math.h).
HG_DECLARE_KERNEL(void, adagrad_step,
                  (void* param, void* master, const void* grad, void* sum, int64_t n, const AdamWStepScalars& scalars,
                   double lr_decay, double eps, double weight_decay, DType dtype));
// Lion (kernels/lion_math.h).
HG_DECLARE_KERNEL(void, lion_step,
                  (void* param, void* master, const void* grad, void* exp_avg, int64_t n,
                   const AdamWStepScalars& scalars, double beta1, double beta2, double weight_decay, DType dtype));

}  // namespace hg::kernels
