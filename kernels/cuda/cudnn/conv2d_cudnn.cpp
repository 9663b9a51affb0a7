// Convolution through cuDNN (legacy convolution API, present in cuDNN 8 and 9), for nvcc builds that
// found cuDNN (cmake/HalfgradDependencies.cmake), and for the emulated build against the emulated
// cuDNN (kernels/emu/cudnn.cpp: the same header and API subset, computing with the CPU kernels), so
// the descriptors, algorithm choice and workspace plumbing below run in CI; see conv2d_cudnn.h.
// Each convolution call counts one RuntimeCounter::dnn_calls (the bias's cudnnAddTensor is not a
// convolution and is not counted).
//
// Descriptors: x, y and dy as NCHW tensors, weight as an NCHW filter, one convolution descriptor
// (padding, stride, dilation, cross-correlation, groups). Data and compute types: f32 data with
// f32 compute (CUDNN_FMA_MATH, no TF32 unless HALFGRAD_TF32=1, as for the GEMM), f16 and bf16 data
// with f32 compute on tensor cores (fp32 accumulation), f64 with f64 compute. The bias of the
// forward pass is one cudnnAddTensor of [1, OC, 1, 1] onto y; its gradient is a sum the engine does.
//
// Algorithm choice: per (device, geometry, dtype, pass), the first algorithm that cuDNN's heuristics
// (cudnnGetConvolution*Algorithm_v7, ranked best first) report as supported with a workspace of at
// most kMaxWorkspaceBytes; the choice and its math type are cached, so conv2d_workspace_bytes()
// and the call that follows agree, and later steps of the same shape pay nothing. The workspace
// itself is allocated by the caller (the engine: from the caching device allocator).
#include "kernels/cuda/cudnn/conv2d_cudnn.h"

#include <cudnn.h>

#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/runtime_counters.h"

namespace hg::kernels::cuda::cudnn {
namespace {

#define HG_CUDNN_CHECK(call)                                                                                  \
  do {                                                                                                        \
    const cudnnStatus_t hg_status_ = (call);                                                                  \
    if (hg_status_ != CUDNN_STATUS_SUCCESS)                                                                   \
      HG_FAIL("[conv2d] ", #call, " failed with cuDNN status ", int(hg_status_), " (",                       \
              cudnnGetErrorString(hg_status_), ")");                                                          \
  } while (0)

constexpr size_t kMaxWorkspaceBytes = size_t(1) << 30;

struct DeviceHandle {
  std::once_flag once;
  cudnnHandle_t handle = nullptr;
};

cudnnHandle_t handle_for(cudaStream_t stream) {
  static std::array<DeviceHandle, 16> handles;
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  HG_CHECK(device >= 0 && device < int(handles.size()), "[conv2d] device ", device, " out of range");
  DeviceHandle& h = handles[size_t(device)];
  std::call_once(h.once, [&] { HG_CUDNN_CHECK(cudnnCreate(&h.handle)); });
  HG_CUDNN_CHECK(cudnnSetStream(h.handle, stream));
  return h.handle;
}

bool tf32_enabled() {
  const char* v = std::getenv("HALFGRAD_TF32");
  return v != nullptr && v[0] == '1';
}

cudnnDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  HG_FAIL("[conv2d] expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(dtype));
}

int as_int(int64_t v, const char* what) {
  HG_CHECK(v >= 0 && v <= int64_t(1) << 30, "[conv2d] ", what, " = ", v, " is outside cuDNN's int range");
  return int(v);
}

// The descriptors of one call, destroyed however the function leaves.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(const Conv2dGeometry& g, DType dtype) {
    const cudnnDataType_t type = data_type(dtype);
    const cudnnDataType_t compute = dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    HG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    HG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    HG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias));
    HG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    HG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    HG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, as_int(g.batch, "batch"),
                                              as_int(g.in_channels, "in_channels"), as_int(g.height, "height"),
                                              as_int(g.width, "width")));
    HG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, as_int(g.batch, "batch"),
                                              as_int(g.out_channels, "out_channels"), as_int(g.out_h(), "out_h"),
                                              as_int(g.out_w(), "out_w")));
    HG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, type, 1, as_int(g.out_channels, "out_channels"),
                                              1, 1));
    HG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, as_int(g.out_channels, "out_channels"),
                                              as_int(g.group_in_channels(), "in_channels / groups"),
                                              as_int(g.kernel_h, "kernel_h"), as_int(g.kernel_w, "kernel_w")));
    HG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, as_int(g.pad_h, "pad_h"), as_int(g.pad_w, "pad_w"), as_int(g.stride_h, "stride_h"),
        as_int(g.stride_w, "stride_w"), as_int(g.dilation_h, "dilation_h"), as_int(g.dilation_w, "dilation_w"),
        CUDNN_CROSS_CORRELATION, compute));
    HG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(g.groups, "groups")));
    HG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, default_math(dtype)));
  }
  ~Descriptors() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  static cudnnMathType_t default_math(DType dtype) {
    if (dtype == DType::f16 || dtype == DType::bf16) return CUDNN_TENSOR_OP_MATH;
    if (dtype == DType::f32 && !tf32_enabled()) return CUDNN_FMA_MATH;
    return CUDNN_DEFAULT_MATH;
  }
};

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

using Key = std::array<int64_t, 17>;

