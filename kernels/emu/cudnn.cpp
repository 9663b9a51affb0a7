// cuDNN for the emulated build: exactly the legacy-convolution subset that
// kernels/cuda/cudnn/conv2d_cudnn.cpp calls, declared by the toolkit's own cudnn.h (g++ reads it),
// with cuDNN's signatures and status codes, computing with the CPU backend's convolution kernels
// (kernels/cpu: im2col + GEMM). A cuDNN function outside the subset is a link error, never a stub.
//
// Subset: cudnnCreate, cudnnSetStream, cudnnGetErrorString; tensor, filter and convolution
// descriptors (create, 4d/2d set, group count, math type, destroy); for each pass the heuristic
// (cudnnGet*Algorithm_v7 and its MaxCount) and the convolution itself (cudnnConvolutionForward,
// BackwardData, BackwardFilter); cudnnAddTensor (the forward's bias).
//
// Semantics (cuDNN's): NCHW tensors, a KCRS filter (K = output channels, C = input channels per
// group), cross-correlation with padding, stride, dilation and groups; every call is
// out = alpha op(inputs) + beta out, alpha/beta host doubles for double data, floats otherwise.
// The emulated algorithm of each pass (FWD_ALGO_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1: the
// deterministic im2col/GEMM kinds) needs the CPU kernel's patch-matrix workspace, reported by the
// heuristic as its memory and used from the caller's workspace, so conv2d_cudnn.cpp's workspace
// plumbing is exercised for real. The work runs on the handle's stream through
// hg::emu::enqueue_host_work. Counting (dnn_calls) is the caller's, as in the nvcc build.
//
// Validated as cuDNN does (CUDNN_STATUS_BAD_PARAM unless noted): null or dead handles and
// descriptors, descriptors never set; non-positive sizes, negative padding, non-positive stride or
// dilation, a group count < 1; tensors whose channels disagree with the filter and the group count
// (C_x = C_w * groups, K divisible by groups); an output tensor whose size is not the convolution's
// output size; data types that differ between tensors and filter; a data/compute type combination
// cuDNN lacks (NOT_SUPPORTED); an algorithm other than the one offered (NOT_SUPPORTED); a workspace
// smaller than the algorithm's; requestedAlgoCount < 1; a null data pointer. Outside the subset
// (NOT_SUPPORTED): formats other than NCHW, CUDNN_CONVOLUTION (flipped) mode. Stricter than a GPU:
// every data and workspace pointer must be emulated device memory (cudaMalloc).
#include <cudnn.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/conv_geometry.h"
#include "kernels/emu/element_access.h"
#include "kernels/emu/runtime.h"
#include "kernels/kernels.h"

namespace {
constexpr uint64_t kHandleMagic = 0x444e'4e48'414e'444c;  // "DNNHANDL"
constexpr uint64_t kTensorMagic = 0x444e'4e54'454e'534f;  // "DNNTENSO"
constexpr uint64_t kFilterMagic = 0x444e'4e46'494c'5445;  // "DNNFILTE"
constexpr uint64_t kConvMagic = 0x444e'4e43'4f4e'5644;    // "DNNCONVD"
}  // namespace

