// GEMM on CUDA tensors, behind the project's own wrapper (kernels_cuda.h: same row-major contract
// as kernels::cpu::gemm), through cuBLASLt in both builds: the real library with nvcc, the emulator's
// cuBLASLt (kernels/emu/cublaslt.cpp: the same header and API subset, computing with the CPU GEMM) in
// the emulated build, so descriptors, leading dimensions, transposes and the epilogue run in CI.
//
// cuBLAS is column-major, and a row-major matrix is its transpose in column major, so C = op(A) op(B)
// (row-major, m x n) is computed as C^T = op(B)^T op(A)^T: the column-major product of B' (n x k) and
// A' (k x m) into C' (n x m, ld = ldc), with the operands swapped and each keeping its own transpose
// flag. f16/bf16 inputs accumulate in fp32 on tensor cores (CUBLAS_COMPUTE_32F); f32 uses full fp32
// unless HALFGRAD_TF32=1 opts into TF32; f64 uses CUBLAS_COMPUTE_64F. One cuBLASLt handle and one
// 32 MiB workspace per device, created on first use (never per call).
//
// Plan cache: a GEMM's descriptors (matmul desc, the three layouts) and the algorithm the heuristic
// chose (with its workspace size) are kept per key = (device, m, n, k, lda, ldb, ldc, dtype,
// transposes, epilogue, compute type, pointer alignments of A, B, C and the bias), so a second
// identical GEMM makes no heuristic query and creates no descriptor (counted: blas_heuristic_queries
// per query, blas_calls per cublasLtMatmul). The alignments are in the key because the heuristic
// picks algorithms for the alignment the preference promises (MIN_ALIGNMENT_*_BYTES, set here to the
// pointers' actual alignment, capped at 256) and for the bias pointer's alignment; an algorithm chosen
// for 256-byte aligned pointers may not run on a sub-matrix view at an odd offset.
// The bias pointer itself changes per call (a different layer, the same shape): it is set on the
// cached descriptor per call (a host-only attribute write) rather than keyed on, which would make one
// plan and one heuristic query per distinct bias address. A plan's own mutex covers that write and
// the cublasLtMatmul that reads it (cuBLASLt copies the value into the launch), so threads sharing a
// plan do not race; the cache's mutex covers lookup and insertion only. Plans live for the process.
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "kernels/cuda/check.h"
#include "kernels/kernels_cuda.h"
#include "kernels/runtime_counters.h"

namespace hg::kernels::cuda {

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

DeviceHandle& handle_for_device(int device) {
  static std::array<DeviceHandle, 16> handles;
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

bool tf32_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("HALFGRAD_TF32");
    return v != nullptr && v[0] == '1';
  }();
  return enabled;
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address.
uint32_t alignment_of(const void* p) {
  uint32_t align = 256;
  while (align > 1 && uintptr_t(p) % align != 0) align /= 2;
  return align;
}

// A cached GEMM configuration: descriptors and the chosen algorithm.
struct Plan {
  std::mutex mutex;  // the bias attribute write and the matmul reading it
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
};

// (device, m, n, k, lda, ldb, ldc, dtype, trans_a, trans_b, bias, compute, align a, b, c, bias)
using PlanKey = std::array<int64_t, 16>;

// Builds a plan: descriptors, then one heuristic query. `bias` (when non-null) is set on the
// descriptor so the heuristic sees its alignment.
std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                int64_t lda, int64_t ldb, int64_t ldc, DType dtype, cublasComputeType_t compute,
                                const void* a, const void* b, const void* bias, const void* c) {
  auto plan = std::make_unique<Plan>();
  Plan& d = *plan;
  // On a failure below the partly built plan is dropped; its descriptors are released here.
  struct Release {
    Plan* p;
    cublasLtMatmulPreference_t preference = nullptr;
    ~Release() {
      if (preference) cublasLtMatmulPreferenceDestroy(preference);
      if (p == nullptr) return;
      if (p->c) cublasLtMatrixLayoutDestroy(p->c);
      if (p->b) cublasLtMatrixLayoutDestroy(p->b);
      if (p->a) cublasLtMatrixLayoutDestroy(p->a);
      if (p->op) cublasLtMatmulDescDestroy(p->op);
    }
  } release{&d};
  const cudaDataType_t type = data_type(dtype);
  const cudaDataType_t scale_type = dtype == DType::f64 ? CUDA_R_64F : CUDA_R_32F;
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
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&release.preference));
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(release.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &kWorkspaceBytes, sizeof kWorkspaceBytes));
  // cuBLAS's A is our B and its B our A; C and D are both our C.
  const uint32_t alignments[4] = {alignment_of(b), alignment_of(a), alignment_of(c), alignment_of(c)};
  const cublasLtMatmulPreferenceAttributes_t alignment_attrs[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    HG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(release.preference, alignment_attrs[i], &alignments[i],
                                                         sizeof alignments[i]));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  count_runtime(RuntimeCounter::blas_heuristic_queries);
  HG_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c, release.preference, 1, &heuristic, &found));
  HG_CHECK(found > 0, "[gemm] cuBLASLt has no algorithm for ", dtype_name(dtype), " m = ", m, ", n = ", n, ", k = ", k);
  d.algo = heuristic.algo;
  d.workspace_bytes = heuristic.workspaceSize;
  release.p = nullptr;  // the plan keeps its descriptors
  return plan;
}

