#pragma once
// The per-element math of the loss scaler's fused unscale-and-check pass (kernels::*::unscale_and_check),
// shared by the CPU and CUDA backends.
//
//   y = round_T(acc(x) * inv_scale),   found_inf |= y is inf or NaN
//
// x is a gradient of storage type T, acc(x) its value in the accumulation type A (float; double for
// double), inv_scale = 1 / loss_scale in A. Checking the stored y is enough: inv_scale is finite
// and > 0, so an inf or NaN x gives an inf or NaN y, and so does a product that overflows T when it
// is rounded (possible only when inv_scale > 1, i.e. a loss scale below 1).
#include "kernels/host_device.h"

namespace hg::kernels {

// True for inf and NaN: v - v is 0 for every finite v and NaN otherwise. (No <cmath>, so the same
// line compiles for host, device and emulator, and no fast-math flag can fold it away silently.)
template <class A>
HG_HOST_DEVICE inline bool is_nonfinite(A v) {
  return !(v - v == A(0));
}

}  // namespace hg::kernels
