// CPU GEMM: C[m, n] = alpha * op(A) op(B) + beta * C, row-major, lda/ldb/ldc row strides,
// op(A) = A^T when trans_a (then A is stored [k, m]), op(B) = B^T when trans_b (B stored [n, k]).
// The paths and the measured figures are described in docs/cpu_gemm.md.
//
// - gemm_reference: the oracle, a plain triple loop accumulating in acc_t (float; double for f64).
// - gemm, f32: the packed AVX-512 GEMM of gemm_avx512.cpp when the CPU has AVX-512 (checked once at
//   run time, so one binary runs everywhere), Eigen otherwise. Matrix-vector-like and tiny products
//   go to Eigen on every CPU: there packing and zero-padding to 14 x 32 tiles cost more than the
//   micro-kernel saves (measured: Eigen's GEMV is 2-3x faster at m = 1 or n = 1).
// - gemm, f64: Eigen.
// - gemm, bf16: AMX tiles first (gemm_bf16_amx.cpp) when the CPU has AMX-BF16 and m * n >= 256,
//   then the vdpbf16ps GEMM
//   (gemm_bf16_avx512.cpp) when the CPU has AVX512_BF16, else the packed fp32 GEMM widening bf16
//   while packing (gemm_half_via_f32_avx512). fp32 sums over all of k, C rounded once to nearest even.
// - gemm, f16: AMX tiles when the CPU has AMX-BF16, min(m, n) >= 16 and m n k >= 64^3, each f16
//   split exactly into two bf16 pieces (hi + lo) and summed as hi*hi + hi*lo + lo*hi in fp32
//   (gemm_f16_amx in gemm_bf16_amx.cpp; the dropped lo*lo is <= 2^-16 |a b| per product, 32x
//   below f16's own rounding of C); elsewhere (Zen 4: vdpbf16ps at 2x FMA would do 3x the work) the packed fp32
//   GEMM widening f16 while packing (vcvtph2ps). C rounded once.
// - f16/bf16 without AVX-512, and m < 4 or n < 8 (see half_better_unpacked): A, B (and C when
//   beta != 0) are converted to f32 temporaries, multiplied by the f32 GEMM (Eigen there) and the
//   result rounded back to nearest even once.
// - gemm_bias on the packed paths (f32, f16, bf16): the tile store adds the bias row in fp32 where
//   it would add beta * C (C is not read; no pass to fill C first), and a half C is rounded once. The
//   AMX path instead starts C as the bias rows (a parallel fill) and accumulates onto them (beta = 1).
//   Elsewhere every row of C starts as the bias and the GEMM runs with beta = 1 (the same sums).
// - Which of the packed paths a shape takes (AMX, vdpbf16ps or the fp32 kernel; and the f32 kernel's
//   tile) is not the CPU flags' call but the calibrated plan's (gemm_calibration.h): the candidates
//   timed on this CPU per shape class, cached per CPU model. The shape gates above still apply.
// - HG_CPU_GEMM=auto|flags|amx|amx4|avx512|fp32 (read once): auto (default) is the calibrated plan,
//   flags the feature-flag rule the bullets above describe (AMX, else vdpbf16ps, else fp32); the rest
//   force the bf16 and f16 paths, to compare them (docs/cpu_gemm.md): amx = AMX for every shape (f16:
//   3 products), amx4 = the same with f16's 4th product lo*lo (exact products), avx512 = vdpbf16ps for
//   bf16 and the fp32 kernel for f16 (no f16 dot product accumulates in fp32 here), fp32 = the fp32
//   kernel for both. Forcing a path this CPU lacks is an hg::Error at the first half GEMM, never a
//   silent fallback.
//
// beta == 0 means C is never read (NaN or garbage in C is overwritten), and alpha == 0 or k == 0
// means C = beta * C without reading A or B (the BLAS conventions).

