// cuBLASLt for the emulated build: exactly the subset kernels/cuda/gemm.cpp calls, declared by the
// toolkit's own cublasLt.h (g++ reads it), with the library's signatures and status codes, computing
// with the CPU backend's GEMM. A cuBLASLt function outside the subset is a link error, never a stub.
//
// Semantics (cuBLASLt's, column-major): D = alpha op(A) op(B) + beta C (+ bias[i] on every row i of D
// with CUBLASLT_EPILOGUE_BIAS), op(A) m x k, op(B) k x n, C and D m x n; a layout (rows, cols, ld)
// describes the STORED matrix, element (i, j) at i + j ld. A column-major matrix is the row-major
// matrix of its transpose with row stride ld, so D^T = op(B)^T op(A)^T is one row-major cpu::gemm
// (M = n, N = m, first operand B, second A, each transposed iff its op is T); the bias, per row of D,
// is per column of D^T, which is cpu::gemm_bias's convention. bf16 is multiplied in fp32 after an exact
// widening (gemm_bf16_keeping_subnormals): cpu::gemm's AMX and vdpbf16ps paths read bf16 subnormal
// inputs as zero, GPU tensor cores keep them.
//
// Storage: descriptors are the header's semi-opaque structs (cublasLtMatmulDescOpaque_t, 256 bytes;
// layouts, preferences and algorithms 64 bytes); each holds a plain struct with a magic word, so a
// destroyed or foreign descriptor is refused.
//
// Validated as the library does, before anything runs (CUBLAS_STATUS_INVALID_VALUE unless noted):
// null handle (NOT_INITIALIZED); null or dead descriptors; an attribute buffer of the wrong size; a
// layout whose ld is smaller than its rows; op(A), op(B), C and D whose dimensions disagree; C and D
// at the same address with different layouts; mixed data types, or a data/compute/scale combination
// cuBLASLt lacks (NOT_SUPPORTED); an epilogue other than DEFAULT and BIAS, a bias type other than D's
// (NOT_SUPPORTED, outside the subset); a null bias with the BIAS epilogue; a workspace smaller than the
// algorithm's; requestedAlgoCount <= 0.
// Alignment, which a first GPU run gets wrong: the heuristic assumes the preference's
// MIN_ALIGNMENT_{A,B,C,D}_BYTES (default 256) and the alignment of the bias pointer set on the
// descriptor, and the algorithm it returns requires them; cublasLtMatmul with a pointer less aligned
// than its algorithm assumed fails (INVALID_VALUE) here rather than faulting or misreading on a GPU.
// Likewise an algorithm is only valid for the configuration (types, transposes, epilogue) it was
// found for. Stricter than a GPU: every pointer must be emulated device memory (cudaMalloc), and the
// first and last byte of the workspace are written, so a workspace size larger than its allocation
// is an AddressSanitizer report.
//
// The emulated algorithm needs no workspace (workspaceSize 0). Alpha and beta are host pointers
// (CUBLASLT_POINTER_MODE_HOST, the default: the subset sets no pointer mode), float for 32-bit
// compute, double for 64-bit; CUBLAS_COMPUTE_32F_FAST_TF32 computes in full fp32. The matmul runs on
// the stream through hg::emu::enqueue_host_work, with the descriptors' values copied at the call, so
// a captured graph replays what was asked then. Counting (blas_calls, blas_heuristic_queries) is the
// caller's (gemm.cpp), so the nvcc build counts the same.
#include <cublasLt.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/emu/element_access.h"
#include "kernels/emu/runtime.h"
#include "kernels/kernels.h"

struct cublasLtContext {
  uint64_t magic;
};

