#pragma once
// Arithmetic shared by the fused optimizer kernels (kernels/adam_math.h, rmsprop_math.h, adagrad_math.h,
// lion_math.h), on the CPU and CUDA backends: a product and a sum each rounded on its own, never
// contracted into one fma, so that the two backends give the same bits (a ZeRO run offloaded from a
// CUDA device updates on the CPU what the single-process run updates on the device). nvcc contracts
// a * b + c unless told not to (the __*_rn intrinsics); the CPU kernels that use these are compiled with
// -ffp-contract=off (kernels/CMakeLists.txt), and so are the emulated build's .cu files of them.
#include <cmath>
#include <type_traits>

#include "kernels/host_device.h"

namespace hg::kernels {

template <class A>
HG_HOST_DEVICE inline A opt_mul(A a, A b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, double>) {
    return __dmul_rn(a, b);
  } else {
    return __fmul_rn(a, b);
  }
#else
  return a * b;
#endif
}

template <class A>
HG_HOST_DEVICE inline A opt_add(A a, A b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<A, double>) {
    return __dadd_rn(a, b);
  } else {
    return __fadd_rn(a, b);
  }
#else
  return a + b;
#endif
}

template <class A>
HG_HOST_DEVICE inline A opt_sub(A a, A b) {
  return opt_add(a, -b);
}

// a * x + b * y, each product and the sum rounded on its own (an exponential moving average).
template <class A>
HG_HOST_DEVICE inline A opt_lerp(A a, A x, A b, A y) {
  return opt_add(opt_mul(a, x), opt_mul(b, y));
}

// g + weight_decay * theta (coupled, L2 weight decay); g itself when the decay is 0, as the composed
// update skipped the term.
template <class A>
HG_HOST_DEVICE inline A opt_l2(A g, A theta, A weight_decay) {
  return weight_decay != A(0) ? opt_add(g, opt_mul(theta, weight_decay)) : g;
}

}  // namespace hg::kernels