// Eigen's AVX-512 code trips GCC 12's false -Wmaybe-uninitialized on the intrinsics' undefined
// merge operands (GCC bug 105593, fixed in GCC 13); the pragma covers the headers it comes from.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_calibration.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg::kernels::cpu {
namespace {

// The stored shape of an operand: op(X) is [rows_of_op, cols_of_op] and X is stored transposed
// when `transposed`.
struct StoredShape {
  int64_t rows, cols;
};
StoredShape stored_shape(bool transposed, int64_t op_rows, int64_t op_cols) {
  return transposed ? StoredShape{op_cols, op_rows} : StoredShape{op_rows, op_cols};
}

void check_arguments(const char* op, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                     int64_t ldb, int64_t ldc, DType dtype) {
  HG_CHECK(m >= 0 && n >= 0 && k >= 0, "[", op, "] expected non-negative sizes, got m=", m, ", n=", n, ", k=", k);
  HG_CHECK(is_floating(dtype), "[", op, "] expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(dtype));
  const StoredShape a = stored_shape(trans_a, m, k), b = stored_shape(trans_b, k, n);
  HG_CHECK(lda >= a.cols, "[", op, "] expected lda >= ", a.cols, " for A stored [", a.rows, ", ", a.cols,
           "] (trans_a=", trans_a, "), got lda=", lda);
  HG_CHECK(ldb >= b.cols, "[", op, "] expected ldb >= ", b.cols, " for B stored [", b.rows, ", ", b.cols,
           "] (trans_b=", trans_b, "), got ldb=", ldb);
  HG_CHECK(ldc >= n, "[", op, "] expected ldc >= ", n, " for C [", m, ", ", n, "], got ldc=", ldc);
}

// C = beta * C, computed in acc_t; C is not read when beta == 0.
template <class T>
void scale_c(int64_t m, int64_t n, double beta, T* c, int64_t ldc) {
  using Acc = acc_t<T>;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T& out = c[i * ldc + j];
      out = beta == 0.0 ? T(Acc(0)) : T(Acc(beta) * Acc(out));
    }
}

// ---- reference -----------------------------------------------------------------------------------

template <class T>
void gemm_reference_typed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const T* a,
                          int64_t lda, const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  using Acc = acc_t<T>;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      Acc sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const Acc a_ip = Acc(trans_a ? a[p * lda + i] : a[i * lda + p]);
        const Acc b_pj = Acc(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
        sum += a_ip * b_pj;
      }
      T& out = c[i * ldc + j];
      Acc result = Acc(alpha) * sum;
      if (beta != 0.0) result += Acc(beta) * Acc(out);
      out = T(result);
    }
}

// ---- Eigen ---------------------------------------------------------------------------------------

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstStridedMap = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using StridedMap = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
void gemm_eigen(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const StoredShape as = stored_shape(trans_a, m, k), bs = stored_shape(trans_b, k, n);
  const ConstStridedMap<T> a_stored(a, as.rows, as.cols, Eigen::OuterStride<>(lda));
  const ConstStridedMap<T> b_stored(b, bs.rows, bs.cols, Eigen::OuterStride<>(ldb));
  StridedMap<T> c_map(c, m, n, Eigen::OuterStride<>(ldc));
  // `noalias() =` writes the product over C without reading it, which is what beta == 0 promises.
  const auto multiply = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {
      c_map.noalias() = alpha * op_a * op_b;
    } else {
      c_map *= beta;
      c_map.noalias() += alpha * op_a * op_b;
    }
  };
  if (!trans_a && !trans_b) multiply(a_stored, b_stored);
  if (!trans_a && trans_b) multiply(a_stored, b_stored.transpose());
  if (trans_a && !trans_b) multiply(a_stored.transpose(), b_stored);
  if (trans_a && trans_b) multiply(a_stored.transpose(), b_stored.transpose());
}

// ---- f32 -----------------------------------------------------------------------------------------

bool has_avx512() {
  static const bool has = detail::cpu_has_avx512_gemm();
  return has;
}

