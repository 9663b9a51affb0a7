// The build has no cuDNN (or HALFGRAD_CUDNN=OFF): convolutions take the im2col + GEMM path
// of kernels/cuda/conv2d.cu, and nothing here is ever called.
#include "kernels/cuda/cudnn/conv2d_cudnn.h"
#include "kernels/error.h"

namespace hg::kernels::cuda::cudnn {

namespace {
[[noreturn]] void not_built(const char* op) {
  HG_FAIL("[", op, "] this build has no cuDNN (it is optional: found by cmake/HalfgradDependencies.cmake)");
}
}  // namespace

bool enabled() { return false; }
size_t conv2d_workspace_bytes(const Conv2dGeometry&, ConvPass, DType, CUstream_st*) {
  not_built("conv2d_workspace_bytes");
}
void conv2d_forward(const Conv2dGeometry&, const void*, const void*, const void*, void*, void*, size_t, DType,
                    CUstream_st*) {
  not_built("conv2d_forward");
}
void conv2d_backward_data(const Conv2dGeometry&, const void*, const void*, void*, void*, size_t, DType, CUstream_st*) {
  not_built("conv2d_backward_data");
}
void conv2d_backward_filter(const Conv2dGeometry&, const void*, const void*, void*, void*, size_t, DType,
                            CUstream_st*) {
  not_built("conv2d_backward_filter");
}

}  // namespace hg::kernels::cuda::cudnn
