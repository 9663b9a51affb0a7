#pragma once
// The per-element and per-step math of the loss scaler's device-side passes, shared by the CPU and
// CUDA backends (kernels::*::unscale_and_check, scale_gradients, loss_scale_update).
//
//   unscale:  y = round_T(acc(x) * inv_scale),   found_inf |= y is inf or NaN
//   clip:     y = round_T(coef * acc(x) + 0),    coef = max_norm / (sqrt(sum_sq) + 1e-6), only when
//             sum_sq is finite and coef < 1 (else nothing is written) -- the affine op's formula, so
//             clipping on the device gives the bits the engine's `grad * coef` gave
//
// x is a gradient of storage type T, acc(x) its value in the accumulation type A (float; double for
// double). Checking the stored y is enough for found_inf: inv_scale is finite and > 0, so an inf or
// NaN x gives an inf or NaN y, and so does a product that overflows T when it is rounded (possible
// only when inv_scale > 1, i.e. a loss scale below 1).
//
// The dynamic loss-scale policy (optim/loss_scaler.h), applied by one thread to the scaler's state
// in device memory (LossScaleState) after every step:
//   overflow:  skipped += count_skip; good = 0;
//              hysteresis_left > 1 ? hysteresis_left -= 1 : S = max(S * backoff, min_scale)
//   clean:     consecutive_hysteresis ? hysteresis_left = hysteresis;
//              ++good == growth_interval ? S = min(S * growth, max_scale), good = 0, hysteresis_left = hysteresis
// S is kept in f32 (as PyTorch's GradScaler keeps it); the products are formed in double and rounded
// once, so powers of two (the defaults) are exact.
#include <cmath>
#include <cstdint>

#include "kernels/error.h"
#include "kernels/host_device.h"
#include "kernels/kernels.h"

namespace hg::kernels {

// True for inf and NaN: v - v is 0 for every finite v and NaN otherwise. (No <cmath>, so the same
// line compiles for host, device and emulator, and no fast-math flag can fold it away silently.)
template <class A>
HG_HOST_DEVICE inline bool is_nonfinite(A v) {
  return !(v - v == A(0));
}

// What multiplies the gradients of a multi-tensor scale_gradients pass, read from device memory
// when the pass runs (so a captured graph sees each step's values).
struct GradientMultiplier {
  enum Kind : int32_t { unscale, clip };
  Kind kind = unscale;
  const float* scale = nullptr;    // unscale: the loss scale S (device); inv_scale = 1 / S
  const double* sum_sq = nullptr;  // clip: the sum of squares of every gradient (device)
  double max_norm = 0.0;           // clip: the norm's bound
};

// The multiplier of a pass and whether it writes anything (clip: only when the norm is finite and
// over max_norm). Computed in double from the device value, like the host paths computed it.
HG_HOST_DEVICE inline double gradient_multiplier(const GradientMultiplier& m, bool* write) {
  if (m.kind == GradientMultiplier::unscale) {
    *write = true;
    return 1.0 / double(*m.scale);
  }
  const double sum = *m.sum_sq;
  const double coef = m.max_norm / (std::sqrt(sum) + 1e-6);
  *write = !is_nonfinite(sum) && coef < 1.0;
  return coef;
}

// The loss scaler's state, one struct in device memory (written only by loss_scale_update and the
// unscale pass, read by the host only when asked: logging, checkpoints).
struct LossScaleState {
  float scale = 1.0f;           // S
  float found_inf = 0.0f;       // 1 when this step's unscale pass found an inf/NaN
  int64_t good_steps = 0;       // the growth tracker: consecutive clean steps
  int64_t hysteresis_left = 1;  // overflows still tolerated before a backoff
  int64_t skipped_steps = 0;    // steps skipped on inf/NaN over the whole run
};

// The dynamic policy's knobs (validated by the host).
struct LossScalePolicy {
  bool dynamic = true;  // false: a static scale (only the skip is counted)
  double growth_factor = 2.0, backoff_factor = 0.5, min_scale = 1.0, max_scale = 0x1p127;
  int64_t growth_interval = 2000, hysteresis = 1;
  bool consecutive_hysteresis = false;
};

// One step's update of the state (see the policy above); count_skip: step() ran (an overflow then
// counts as a skipped step).
HG_HOST_DEVICE inline void update_loss_scale(LossScaleState& s, const LossScalePolicy& p, bool count_skip) {
  const bool overflow = s.found_inf != 0.0f;
  if (overflow && count_skip) s.skipped_steps += 1;
  if (!p.dynamic) return;
  if (overflow) {
    s.good_steps = 0;
    if (s.hysteresis_left > 1) {
      s.hysteresis_left -= 1;
    } else {
      const double backed_off = double(s.scale) * p.backoff_factor;
      s.scale = float(backed_off > p.min_scale ? backed_off : p.min_scale);
    }
    return;
  }
  if (p.consecutive_hysteresis) s.hysteresis_left = p.hysteresis;
  if (++s.good_steps >= p.growth_interval) {
    const double grown = double(s.scale) * p.growth_factor;
    s.scale = float(grown < p.max_scale ? grown : p.max_scale);
    s.good_steps = 0;
    s.hysteresis_left = p.hysteresis;
  }
}

// The host side of both backends' multi-tensor calls: validates the `count` spans (an hg::Error names `op`,
// the tensor and the rule broken) and calls each_span(span) for every span that holds elements, in order.
template <class EachSpan>
void for_each_checked_span(const TensorSpan* tensors, int64_t count, const char* op, EachSpan&& each_span) {
  HG_CHECK(count >= 0, "[", op, "] expected count >= 0 tensors, got ", count);
  HG_CHECK(count == 0 || tensors != nullptr, "[", op, "] null tensor list for count = ", count);
  for (int64_t t = 0; t < count; ++t) {
    const TensorSpan& s = tensors[t];
    HG_CHECK(s.n >= 0, "[", op, "] tensor ", t, " has n = ", s.n, "; expected n >= 0");
    HG_CHECK(is_floating(s.dtype), "[", op, "] tensor ", t, " is ", dtype_name(s.dtype),
             "; expected a floating dtype (f32, f64, f16, bf16)");
    if (s.n == 0) continue;
    HG_CHECK(s.data != nullptr, "[", op, "] tensor ", t, " is null with n = ", s.n);
    each_span(s);
  }
}

}  // namespace hg::kernels
