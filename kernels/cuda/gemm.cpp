// GEMM on CUDA tensors, behind the project's own wrapper (kernels_cuda.h: same row-major contract
// as kernels::cpu::gemm).
//
// Real GPU: cuBLASLt. cuBLAS is column-major, and a row-major matrix is its transpose in column
// major, so C = op(A) op(B) (row-major, m x n) is computed as C^T = op(B)^T op(A)^T: the column-major
// product of B' (n x k) and A' (k x m) into C' (n x m, ld = ldc), with the operands swapped and
// each keeping its own transpose flag. f16/bf16 inputs accumulate in fp32 on tensor cores
// (CUBLAS_COMPUTE_32F); f32 uses full fp32 unless HALFGRAD_TF32=1 opts into TF32; f64 uses
// CUBLAS_COMPUTE_64F. One cuBLASLt handle and a 32 MiB workspace per device, created on first use.
//
// Emulator: device memory is host memory, so the CPU backend's GEMM runs on it directly.
#include <cstdlib>

#include "kernels/cuda/check.h"
#include "kernels/kernels_cuda.h"

#if !defined(HALFGRAD_EMULATED_CUDA)
#include <cublasLt.h>

#include <array>
#include <mutex>
#endif

namespace hg::kernels::cuda {

#if defined(HALFGRAD_EMULATED_CUDA)

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType dtype, Stream stream) {
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));  // (a no-op on the emulator: work runs at enqueue)
  cpu::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, dtype);
}

void gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
               const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, DType dtype, Stream stream) {
  HG_CUDA_CHECK(cudaStreamSynchronize(stream));
  cpu::gemm_bias(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, bias, c, ldc, dtype);
}

#else

namespace {

#define HG_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                          \
    const cublasStatus_t hg_status_ = (call);                                                   \
    if (hg_status_ != CUBLAS_STATUS_SUCCESS)                                                    \
      HG_FAIL("[gemm] ", #call, " failed with cuBLAS status ", int(hg_status_), " (",           \
              cublasLtGetStatusString(hg_status_), ")");                                        \
  } while (0)

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

struct DeviceHandle {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

DeviceHandle& handle_for_current_device() {
  static std::array<DeviceHandle, 16> handles;
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  HG_CHECK(device >= 0 && device < int(handles.size()), "[gemm] device ", device, " out of range");
  DeviceHandle& h = handles[size_t(device)];
  std::call_once(h.once, [&] {
    HG_CUBLAS_CHECK(cublasLtCreate(&h.handle));
    HG_CUDA_CHECK(cudaMalloc(&h.workspace, kWorkspaceBytes));
  });
  return h;
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: break;
  }
  HG_FAIL("[gemm] expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(dtype));
}

// Destroys cuBLASLt descriptors however the function leaves.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

bool tf32_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("HALFGRAD_TF32");
    return v != nullptr && v[0] == '1';
  }();
  return enabled;
}

// C = alpha op(A) op(B) + beta C, plus `bias` per output column when non-null (then beta = 0).
void matmul_lt(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
               const void* b, int64_t ldb, double beta, const void* bias, void* c, int64_t ldc, DType dtype,
               Stream stream) {
  HG_CHECK(m >= 0 && n >= 0 && k >= 0, "[gemm] negative size: m = ", m, ", n = ", n, ", k = ", k);
  if (m == 0 || n == 0) return;
  const cudaDataType_t type = data_type(dtype);
  if (k == 0) {  // C = beta C; an empty product contributes nothing
    HG_CHECK(beta == 0.0 && bias == nullptr, "[gemm] k = 0 with beta != 0 or a bias is not supported on CUDA");
    const size_t esize = dtype_size(dtype);
    HG_CUDA_CHECK(cudaMemset2DAsync(c, size_t(ldc) * esize, 0, size_t(n) * esize, size_t(m), stream));
    return;
  }
  const bool f64 = dtype == DType::f64;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F : (dtype == DType::f32 && tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;
  DeviceHandle& h = handle_for_current_device();

  Descriptors d;
  HG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, compute, scale_type));
  // Column-major C' = op(B') op(A'): cuBLAS's first operand is our B, its second our A.
  const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
  if (bias != nullptr) {
    // In the column-major view the output C' is n x m: the bias (one value per output column of C)
    // is one value per row of C', which is what CUBLASLT_EPILOGUE_BIAS broadcasts.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type));
  }
  // Stored (column-major) shapes: B' is n x k (k x n when transposed), A' is k x m (m x k when transposed).
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, type, trans_b ? k : n, trans_b ? n : k, ldb));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, type, trans_a ? m : k, trans_a ? k : m, lda));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, type, n, m, ldc));
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &kWorkspaceBytes, sizeof kWorkspaceBytes));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  HG_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h.handle, d.op, d.a, d.b, d.c, d.c, d.preference, 1, &heuristic, &found));
  HG_CHECK(found > 0, "[gemm] cuBLASLt has no algorithm for ", dtype_name(dtype), " m = ", m, ", n = ", n, ", k = ", k);

  const float alpha32 = float(alpha), beta32 = float(beta);
  const void* alpha_ptr = f64 ? static_cast<const void*>(&alpha) : &alpha32;
  const void* beta_ptr = f64 ? static_cast<const void*>(&beta) : &beta32;
  HG_CUBLAS_CHECK(cublasLtMatmul(h.handle, d.op, alpha_ptr, b, d.a, a, d.b, beta_ptr, c, d.c, c, d.c,
                                 &heuristic.algo, h.workspace, kWorkspaceBytes, stream));
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType dtype, Stream stream) {
  matmul_lt(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, nullptr, c, ldc, dtype, stream);
}

void gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
               const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, DType dtype, Stream stream) {
  HG_CHECK(bias != nullptr, "[gemm_bias] bias is null; expected a vector of n = ", n, " values");
  matmul_lt(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0, bias, c, ldc, dtype, stream);
}

#endif

}  // namespace hg::kernels::cuda
