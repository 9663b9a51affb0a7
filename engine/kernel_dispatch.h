#pragma once
#include "engine/profiler/profiler.h"
#include "kernels/kernels.h"

// HG_KERNEL(device, name, args...): runs kernels::cpu::name(args...) for a CPU tensor, or
// kernels::cuda::name(args..., stream) on the device's compute stream for a CUDA tensor. The one
// place that knows whether the build has a CUDA backend.
#if defined(HALFGRAD_HAS_CUDA)
#include "engine/cuda/cuda_context.h"
#include "kernels/kernels_cuda.h"
#define HG_KERNEL_CALL(device, name, ...)                                                                  \
  ((device).is_cuda() ? ::hg::kernels::cuda::name(__VA_ARGS__, ::hg::cuda::compute_stream((device).index)) \
                      : ::hg::kernels::cpu::name(__VA_ARGS__))
#else
#define HG_KERNEL_CALL(device, name, ...) ::hg::kernels::cpu::name(__VA_ARGS__)
#endif

// With the profiler's op ranges on (profiler::Options::op_ranges()), each kernel call is wrapped in a
// range named after the kernel (timed with CUDA events on a CUDA device); off, this costs one relaxed
// load and a branch predicted not taken (bench_profiler measures it).
#define HG_KERNEL(device, name, ...)                                                                  \
  (__builtin_expect(::hg::profiler::op_ranges_enabled(), 0)                                           \
       ? [&]() -> decltype(auto) {                                                                    \
           ::hg::profiler::ScopedRange hg_op_range_(#name, ::hg::profiler::Category::op, (device));    \
           return HG_KERNEL_CALL(device, name, __VA_ARGS__);                                          \
         }()                                                                                          \
       : HG_KERNEL_CALL(device, name, __VA_ARGS__))