// Shapes where packing into 14 x 32 tiles costs more than it saves (see the file comment).
bool better_unpacked(int64_t m, int64_t n, int64_t k) {
  return std::min(m, n) < 8 || double(m) * double(n) * double(k) <= 64.0 * 64.0 * 64.0;
}

void gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (has_avx512() && !better_unpacked(m, n, k))
    detail::gemm_f32_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    detail::gemm_f32_eigen(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// ---- bf16: which path (AMX, vdpbf16ps, fp32) ------------------------------------------------------
// HG_CPU_GEMM (read once per process, gemm_calibration.h): auto (default) takes the calibrated
// plan's path within the shape gates, flags the feature-flag rule; amx (and amx4, f16 with 4
// products) takes AMX for every shape when the CPU has it, avx512 is the vdpbf16ps path (f16: the
// fp32 kernel), fp32 widens to the f32 GEMM. Anything else is an error naming the variable.
// A forced path this CPU cannot take is an error too (a benchmark row must never be mislabelled).
using Bf16GemmChoice = detail::CpuGemmChoice;

Bf16GemmChoice bf16_gemm_choice() { return detail::cpu_gemm_choice(); }

// HG_CPU_GEMM=auto (the default): the calibrated plan (gemm_calibration.h); flags: the feature-flag
// rule. Both pass through the shape gates below (AMX never for near-dot products, and so on).
bool planned(detail::GemmPlanDType dtype, detail::GemmCandidate candidate, int64_t m, int64_t n, int64_t k) {
  return detail::planned_gemm_candidate(dtype, m, n, k) == candidate;
}

bool has_amx() {
  static const bool has = detail::cpu_has_amx_bf16_gemm();
  return has;
}

bool has_avx512_bf16() {
  static const bool has = detail::cpu_has_avx512_bf16_gemm();
  return has;
}

// AMX pads m, n and k to 32 and packs B for all of k, yet it beat the widening fp32 path at every
// shape measured (single-thread CPU time, 8^3 .. 256^3 and 1 x 768 x 768) except near-dot products
// (1 x 1 x 4096: 26-42 us against 2-4 us), so only those stay on fp32 (docs/cpu_gemm.md, "AMX").
bool amx_worth_it(int64_t m, int64_t n, int64_t) { return double(m) * double(n) >= 256.0; }

// The choice is checked before has_amx(), so forcing avx512 or fp32 never asks the OS for the tile
// state; forcing a path this CPU lacks throws instead of quietly taking another one.
bool use_amx_bf16(int64_t m, int64_t n, int64_t k) {
  const Bf16GemmChoice choice = bf16_gemm_choice();
  if (choice == Bf16GemmChoice::avx512) {
    HG_CHECK(has_avx512_bf16(), "[gemm] environment variable HG_CPU_GEMM=avx512: this CPU lacks AVX512_BF16 ",
             "(vdpbf16ps) with AVX-512 F/VL/BW/DQ; expected auto or fp32 here");
    return false;
  }
  if (choice == Bf16GemmChoice::fp32) return false;
  if (choice == Bf16GemmChoice::amx || choice == Bf16GemmChoice::amx4) {
    HG_CHECK(has_amx(), "[gemm] environment variable HG_CPU_GEMM=", choice == Bf16GemmChoice::amx ? "amx" : "amx4",
             ": this CPU (or OS) lacks AMX-BF16 tiles ",
             "(cpuid AMX-TILE/AMX-BF16, AVX-512, XCR0 tile state, arch_prctl permission); expected auto, ",
             "avx512 or fp32 here");
    return true;
  }
  return has_amx() && amx_worth_it(m, n, k) &&
         planned(detail::GemmPlanDType::bf16, detail::GemmCandidate::amx, m, n, k);
}

// bf16 off AMX: vdpbf16ps when forced (avx512), or when the plan takes it, or takes AMX for a shape
// AMX declines (a near-dot product); otherwise the fp32 kernel widening bf16 while packing.
bool use_vdpbf16ps(int64_t m, int64_t n, int64_t k) {
  const Bf16GemmChoice choice = bf16_gemm_choice();
  if (choice == Bf16GemmChoice::fp32 || !has_avx512_bf16()) return false;
  if (choice != Bf16GemmChoice::automatic) return true;
  return !planned(detail::GemmPlanDType::bf16, detail::GemmCandidate::fp32, m, n, k);
}

// f16 on AMX: the same choice, except that avx512 means the fp32 kernel (there is no f16 dot
// product with fp32 sums on these CPUs), and auto needs a larger shape than bf16: split f16 does 3
// tile products per pair and splits every value while packing. Measured (one thread, CPU time,
// against the fp32 path): 1.1-1.3x faster from 64^3 (64 x 64 x 1024 with A^T, 128^3), a tie at
// 16 x 768 x 64, 1.2-2x slower at 32^3 and below and at 4 x 768 x 768 (docs/cpu_gemm.md).
bool amx_f16_worth_it(int64_t m, int64_t n, int64_t k) {
  return std::min(m, n) >= 16 && double(m) * double(n) * double(k) >= 64.0 * 64.0 * 64.0;
}
bool use_amx_f16(int64_t m, int64_t n, int64_t k) {
  const Bf16GemmChoice choice = bf16_gemm_choice();
  if (choice == Bf16GemmChoice::avx512) return false;
  if (choice == Bf16GemmChoice::automatic || choice == Bf16GemmChoice::flags)
    return has_amx() && amx_f16_worth_it(m, n, k) &&
           planned(detail::GemmPlanDType::f16, detail::GemmCandidate::amx, m, n, k);
  return use_amx_bf16(m, n, k);  // fp32: false; amx, amx4: true, or the error naming what is missing
}
int f16_amx_terms() { return bf16_gemm_choice() == Bf16GemmChoice::amx4 ? 4 : 3; }

// ---- f16 / bf16 through f32 temporaries (no AVX-512, small shapes) ----------------------------------------------------------------------

// A grow-only f32 buffer kept per thread: large temporaries would otherwise land on fresh pages on
// every call, and first-touching a page costs ~17 us per 4 KiB on these VMs.
class Scratch {
 public:
  float* get(int64_t floats) {
    if (floats > size_) {
      data_.reset(new float[size_t(floats)]);
      size_ = floats;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<float[]> data_;
  int64_t size_ = 0;
};

// Enough elements that splitting a conversion over the OpenMP threads pays for the fork.
constexpr int64_t kParallelConvertElements = 1 << 16;

template <class T>
void widen(const T* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
#pragma omp parallel for if (rows * cols >= kParallelConvertElements)
  for (int64_t r = 0; r < rows; ++r) to_float(src + r * ld, dst + r * cols, cols);
}

template <class T>
void narrow(const float* src, int64_t rows, int64_t cols, T* dst, int64_t ld) {
#pragma omp parallel for if (rows * cols >= kParallelConvertElements)
  for (int64_t r = 0; r < rows; ++r) from_float(src + r * cols, dst + r * ld, cols);
}

template <class T>
void gemm_via_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  thread_local Scratch a_scratch, b_scratch, c_scratch;
  const StoredShape as = stored_shape(trans_a, m, k), bs = stored_shape(trans_b, k, n);
  float* a32 = a_scratch.get(as.rows * as.cols);
  float* b32 = b_scratch.get(bs.rows * bs.cols);
  float* c32 = c_scratch.get(m * n);
  widen(a, as.rows, as.cols, lda, a32);
  widen(b, bs.rows, bs.cols, ldb, b32);
  if (beta != 0.0) widen(c, m, n, ldc, c32);
  gemm_f32(trans_a, trans_b, m, n, k, float(alpha), a32, as.cols, b32, bs.cols, float(beta), c32, n);
  narrow(c32, m, n, c, ldc);
}

// ---- f16 / bf16 on the packed paths ----------------------------------------------------------------

// Half inputs: the packed paths skip the temporaries and the conversions, and beat them down to
// 32 x 32 x 32 (measured one thread, CPU time: 1.3-2x for bf16, 4-6x for f16 with the scalar
// conversions). They lose only where the zero-padded 14 x 32 tile is mostly padding and Eigen's
// GEMV takes over: m = 1 (2x slower), n = 4 (1.4x); 4 x N and N x 8 are a draw or better.
bool half_better_unpacked(int64_t m, int64_t n) { return m < 4 || n < 8; }

template <class T>
void gemm_half(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, double beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (use_amx_bf16(m, n, k))
      return detail::gemm_bf16_amx(trans_a, trans_b, m, n, k, float(alpha), a, lda, b, ldb, float(beta), c, ldc, true);
  } else {
    if (use_amx_f16(m, n, k))
      return detail::gemm_f16_amx(trans_a, trans_b, m, n, k, float(alpha), a, lda, b, ldb, float(beta), c, ldc, true,
                                  f16_amx_terms());
  }
  if (!has_avx512() || half_better_unpacked(m, n))
    return gemm_via_f32<T>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if constexpr (std::is_same_v<T, bfloat16>) {
    if (use_vdpbf16ps(m, n, k))
      return detail::gemm_bf16_avx512(trans_a, trans_b, m, n, k, float(alpha), a, lda, b, ldb, float(beta), c, ldc,
                                      true);
  }
  detail::gemm_half_via_f32_avx512(trans_a, trans_b, m, n, k, float(alpha), a, lda, b, ldb, float(beta), c, ldc, true);
}

// gemm_bias on a packed path, the bias added in the tile store (kernels/cpu/gemm_avx512_tiles.h).
bool bias_in_epilogue(DType dtype, int64_t m, int64_t n, int64_t k, double alpha) {
  if (!has_avx512() || k == 0 || alpha == 0.0) return false;
  if (dtype == DType::f32) return !better_unpacked(m, n, k);
  if (dtype == DType::f16 || dtype == DType::bf16) return !half_better_unpacked(m, n);
  return false;
}

template <class T>
void gemm_bias_packed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const T* a,
                      int64_t lda, const T* b, int64_t ldb, const T* bias, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    detail::gemm_bias_f32_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, bias, c, ldc);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    if (use_amx_bf16(m, n, k)) {
      // AMX: C starts as the bias rows and the tiles accumulate onto them in fp32 (beta = 1); the bias
      // is already bf16, so C is still rounded once.
#pragma omp parallel for if (m * n >= (int64_t(1) << 16))
      for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, c + i * ldc);
      detail::gemm_bf16_amx(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 1.0f, c, ldc, true);
    } else if (use_vdpbf16ps(m, n, k))
      detail::gemm_bias_bf16_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, bias, c, ldc);
    else
      detail::gemm_bias_half_via_f32_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, bias, c, ldc);
  } else if constexpr (std::is_same_v<T, half>) {
    if (use_amx_f16(m, n, k)) {
      // As bf16 on AMX: C starts as the (f16, exact) bias rows, the tiles accumulate onto them.
#pragma omp parallel for if (m * n >= (int64_t(1) << 16))
      for (int64_t i = 0; i < m; ++i) std::copy(bias, bias + n, c + i * ldc);
      detail::gemm_f16_amx(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 1.0f, c, ldc, true, f16_amx_terms());
    } else {
      detail::gemm_bias_half_via_f32_avx512(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, bias, c, ldc);
    }
  }
}

}  // namespace

