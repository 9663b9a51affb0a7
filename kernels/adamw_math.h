#pragma once
// Per-element math of the AdamW update (Loshchilov & Hutter, decoupled weight decay), exactly as
// PyTorch's torch.optim.AdamW computes it, shared by the CPU and CUDA backends. At step t >= 1,
// with learning rate lr, decay lambda, gradient g:
//
//   theta <- theta * (1 - lr * lambda)                         decoupled decay, before the update
//   m     <- beta1 * m + (1 - beta1) * g                       first moment
//   v     <- beta2 * v + (1 - beta2) * g^2                     second moment
//   theta <- theta - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// The step-dependent scalars are computed once per tensor (on the host, or per thread from device
// memory in the capturable form below), in double, and handed to the per-element function in the
// accumulation type A (float, or double for f64 parameters); the element update then holds no pow
// and no branch, so the CPU loop vectorises.
//
// Capturable form (adamw_step_device, PyTorch's capturable AdamW with the GradScaler's found_inf):
// lr, the skip flag and the step count t live in device memory (AdamWStepScalars) and are read when
// the kernel runs. When found_inf != 0 nothing is written (parameter, master, moments untouched bit
// for bit) and t stays; otherwise t advances by one and the update uses it. t has two slots so that
// no thread reads what another writes: the kernel reads step[parity] and one thread writes
// step[1 - parity]. optim/adamw.cpp keeps parity 0 and copies step[1] to step[0] on the device after
// each call, so a CUDA graph that captured the call replays the same, correct sequence.
#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace hg::kernels {

template <class A>
struct AdamWCoefficients {
  A decay;  // 1 - lr * lambda
  A beta1;  // m <- beta1 m + one_minus_beta1 g
  A one_minus_beta1;
  A beta2;  // v <- beta2 v + one_minus_beta2 g^2
  A one_minus_beta2;
  A step_size;   // lr / (1 - beta1^t)
  A bias2_sqrt;  // sqrt(1 - beta2^t)
  A eps;
};

// The scalars of step t (t >= 1; the caller has validated the hyperparameters).
template <class A>
HG_HOST_DEVICE inline AdamWCoefficients<A> adamw_coefficients(double lr, double beta1, double beta2, double eps,
                                                              double weight_decay, int64_t step) {
  const double bias1 = 1.0 - std::pow(beta1, double(step));
  const double bias2 = 1.0 - std::pow(beta2, double(step));
  AdamWCoefficients<A> c;
  c.decay = A(1.0 - lr * weight_decay);
  c.beta1 = A(beta1);
  c.one_minus_beta1 = A(1.0 - beta1);
  c.beta2 = A(beta2);
  c.one_minus_beta2 = A(1.0 - beta2);
  c.step_size = A(lr / bias1);
  c.bias2_sqrt = A(std::sqrt(bias2));
  c.eps = A(eps);
  return c;
}

// One element: updates theta, m, v in place (all in A; the caller converts on load and store).
template <class A>
HG_HOST_DEVICE inline void adamw_update(A& theta, A g, A& m, A& v, const AdamWCoefficients<A>& c) {
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * g * g;
  const A denom = std::sqrt(v) / c.bias2_sqrt + c.eps;
  theta = theta * c.decay - c.step_size * (m / denom);
}

// The device-resident scalars of one adamw_step_device call.
struct AdamWStepScalars {
  const double* lr = nullptr;        // the learning rate, device memory; null: lr_value
  double lr_value = 0.0;
  const float* found_inf = nullptr;  // nonzero: skip the update; null: never skip
  int64_t* step = nullptr;           // [2] (or [3], see blocks_done): step[parity] = updates applied so far;
                                     // step[1 - parity] is written
  int32_t parity = 0;
  // Optional: a counter that is zero between calls (the third slot of a three-slot count). Given it, the
  // call also advances step[parity] itself -- on CUDA the last block to finish does (it takes the
  // counter's last ticket), then re-zeroes the counter -- so the count stays in one slot and needs no
  // second launch to bring it back. Null: step[parity] is left as it was.
  unsigned long long* blocks_done = nullptr;
};

HG_HOST_DEVICE inline bool adamw_skips(const AdamWStepScalars& s) { return s.found_inf != nullptr && *s.found_inf != 0.0f; }
HG_HOST_DEVICE inline double adamw_lr(const AdamWStepScalars& s) { return s.lr != nullptr ? *s.lr : s.lr_value; }
// The step count this call updates with (t >= 1 when it does not skip).
HG_HOST_DEVICE inline int64_t adamw_next_step(const AdamWStepScalars& s) { return s.step[s.parity] + 1; }
// Written by one thread: the count after this call (unchanged when skipped).
HG_HOST_DEVICE inline void adamw_record_step(const AdamWStepScalars& s) {
  s.step[1 - s.parity] = s.step[s.parity] + (adamw_skips(s) ? 0 : 1);
}
// With blocks_done: the current slot advances too, once nothing reads it any more (on CUDA the last block
// does it, on the CPU the end of the call).
HG_HOST_DEVICE inline void adamw_settle_step(const AdamWStepScalars& s) { s.step[s.parity] += adamw_skips(s) ? 0 : 1; }

}  // namespace hg::kernels
