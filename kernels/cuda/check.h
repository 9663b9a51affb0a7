#pragma once
// HG_CUDA_CHECK(call): throws hg::Error naming the call, the CUDA error's name and text, the file
// and the line. For host code of either build (runtime calls compile with any host compiler).
#include "kernels/cuda/platform.h"
#include "kernels/error.h"

#define HG_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                      \
    const cudaError_t hg_status_ = (call);                                                                  \
    if (hg_status_ != cudaSuccess) {                                                                        \
      HG_FAIL("[cuda] ", #call, " failed: ", cudaGetErrorName(hg_status_), " (", cudaGetErrorString(hg_status_), ")"); \
    }                                                                                                       \
  } while (0)