namespace detail {

CpuGemmChoice parse_cpu_gemm_choice(const char* text) {
  if (!text || !*text || std::strcmp(text, "auto") == 0) return CpuGemmChoice::automatic;
  if (std::strcmp(text, "amx") == 0) return CpuGemmChoice::amx;
  if (std::strcmp(text, "amx4") == 0) return CpuGemmChoice::amx4;
  if (std::strcmp(text, "avx512") == 0) return CpuGemmChoice::avx512;
  if (std::strcmp(text, "fp32") == 0) return CpuGemmChoice::fp32;
  if (std::strcmp(text, "flags") == 0) return CpuGemmChoice::flags;
  HG_CHECK(false, "[gemm] environment variable HG_CPU_GEMM=\"", text,
           "\": expected auto, flags, amx, amx4, avx512 or fp32");
  return CpuGemmChoice::automatic;
}

bool cpu_has_avx512_bf16_gemm() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return cpu_has_avx512_gemm() && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

bool cpu_has_avx512_gemm() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // needed if this first runs from a static initializer
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

void gemm_f32_eigen(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) return scale_c(m, n, beta, c, ldc);
  gemm_eigen<float>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace detail

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a, int64_t lda,
          const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType dtype) {
  check_arguments("gemm", trans_a, trans_b, m, n, k, lda, ldb, ldc, dtype);
  dispatch_floating(dtype, "gemm", [&]<class T>() {
    const T* a_t = static_cast<const T*>(a);
    const T* b_t = static_cast<const T*>(b);
    T* c_t = static_cast<T*>(c);
    if (m == 0 || n == 0) return;
    if (k == 0 || alpha == 0.0) return scale_c(m, n, beta, c_t, ldc);
    if constexpr (std::is_same_v<T, float>)
      gemm_f32(trans_a, trans_b, m, n, k, float(alpha), a_t, lda, b_t, ldb, float(beta), c_t, ldc);
    else if constexpr (std::is_same_v<T, double>)
      gemm_eigen<double>(trans_a, trans_b, m, n, k, alpha, a_t, lda, b_t, ldb, beta, c_t, ldc);
    else
      gemm_half<T>(trans_a, trans_b, m, n, k, alpha, a_t, lda, b_t, ldb, beta, c_t, ldc);
  });
}

void gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                    int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc, DType dtype) {
  check_arguments("gemm_reference", trans_a, trans_b, m, n, k, lda, ldb, ldc, dtype);
  dispatch_floating(dtype, "gemm_reference", [&]<class T>() {
    gemm_reference_typed<T>(trans_a, trans_b, m, n, k, alpha, static_cast<const T*>(a), lda, static_cast<const T*>(b),
                            ldb, beta, static_cast<T*>(c), ldc);
  });
}

const char* gemm_f32_path() { return has_avx512() ? "avx512" : "eigen"; }

void gemm_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
               int64_t lda, const void* b, int64_t ldb, const void* bias, void* c, int64_t ldc, DType dtype) {
  check_arguments("gemm_bias", trans_a, trans_b, m, n, k, lda, ldb, ldc, dtype);
  HG_CHECK(bias != nullptr || n == 0, "[gemm_bias] bias is null; expected a vector of n = ", n, " values");
  if (m == 0 || n == 0) return;
  // The packed paths add the bias in their tile store (one pass over C, which is not read).
  if (bias_in_epilogue(dtype, m, n, k, alpha))
    return dispatch_floating(dtype, "gemm_bias", [&]<class T>() {
      gemm_bias_packed<T>(trans_a, trans_b, m, n, k, float(alpha), static_cast<const T*>(a), lda,
                          static_cast<const T*>(b), ldb, static_cast<const T*>(bias), static_cast<T*>(c), ldc);
    });
  // Elsewhere every row of C starts as the bias; the GEMM then accumulates onto it (beta = 1), so
  // the sum is rounded once, as in the fused epilogue of the GPU path.
  dispatch_floating(dtype, "gemm_bias", [&]<class T>() {
    const T* bias_t = static_cast<const T*>(bias);
    T* c_t = static_cast<T*>(c);
    for (int64_t i = 0; i < m; ++i) std::copy(bias_t, bias_t + n, c_t + i * ldc);
  });
  gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 1.0, c, ldc, dtype);
}

}  // namespace hg::kernels::cpu
