#pragma once
// cuDNN behind the project's own convolution wrapper (kernels/cuda/conv2d.cu). Two translation
// units implement it, chosen by CMake: conv2d_cudnn.cpp (nvcc builds that found cuDNN, and the
// emulated build, against the emulated cuDNN of kernels/emu/cudnn.cpp) and no_cudnn.cpp (builds
// without cuDNN, or HALFGRAD_CUDNN=OFF), whose enabled() is false so every convolution takes the
// im2col + GEMM path.
#include <cstddef>

#include "kernels/conv_geometry.h"
#include "kernels/dtype.h"

struct CUstream_st;

namespace hg::kernels::cuda::cudnn {

// Built with cuDNN and not switched off with HALFGRAD_CUDNN=0 (read once).
bool enabled();
// The workspace of the algorithm chosen for this geometry, dtype and pass (cached per shape).
size_t conv2d_workspace_bytes(const Conv2dGeometry& g, ConvPass pass, DType dtype, CUstream_st* stream);
void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                    void* workspace, size_t workspace_bytes, DType dtype, CUstream_st* stream);
void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* weight, void* dx, void* workspace,
                          size_t workspace_bytes, DType dtype, CUstream_st* stream);
void conv2d_backward_filter(const Conv2dGeometry& g, const void* x, const void* dy, void* dweight, void* workspace,
                            size_t workspace_bytes, DType dtype, CUstream_st* stream);

}  // namespace hg::kernels::cuda::cudnn
