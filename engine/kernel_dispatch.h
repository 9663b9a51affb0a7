#pragma once
#include "kernels/kernels.h"

// HG_KERNEL(device, name, args...): runs kernels::cpu::name(args...) for a CPU tensor, or
// kernels::cuda::name(args..., stream) on the device's compute stream for a CUDA tensor. The one
// place that knows whether the build has a CUDA backend.
#if defined(HALFGRAD_HAS_CUDA)
#include "engine/cuda/cuda_context.h"
#include "kernels/kernels_cuda.h"
#define HG_KERNEL(device, name, ...)                                                                       \
  ((device).is_cuda() ? ::hg::kernels::cuda::name(__VA_ARGS__, ::hg::cuda::compute_stream((device).index)) \
                      : ::hg::kernels::cpu::name(__VA_ARGS__))
#else
#define HG_KERNEL(device, name, ...) ::hg::kernels::cpu::name(__VA_ARGS__)
#endif
