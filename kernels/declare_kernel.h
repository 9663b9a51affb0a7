#pragma once
// HG_DECLARE_KERNEL(return type, name, (parameters)); declares cpu::name(parameters) and
// cuda::name(parameters, Stream stream): one declaration per kernel for both backends. Used inside
// namespace hg::kernels by kernels/kernels.h and kernels/step_kernels.h.
struct CUstream_st;

namespace hg::kernels::cuda {
using Stream = CUstream_st*;
}  // namespace hg::kernels::cuda

#define HG_KERNEL_WITH_STREAM(...) (__VA_ARGS__, ::hg::kernels::cuda::Stream stream)
#define HG_DECLARE_KERNEL(ret, name, params) \
  namespace cpu {                            \
  ret name params;                           \
  }                                          \
  namespace cuda {                           \
  ret name HG_KERNEL_WITH_STREAM params;     \
  }                                          \
  static_assert(true, "")