struct cudnnContext {
  uint64_t magic = kHandleMagic;
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  uint64_t magic = kTensorMagic;
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  uint64_t magic = kFilterMagic;
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  uint64_t magic = kConvMagic;
  bool set = false;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

using hg::DType;
using hg::kernels::Conv2dGeometry;
using hg::kernels::ConvPass;

bool ok(const cudnnContext* h) { return h != nullptr && h->magic == kHandleMagic; }
bool ok(const cudnnTensorStruct* t) { return t != nullptr && t->magic == kTensorMagic && t->set; }
bool ok(const cudnnFilterStruct* f) { return f != nullptr && f->magic == kFilterMagic && f->set; }
bool ok(const cudnnConvolutionStruct* c) { return c != nullptr && c->magic == kConvMagic && c->set; }

template <class T>
cudnnStatus_t destroy(T* object, uint64_t magic) {
  if (object == nullptr) return CUDNN_STATUS_SUCCESS;
  if (object->magic != magic) return CUDNN_STATUS_BAD_PARAM;
  object->magic = 0;
  delete object;
  return CUDNN_STATUS_SUCCESS;
}

bool dtype_of(cudnnDataType_t t, DType& out) {
  switch (t) {
    case CUDNN_DATA_FLOAT: out = DType::f32; return true;
    case CUDNN_DATA_DOUBLE: out = DType::f64; return true;
    case CUDNN_DATA_HALF: out = DType::f16; return true;
    case CUDNN_DATA_BFLOAT16: out = DType::bf16; return true;
    default: return false;
  }
}

bool is_device_memory(const void* p) {
  cudaPointerAttributes attributes{};
  return p != nullptr && cudaPointerGetAttributes(&attributes, p) == cudaSuccess &&
         (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged);
}

// x [N, C, H, W], w [K, C / groups, R, S], y [N, K, P, Q]: the geometry, after cuDNN's checks.
struct Problem {
  Conv2dGeometry g;
  DType dtype = DType::f32;
};

cudnnStatus_t problem_of(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                         const cudnnTensorStruct* y, Problem& p) {
  if (!ok(x) || !ok(w) || !ok(conv) || !ok(y)) return CUDNN_STATUS_BAD_PARAM;
  if (x->type != w->type || x->type != y->type) return CUDNN_STATUS_BAD_PARAM;
  if (!dtype_of(x->type, p.dtype)) return CUDNN_STATUS_NOT_SUPPORTED;
  const bool compute_ok = p.dtype == DType::f64 ? conv->compute == CUDNN_DATA_DOUBLE
                          : p.dtype == DType::f16 ? conv->compute == CUDNN_DATA_FLOAT || conv->compute == CUDNN_DATA_HALF
                                                  : conv->compute == CUDNN_DATA_FLOAT;
  if (!compute_ok) return CUDNN_STATUS_NOT_SUPPORTED;
  if (x->c != w->c * conv->groups || w->k % conv->groups != 0) return CUDNN_STATUS_BAD_PARAM;
  Conv2dGeometry& g = p.g;
  g.batch = x->n, g.in_channels = x->c, g.height = x->h, g.width = x->w;
  g.out_channels = w->k, g.kernel_h = w->h, g.kernel_w = w->w;
  g.stride_h = conv->stride_h, g.stride_w = conv->stride_w, g.pad_h = conv->pad_h, g.pad_w = conv->pad_w;
  g.dilation_h = conv->dilation_h, g.dilation_w = conv->dilation_w, g.groups = conv->groups;
  const int64_t span_h = (g.kernel_h - 1) * g.dilation_h + 1, span_w = (g.kernel_w - 1) * g.dilation_w + 1;
  if (span_h > g.height + 2 * g.pad_h || span_w > g.width + 2 * g.pad_w) return CUDNN_STATUS_BAD_PARAM;
  if (y->n != x->n || y->c != w->k || y->h != g.out_h() || y->w != g.out_w()) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

// The one algorithm of each pass, and the workspace it needs (the CPU kernel's patch matrices).
int offered_algo(ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward: return CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
    case ConvPass::BackwardData: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    case ConvPass::BackwardFilter: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  }
  return -1;
}

template <class Perf, class Algo>
cudnnStatus_t heuristic(cudnnHandle_t handle, const Problem& p, cudnnStatus_t valid, ConvPass pass,
                        const cudnnConvolutionStruct* conv, int requested, int* returned, Perf* results) {
  if (!ok(handle)) return CUDNN_STATUS_BAD_PARAM;
  if (valid != CUDNN_STATUS_SUCCESS) return valid;
  if (requested < 1 || returned == nullptr || results == nullptr) return CUDNN_STATUS_BAD_PARAM;
  Perf perf{};
  perf.algo = Algo(offered_algo(pass));
  perf.status = CUDNN_STATUS_SUCCESS;
  perf.time = -1.0f;  // (a heuristic estimate, not a measurement)
  perf.memory = hg::kernels::cpu::conv2d_workspace_bytes(p.g, pass, p.dtype);
  perf.determinism = CUDNN_DETERMINISTIC;
  perf.mathType = conv->math;
  results[0] = perf;
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}

// out = alpha op + beta out: runs `op` into `out` directly when (alpha, beta) = (1, 0), else into a
// scratch copy that is then blended.
template <class Op>
cudnnStatus_t run(cudnnHandle_t handle, const Problem& p, ConvPass pass, int algo, const void* alpha, const void* beta,
                  void* workspace, size_t workspace_bytes, std::vector<const void*> inputs, void* out,
                  int64_t out_numel, Op op) {
  if (algo != offered_algo(pass)) return CUDNN_STATUS_NOT_SUPPORTED;
  if (alpha == nullptr || beta == nullptr) return CUDNN_STATUS_BAD_PARAM;
  for (const void* in : inputs)
    if (!is_device_memory(in)) return CUDNN_STATUS_BAD_PARAM;
  if (!is_device_memory(out)) return CUDNN_STATUS_BAD_PARAM;
  const size_t needed = hg::kernels::cpu::conv2d_workspace_bytes(p.g, pass, p.dtype);
  if (workspace_bytes < needed) return CUDNN_STATUS_BAD_PARAM;
  if (needed > 0 && !is_device_memory(workspace)) return CUDNN_STATUS_BAD_PARAM;
  const bool f64 = p.dtype == DType::f64;
  const double a = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double b = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const DType dtype = p.dtype;
  const cudaError_t enqueued = hg::emu::enqueue_host_work(handle->stream, [=] {
    if (a == 1.0 && b == 0.0) {
      op(out, workspace, workspace_bytes);
      return;
    }
    std::vector<unsigned char> scratch(size_t(out_numel) * hg::dtype_size(dtype));
    op(scratch.data(), workspace, workspace_bytes);
    for (int64_t i = 0; i < out_numel; ++i) {
      const double prior = b == 0.0 ? 0.0 : b * hg::emu::load_element(out, i, dtype);  // (beta = 0: out not read)
      hg::emu::store_element(out, i, dtype, a * hg::emu::load_element(scratch.data(), i, dtype) + prior);
    }
  });
  return enqueued == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

int64_t numel(const cudnnTensorStruct* t) { return int64_t(t->n) * t->c * t->h * t->w; }

}  // namespace

extern "C" {

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN (not produced by the emulated cuDNN)";
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *handle = new cudnnContext{};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!ok(handle) || !hg::emu::detail::is_valid_stream(stream)) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnTensorStruct{};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) { return destroy(desc, kTensorMagic); }

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  DType dtype;
  if (desc == nullptr || desc->magic != kTensorMagic || n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || !dtype_of(type, dtype)) return CUDNN_STATUS_NOT_SUPPORTED;
  desc->type = type, desc->n = n, desc->c = c, desc->h = h, desc->w = w, desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnFilterStruct{};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) { return destroy(desc, kFilterMagic); }

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  DType dtype;
  if (desc == nullptr || desc->magic != kFilterMagic || k <= 0 || c <= 0 || h <= 0 || w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW || !dtype_of(type, dtype)) return CUDNN_STATUS_NOT_SUPPORTED;
  desc->type = type, desc->k = k, desc->c = c, desc->h = h, desc->w = w, desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnConvolutionStruct{};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) { return destroy(desc, kConvMagic); }

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  DType dtype;
  if (desc == nullptr || desc->magic != kConvMagic || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 ||
      dilation_w <= 0)
    return CUDNN_STATUS_BAD_PARAM;
  if (mode != CUDNN_CROSS_CORRELATION || !dtype_of(compute, dtype)) return CUDNN_STATUS_NOT_SUPPORTED;
  desc->pad_h = pad_h, desc->pad_w = pad_w, desc->stride_h = u, desc->stride_w = v;
  desc->dilation_h = dilation_h, desc->dilation_w = dilation_w, desc->compute = compute, desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groups) {
  if (desc == nullptr || desc->magic != kConvMagic || groups < 1) return CUDNN_STATUS_BAD_PARAM;
  desc->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  if (desc == nullptr || desc->magic != kConvMagic) return CUDNN_STATUS_BAD_PARAM;
  if (math != CUDNN_DEFAULT_MATH && math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
      math != CUDNN_FMA_MATH)
    return CUDNN_STATUS_BAD_PARAM;
  desc->math = math;  // (the CPU kernels accumulate in fp32 / fp64 whatever the math type)
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  if (!ok(handle) || count == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *count = 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, count);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int* count) {
  return cudnnGetConvolutionForwardAlgorithmMaxCount(handle, count);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  Problem p;
  const cudnnStatus_t valid = problem_of(x, w, conv, y, p);
  return heuristic<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(handle, p, valid, ConvPass::Forward, conv,
                                                                             requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  Problem p;
  const cudnnStatus_t valid = problem_of(dx, w, conv, dy, p);
  return heuristic<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      handle, p, valid, ConvPass::BackwardData, conv, requested, returned, results);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  Problem p;
  const cudnnStatus_t valid = problem_of(x, dw, conv, dy, p);
  return heuristic<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      handle, p, valid, ConvPass::BackwardFilter, conv, requested, returned, results);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t x_desc,
                                      const void* x, const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  if (!ok(handle)) return CUDNN_STATUS_BAD_PARAM;
  Problem p;
  if (const cudnnStatus_t s = problem_of(x_desc, w_desc, conv, y_desc, p); s != CUDNN_STATUS_SUCCESS) return s;
  return run(handle, p, ConvPass::Forward, algo, alpha, beta, workspace, workspace_bytes, {x, w}, y, numel(y_desc),
             [=](void* out, void* ws, size_t bytes) {
               hg::kernels::cpu::conv2d_forward(p.g, x, w, nullptr, out, ws, bytes, p.dtype);
             });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t w_desc,
                                           const void* w, const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* workspace, size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dx_desc, void* dx) {
  if (!ok(handle)) return CUDNN_STATUS_BAD_PARAM;
  Problem p;
  if (const cudnnStatus_t s = problem_of(dx_desc, w_desc, conv, dy_desc, p); s != CUDNN_STATUS_SUCCESS) return s;
  return run(handle, p, ConvPass::BackwardData, algo, alpha, beta, workspace, workspace_bytes, {w, dy}, dx,
             numel(dx_desc), [=](void* out, void* ws, size_t bytes) {
               hg::kernels::cpu::conv2d_backward_data(p.g, dy, w, out, ws, bytes, p.dtype);
             });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  if (!ok(handle)) return CUDNN_STATUS_BAD_PARAM;
  Problem p;
  if (const cudnnStatus_t s = problem_of(x_desc, dw_desc, conv, dy_desc, p); s != CUDNN_STATUS_SUCCESS) return s;
  return run(handle, p, ConvPass::BackwardFilter, algo, alpha, beta, workspace, workspace_bytes, {x, dy}, dw,
             p.g.weight_numel(), [=](void* out, void* ws, size_t bytes) {
               hg::kernels::cpu::conv2d_backward_filter(p.g, x, dy, out, ws, bytes, p.dtype);
             });
}