namespace {

using hg::DType;

constexpr uint64_t kHandleMagic = 0x4c54'4841'4e44'4c45;  // "LTHANDLE"
constexpr uint64_t kDescMagic = 0x4c54'4d4d'4445'5343;    // "LTMMDESC"
constexpr uint64_t kLayoutMagic = 0x4c54'4c41'594f'5554;  // "LTLAYOUT"
constexpr uint64_t kPrefMagic = 0x4c54'5052'4546'4552;    // "LTPREFER"
constexpr uint64_t kAlgoMagic = 0x4c54'414c'474f'454d;    // "LTALGOEM"
constexpr uint32_t kDefaultAlignment = 256;

struct MatmulDesc {
  uint64_t magic;
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t trans_a, trans_b;
  uint32_t epilogue;
  int32_t bias_type;  // -1: D's type
  const void* bias;
};
struct Layout {
  uint64_t magic;
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct Preference {
  uint64_t magic;
  uint64_t max_workspace;
  uint32_t alignment[4];  // A, B, C, D
};
struct Algo {
  uint64_t magic;
  uint64_t signature;     // the configuration it was found for
  uint32_t alignment[5];  // A, B, C, D, bias: what the algorithm assumes of the pointers
};
static_assert(sizeof(MatmulDesc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(Preference) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

template <class T, class Opaque>
bool load(const Opaque* opaque, uint64_t magic, T& out) {
  if (opaque == nullptr) return false;
  std::memcpy(&out, opaque, sizeof out);
  return out.magic == magic;
}
template <class T, class Opaque>
void store(Opaque* opaque, const T& value) {
  std::memcpy(static_cast<void*>(opaque), &value, sizeof value);
}
template <class Opaque>
cublasStatus_t destroy(Opaque* opaque, uint64_t magic) {
  uint64_t word = 0;
  if (opaque == nullptr) return CUBLAS_STATUS_SUCCESS;  // (as the library: destroying null is fine)
  std::memcpy(&word, opaque, sizeof word);
  if (word != magic) return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(static_cast<void*>(opaque), 0, sizeof *opaque);
  delete opaque;
  return CUBLAS_STATUS_SUCCESS;
}

bool handle_ok(cublasLtHandle_t h) { return h != nullptr && h->magic == kHandleMagic; }

bool dtype_of(cudaDataType_t t, DType& out) {
  switch (t) {
    case CUDA_R_32F: out = DType::f32; return true;
    case CUDA_R_64F: out = DType::f64; return true;
    case CUDA_R_16F: out = DType::f16; return true;
    case CUDA_R_16BF: out = DType::bf16; return true;
    default: return false;
  }
}

uint32_t alignment_of(const void* p) {
  const auto a = uintptr_t(p);
  uint32_t align = kDefaultAlignment;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

bool is_device_memory(const void* p) {
  cudaPointerAttributes attributes{};
  return cudaPointerGetAttributes(&attributes, p) == cudaSuccess &&
         (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged);
}

// One validated problem: sizes in the column-major view, the data type, the transposes.
struct Problem {
  MatmulDesc desc;
  Layout a, b, c, d;
  DType dtype;
  uint64_t m, n, k;
  bool ta, tb;
  uint64_t signature;
};

bool op_ok(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// The data / compute / scale combinations of cuBLASLt's table that the subset uses (one data type for
// A, B, C and D).
bool types_supported(DType dtype, cublasComputeType_t compute, cudaDataType_t scale) {
  switch (dtype) {
    case DType::f64: return (compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC) && scale == CUDA_R_64F;
    case DType::f32:
      return (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
              compute == CUBLAS_COMPUTE_32F_FAST_TF32 || compute == CUBLAS_COMPUTE_32F_FAST_16F ||
              compute == CUBLAS_COMPUTE_32F_FAST_16BF) &&
             scale == CUDA_R_32F;
    case DType::f16:
    case DType::bf16: return (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC) && scale == CUDA_R_32F;
    default: return false;
  }
}

cublasStatus_t validate(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                        cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, Problem& p) {
  if (!load(op, kDescMagic, p.desc) || !load(a, kLayoutMagic, p.a) || !load(b, kLayoutMagic, p.b) ||
      !load(c, kLayoutMagic, p.c) || !load(d, kLayoutMagic, p.d))
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const Layout* l : {&p.a, &p.b, &p.c, &p.d}) {
    if (l->ld < int64_t(l->rows) || l->ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
    // (empty matrices: gemm.cpp never asks for them; outside the subset)
    if (l->rows == 0 || l->cols == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (p.a.type != p.b.type || p.a.type != p.c.type || p.a.type != p.d.type || !dtype_of(p.d.type, p.dtype))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!types_supported(p.dtype, p.desc.compute, p.desc.scale)) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.ta = p.desc.trans_a != CUBLAS_OP_N;  // (OP_C is OP_T for real types)
  p.tb = p.desc.trans_b != CUBLAS_OP_N;
  p.m = p.d.rows, p.n = p.d.cols;
  p.k = p.ta ? p.a.rows : p.a.cols;
  const uint64_t a_rows = p.ta ? p.a.cols : p.a.rows;
  const uint64_t b_rows = p.tb ? p.b.cols : p.b.rows, b_cols = p.tb ? p.b.rows : p.b.cols;
  if (a_rows != p.m || b_cols != p.n || b_rows != p.k || p.c.rows != p.m || p.c.cols != p.n)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (p.desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT && p.desc.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool bias = p.desc.epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (bias && p.desc.bias_type != -1 && p.desc.bias_type != int32_t(p.d.type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.signature = uint64_t(p.desc.compute) | uint64_t(p.desc.scale) << 8 | uint64_t(p.d.type) << 16 |
                uint64_t(p.ta) << 24 | uint64_t(p.tb) << 25 | uint64_t(p.desc.epilogue) << 32;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

namespace {

// A stored row-major bf16 matrix (rows x cols, row stride ld) widened to a dense fp32 one (exact).
std::vector<float> widen_bf16(const void* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    hg::kernels::cpu::to_float(static_cast<const hg::bfloat16*>(x) + r * ld, out.data() + r * cols, cols);
  return out;
}

// The bf16 GEMM (row-major, cpu::gemm's arguments; bias null or n values) through fp32: cpu::gemm's
// own bf16 paths (AMX tdpbf16ps, vdpbf16ps) read bf16 subnormal inputs as zero, but GPU tensor
// cores keep them, so the emulator widens A, B, C and the bias to fp32 (exact), multiplies in fp32
// and rounds C to bf16 once (nearest even), as the widening CPU path does (docs/precision.md).
void gemm_bf16_keeping_subnormals(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                                  int64_t lda, const void* b, int64_t ldb, double beta, const void* bias, void* c,
                                  int64_t ldc) {
  namespace cpu = hg::kernels::cpu;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  const std::vector<float> a32 = widen_bf16(a, a_rows, a_cols, lda), b32 = widen_bf16(b, b_rows, b_cols, ldb);
  std::vector<float> c32 = widen_bf16(c, m, n, ldc);
  if (bias) {
    const std::vector<float> bias32 = widen_bf16(bias, 1, n, n);
    cpu::gemm_bias(ta, tb, m, n, k, alpha, a32.data(), a_cols, b32.data(), b_cols, bias32.data(), c32.data(), n,
                   hg::DType::f32);
  } else {
    cpu::gemm(ta, tb, m, n, k, alpha, a32.data(), a_cols, b32.data(), b_cols, beta, c32.data(), n, hg::DType::f32);
  }
  for (int64_t r = 0; r < m; ++r) cpu::from_float(c32.data() + r * n, static_cast<hg::bfloat16*>(c) + r * ldc, n);
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{kHandleMagic};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->magic = 0;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* opaque = new cublasLtMatmulDescOpaque_t{};
  store(opaque, MatmulDesc{kDescMagic, compute, scale, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, -1, nullptr});
  *desc = opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return destroy(desc, kDescMagic); }

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  MatmulDesc d;
  if (!load(desc, kDescMagic, d) || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto read = [&](auto& field) {
    if (size != sizeof field) return false;
    std::memcpy(&field, buf, size);
    return true;
  };
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = read(d.trans_a) && op_ok(d.trans_a); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = read(d.trans_b) && op_ok(d.trans_b); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = read(d.epilogue); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read(d.bias); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = read(d.bias_type); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // an attribute outside the subset gemm.cpp sets
  }
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  store(desc, d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* opaque = new cublasLtMatrixLayoutOpaque_t{};
  store(opaque, Layout{kLayoutMagic, type, rows, cols, ld});
  *layout = opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { return destroy(layout, kLayoutMagic); }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* opaque = new cublasLtMatmulPreferenceOpaque_t{};
  store(opaque, Preference{kPrefMagic, 0, {kDefaultAlignment, kDefaultAlignment, kDefaultAlignment, kDefaultAlignment}});
  *pref = opaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { return destroy(pref, kPrefMagic); }

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  Preference p;
  if (!load(pref, kPrefMagic, p) || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  int slot = -1;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (size != sizeof p.max_workspace) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&p.max_workspace, buf, size);
      store(pref, p);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: slot = 0; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: slot = 1; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: slot = 2; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: slot = 3; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;  // outside the subset gemm.cpp sets
  }
  if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&p.alignment[slot], buf, size);
  store(pref, p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  Preference p;
  if (requested <= 0 || results == nullptr || returned == nullptr || !load(pref, kPrefMagic, p))
    return CUBLAS_STATUS_INVALID_VALUE;
  Problem problem;
  if (const cublasStatus_t s = validate(op, a, b, c, d, problem); s != CUBLAS_STATUS_SUCCESS) return s;
  Algo algo{kAlgoMagic, problem.signature, {p.alignment[0], p.alignment[1], p.alignment[2], p.alignment[3], 0}};
  algo.alignment[4] = problem.desc.epilogue == CUBLASLT_EPILOGUE_BIAS ? alignment_of(problem.desc.bias) : 1;
  for (uint32_t align : algo.alignment)
    if (align == 0 || (align & (align - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  cublasLtMatmulHeuristicResult_t result{};
  store(&result.algo, algo);
  result.workspaceSize = 0;
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  results[0] = result;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_desc, const void* B, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_desc, void* D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo_ptr, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  Problem p;
  if (const cublasStatus_t s = validate(op, a_desc, b_desc, c_desc, d_desc, p); s != CUBLAS_STATUS_SUCCESS) return s;
  // (the library runs its own heuristic when algo is null; gemm.cpp always passes one: outside the subset)
  Algo algo;
  if (!load(algo_ptr, kAlgoMagic, algo)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algo.signature != p.signature) return CUBLAS_STATUS_INVALID_VALUE;
  if (alpha == nullptr || beta == nullptr || A == nullptr || B == nullptr || C == nullptr || D == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool bias = p.desc.epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (bias && p.desc.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (C == D && (p.c.ld != p.d.ld)) return CUBLAS_STATUS_INVALID_VALUE;
  const void* pointers[5] = {A, B, C, D, bias ? p.desc.bias : nullptr};
  for (int i = 0; i < 5; ++i) {
    if (pointers[i] == nullptr) continue;
    if (uintptr_t(pointers[i]) % algo.alignment[i] != 0 || !is_device_memory(pointers[i]))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (workspace_bytes > 0 && (workspace == nullptr || !is_device_memory(workspace))) return CUBLAS_STATUS_INVALID_VALUE;

  const bool f64 = p.dtype == DType::f64;
  const double alpha_v = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double beta_v = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const cudaError_t enqueued = hg::emu::enqueue_host_work(stream, [=] {
    namespace cpu = hg::kernels::cpu;
    auto* ws = static_cast<unsigned char*>(workspace);
    if (workspace_bytes > 0) ws[0] = ws[workspace_bytes - 1] = 0xff;  // the algorithm may use all of it
    const int64_t m = int64_t(p.m), n = int64_t(p.n), k = int64_t(p.k);
    const size_t esize = hg::dtype_size(p.dtype);
    if (C != D && beta_v != 0.0) {  // out of place: D starts as C, then D = alpha op(A) op(B) + beta D
      for (int64_t j = 0; j < n; ++j)
        std::memcpy(static_cast<char*>(D) + size_t(j * p.d.ld) * esize,
                    static_cast<const char*>(C) + size_t(j * p.c.ld) * esize, size_t(m) * esize);
    }
    const bool fused_bias = bias && beta_v == 0.0;
    if (p.dtype == DType::bf16) {  // fp32 inside, bf16 subnormal inputs kept as on the GPU
      gemm_bf16_keeping_subnormals(p.tb, p.ta, n, m, k, alpha_v, B, p.b.ld, A, p.a.ld, beta_v,
                                   fused_bias ? p.desc.bias : nullptr, D, p.d.ld);
    } else if (fused_bias) {
      cpu::gemm_bias(p.tb, p.ta, n, m, k, alpha_v, B, p.b.ld, A, p.a.ld, p.desc.bias, D, p.d.ld, p.dtype);
    } else {
      cpu::gemm(p.tb, p.ta, n, m, k, alpha_v, B, p.b.ld, A, p.a.ld, beta_v, D, p.d.ld, p.dtype);
    }
    if (fused_bias) return;
    if (bias) {
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) {
          const int64_t at = i + j * p.d.ld;
          hg::emu::store_element(D, at, p.dtype,
                                  hg::emu::load_element(D, at, p.dtype) + hg::emu::load_element(p.desc.bias, i, p.dtype));
        }
    }
  });
  return enqueued == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