// The plan for this GEMM, built on the first call with its key.
Plan& plan_for(const PlanKey& key, const std::function<std::unique_ptr<Plan>()>& build) {
  static std::mutex mutex;
  static auto* cache = new std::map<PlanKey, std::unique_ptr<Plan>>();  // (lives for the process)
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(key);
  if (it == cache->end()) it = cache->emplace(key, build()).first;
  return *it->second;
}

// C = alpha op(A) op(B) + beta C, plus `bias` per output column when non-null (then beta = 0).
void matmul_lt(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
               const void* b, int64_t ldb, double beta, const void* bias, void* c, int64_t ldc, DType dtype,
               Stream stream) {
  HG_CHECK(m >= 0 && n >= 0 && k >= 0, "[gemm] negative size: m = ", m, ", n = ", n, ", k = ", k);
  if (m == 0 || n == 0) return;
  (void)data_type(dtype);  // (a clear error for a non-floating dtype)
  if (k == 0) {  // C = beta C; an empty product contributes nothing
    HG_CHECK(beta == 0.0 && bias == nullptr, "[gemm] k = 0 with beta != 0 or a bias is not supported on CUDA");
    // (row by row unless contiguous: the runtime subset has no cudaMemset2DAsync, and k = 0 is rare)
    const size_t esize = dtype_size(dtype);
    if (ldc == n) {
      HG_CUDA_CHECK(cudaMemsetAsync(c, 0, size_t(m * n) * esize, stream));
    } else {
      for (int64_t i = 0; i < m; ++i)
        HG_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(c) + size_t(i * ldc) * esize, 0, size_t(n) * esize, stream));
    }
    return;
  }
  const bool f64 = dtype == DType::f64;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F : (dtype == DType::f32 && tf32_enabled() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  DeviceHandle& h = handle_for_device(device);

  const PlanKey key = {device, m, n, k, lda, ldb, ldc, int64_t(dtype), trans_a, trans_b, bias != nullptr,
                       int64_t(compute), alignment_of(a), alignment_of(b), alignment_of(c),
                       bias != nullptr ? int64_t(alignment_of(bias)) : 0};
  Plan& plan = plan_for(key, [&] {
    return make_plan(h.handle, trans_a, trans_b, m, n, k, lda, ldb, ldc, dtype, compute, a, b, bias, c);
  });
  HG_CHECK(plan.workspace_bytes <= kWorkspaceBytes, "[gemm] cuBLASLt chose an algorithm needing ",
           plan.workspace_bytes, " bytes of workspace, more than the ", kWorkspaceBytes, " allowed");

  const float alpha32 = float(alpha), beta32 = float(beta);
  const void* alpha_ptr = f64 ? static_cast<const void*>(&alpha) : &alpha32;
  const void* beta_ptr = f64 ? static_cast<const void*>(&beta) : &beta32;
  std::lock_guard<std::mutex> lock(plan.mutex);
  if (bias != nullptr)
    HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  count_runtime(RuntimeCounter::blas_calls);
  HG_CUBLAS_CHECK(cublasLtMatmul(h.handle, plan.op, alpha_ptr, b, plan.a, a, plan.b, beta_ptr, c, plan.c, c, plan.c,
                                 &plan.algo, h.workspace, kWorkspaceBytes, stream));
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

}  // namespace hg::kernels::cuda