// C = alpha A + beta C, A broadcast over every dimension where it has size 1 (the bias [1, K, 1, 1]).
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t a_desc,
                             const void* A, const void* beta, const cudnnTensorDescriptor_t c_desc, void* C) {
  DType dtype;
  if (!ok(handle) || !ok(a_desc) || !ok(c_desc) || alpha == nullptr || beta == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (a_desc->type != c_desc->type || !dtype_of(c_desc->type, dtype)) return CUDNN_STATUS_BAD_PARAM;
  const int a_dims[4] = {a_desc->n, a_desc->c, a_desc->h, a_desc->w};
  const int c_dims[4] = {c_desc->n, c_desc->c, c_desc->h, c_desc->w};
  for (int i = 0; i < 4; ++i)
    if (a_dims[i] != c_dims[i] && a_dims[i] != 1) return CUDNN_STATUS_BAD_PARAM;
  if (!is_device_memory(A) || !is_device_memory(C)) return CUDNN_STATUS_BAD_PARAM;
  const bool f64 = dtype == DType::f64;
  const double a = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double b = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const cudaError_t enqueued = hg::emu::enqueue_host_work(handle->stream, [=] {
    int64_t at = 0;
    for (int n = 0; n < c_dims[0]; ++n)
      for (int c = 0; c < c_dims[1]; ++c)
        for (int h = 0; h < c_dims[2]; ++h)
          for (int w = 0; w < c_dims[3]; ++w, ++at) {
            const int64_t from = ((int64_t(a_dims[0] == 1 ? 0 : n) * a_dims[1] + (a_dims[1] == 1 ? 0 : c)) * a_dims[2] +
                                  (a_dims[2] == 1 ? 0 : h)) * a_dims[3] + (a_dims[3] == 1 ? 0 : w);
            const double prior = b == 0.0 ? 0.0 : b * hg::emu::load_element(C, at, dtype);
            hg::emu::store_element(C, at, dtype, a * hg::emu::load_element(A, from, dtype) + prior);
          }
  });
  return enqueued == cudaSuccess ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