Key key_of(const Conv2dGeometry& g, ConvPass pass, DType dtype) {
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  return {device,         int64_t(pass), int64_t(dtype), g.batch,    g.in_channels, g.height,     g.width,
          g.out_channels, g.kernel_h,    g.kernel_w,     g.stride_h, g.stride_w,    g.pad_h,      g.pad_w,
          g.dilation_h,   g.dilation_w,  g.groups};
}

// The first usable entry of cuDNN's ranked heuristics.
template <class Perf>
Choice first_usable(const Perf* perf, int count, ConvPass pass) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspaceBytes) {
      return {int(perf[i].algo), perf[i].mathType, perf[i].memory};
    }
  }
  HG_FAIL("[conv2d] cuDNN offers no algorithm for pass ", int(pass), " within a ", kMaxWorkspaceBytes >> 20,
          " MiB workspace");
}

Choice choose(cudnnHandle_t handle, const Descriptors& d, ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward: {
      int max_count = 0, count = 0;
      HG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(max_count > 0 ? max_count : 1));
      HG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, int(perf.size()), &count,
                                                            perf.data()));
      return first_usable(perf.data(), count, pass);
    }
    case ConvPass::BackwardData: {
      int max_count = 0, count = 0;
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(max_count > 0 ? max_count : 1));
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x, int(perf.size()),
                                                                 &count, perf.data()));
      return first_usable(perf.data(), count, pass);
    }
    case ConvPass::BackwardFilter: {
      int max_count = 0, count = 0;
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(max_count > 0 ? max_count : 1));
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w, int(perf.size()),
                                                                   &count, perf.data()));
      return first_usable(perf.data(), count, pass);
    }
  }
  HG_FAIL("[conv2d] unknown pass ", int(pass));
}

// The cached choice for this shape, computed on first use.
Choice choice_for(const Conv2dGeometry& g, ConvPass pass, DType dtype, cudnnHandle_t handle, const Descriptors& d) {
  static std::mutex mutex;
  static std::map<Key, Choice> cache;
  const Key key = key_of(g, pass, dtype);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, choose(handle, d, pass)).first;
  return it->second;
}

// alpha = 1, beta = 0 (and one = 1) in the scaling type cuDNN expects: double for f64, else float.
struct Scalars {
  explicit Scalars(DType dtype) : f64(dtype == DType::f64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return f64 ? static_cast<const void*>(&zero_d) : &zero_f; }
  bool f64;
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
};

void check_workspace(const Choice& c, size_t bytes, const void* workspace) {
  HG_CHECK(bytes >= c.workspace && (c.workspace == 0 || workspace != nullptr), "[conv2d] workspace of ", bytes,
           " bytes is smaller than the chosen cuDNN algorithm's ", c.workspace);
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("HALFGRAD_CUDNN");
    return !(v != nullptr && v[0] == '0');
  }();
  return on;
}

size_t conv2d_workspace_bytes(const Conv2dGeometry& g, ConvPass pass, DType dtype, CUstream_st* stream) {
  const Descriptors d(g, dtype);
  return choice_for(g, pass, dtype, handle_for(stream), d).workspace;
}

void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* weight, const void* bias, void* y,
                    void* workspace, size_t workspace_bytes, DType dtype, CUstream_st* stream) {
  const Descriptors d(g, dtype);
  const cudnnHandle_t handle = handle_for(stream);
  const Choice c = choice_for(g, ConvPass::Forward, dtype, handle, d);
  check_workspace(c, workspace_bytes, workspace);
  HG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  const Scalars s(dtype);
  count_runtime(RuntimeCounter::dnn_calls);
  HG_CUDNN_CHECK(cudnnConvolutionForward(handle, s.one(), d.x, x, d.w, weight, d.conv,
                                         cudnnConvolutionFwdAlgo_t(c.algo), workspace, workspace_bytes, s.zero(), d.y,
                                         y));
  if (bias != nullptr) HG_CUDNN_CHECK(cudnnAddTensor(handle, s.one(), d.bias, bias, s.one(), d.y, y));
}

void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* weight, void* dx, void* workspace,
                          size_t workspace_bytes, DType dtype, CUstream_st* stream) {
  const Descriptors d(g, dtype);
  const cudnnHandle_t handle = handle_for(stream);
  const Choice c = choice_for(g, ConvPass::BackwardData, dtype, handle, d);
  check_workspace(c, workspace_bytes, workspace);
  HG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  const Scalars s(dtype);
  count_runtime(RuntimeCounter::dnn_calls);
  HG_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, s.one(), d.w, weight, d.y, dy, d.conv,
                                              cudnnConvolutionBwdDataAlgo_t(c.algo), workspace, workspace_bytes,
                                              s.zero(), d.x, dx));
}

void conv2d_backward_filter(const Conv2dGeometry& g, const void* x, const void* dy, void* dweight, void* workspace,
                            size_t workspace_bytes, DType dtype, CUstream_st* stream) {
  const Descriptors d(g, dtype);
  const cudnnHandle_t handle = handle_for(stream);
  const Choice c = choice_for(g, ConvPass::BackwardFilter, dtype, handle, d);
  check_workspace(c, workspace_bytes, workspace);
  HG_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  const Scalars s(dtype);
  count_runtime(RuntimeCounter::dnn_calls);
  HG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, s.one(), d.x, x, d.y, dy, d.conv,
                                                cudnnConvolutionBwdFilterAlgo_t(c.algo), workspace, workspace_bytes,
                                                s.zero(), d.w, dweight));
}

}  // namespace hg::kernels::cuda::cudnn
