#pragma once
// Internal to kernels/cpu: the f32 GEMM paths that gemm() chooses between, declared here so that
// gemm.cpp can dispatch to them and tests/test_gemm.cpp can run each one directly on a CPU that
// could take either. Arguments are those of hg::kernels::cpu::gemm (row-major, row strides).
#include <cstdint>

#include "kernels/half.h"

namespace hg::kernels::cpu::detail {

// True when this CPU (and OS) can run gemm_f32_avx512 and gemm_half_via_f32_avx512: AVX-512
// F/VL/BW/DQ and FMA. Defined in
// gemm.cpp, which is compiled for the build target, so the check itself runs on any x86-64 CPU.
bool cpu_has_avx512_gemm();

// The cache-blocked, packed GEMM with the AVX-512 micro-kernel (gemm_avx512.cpp). Only call it
// when cpu_has_avx512_gemm(); it is compiled for AVX-512 whatever the build target.
void gemm_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same packed fp32 GEMM on f16 or bf16 A and B, widened to fp32 while packing (vcvtph2ps, or a
// 16-bit shift for bf16), with C f32 (c_is_half false) or the inputs' half type (true), rounded once
// to nearest even from the fp32 sum over all of k; beta == 0 means C is not read. Only call it
// when cpu_has_avx512_gemm() (gemm_avx512.cpp).
void gemm_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const half* a, int64_t lda, const half* b, int64_t ldb, float beta, void* c,
                              int64_t ldc, bool c_is_half);
void gemm_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c,
                              int64_t ldc, bool c_is_half);

// gemm_bias's epilogue on the packed paths: C = alpha * op(A) op(B) + bias, bias being n values of
// C's type added to every row in fp32 before C's single rounding; C is not read. Same conditions
// as the paths they extend (gemm_bias_bf16_avx512: cpu_has_avx512_bf16_gemm()).
void gemm_bias_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                          int64_t lda, const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc);
void gemm_bias_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                   const half* a, int64_t lda, const half* b, int64_t ldb, const half* bias, half* c,
                                   int64_t ldc);
void gemm_bias_half_via_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                                   const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb,
                                   const bfloat16* bias, bfloat16* c, int64_t ldc);
void gemm_bias_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                           int64_t lda, const bfloat16* b, int64_t ldb, const bfloat16* bias, bfloat16* c,
                           int64_t ldc);

// The portable path: Eigen's GEMM on mapped row-major views (gemm.cpp).
void gemm_f32_eigen(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// ---- bf16 inputs (issue 20) -----------------------------------------------------------------
// C = alpha * op(A) op(B) + beta * C with A and B bf16 and C f32 (c_is_bf16 false) or bf16 (true).
// Products are summed in fp32 over all of k and C is rounded once (to nearest even when bf16);
// beta == 0 means C is not read. Same transposes and row strides as the f32 entry points.

// True when this CPU has AVX512_BF16 (vdpbf16ps) and AVX-512 F/VL/BW.
bool cpu_has_avx512_bf16_gemm();
// The packed GEMM with the vdpbf16ps micro-kernel (gemm_bf16_avx512.cpp). AVX512_BF16's dot
// product treats bf16 subnormal inputs as zero (and flushes subnormal results of its internal
// steps): inputs below 2^-126 in magnitude count as 0 on this path.
void gemm_bf16_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                      int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_bf16);

// HG_CPU_GEMM's value (read once per process, gemm_calibration.h): how gemm chooses its paths. Null
// or "" is automatic (calibrated by timing, gemm_calibration.h); flags is the CPU-feature rule
// without timing; amx, amx4, avx512, fp32 force the bf16/f16 path (amx4: AMX with f16's 4th
// product, see gemm_f16_amx). Anything else throws an hg::Error naming the variable.
enum class CpuGemmChoice { automatic, flags, amx, amx4, avx512, fp32 };
CpuGemmChoice parse_cpu_gemm_choice(const char* text);

// True when this CPU has AMX-BF16 and the OS granted this process the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool cpu_has_amx_bf16_gemm();
// The packed GEMM on AMX tiles (tdpbf16ps) (gemm_bf16_amx.cpp).
void gemm_bf16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                   int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_bf16);

// f16 A and B on the same AMX tiles (gemm_bf16_amx.cpp): each f16 value split exactly into two
// bf16 pieces, hi = bf16_rne(x) and lo = x - hi, and op(A) op(B) summed in fp32 as hi*hi + hi*lo +
// lo*hi (terms = 3: each dropped lo*lo is <= 2^-16 |a b|) or with + lo*lo too (terms = 4: every
// product exact). C is f32 (c_is_f16 false) or f16 rounded once to nearest even. Same conditions as
// gemm_bf16_amx (cpu_has_amx_bf16_gemm()); f16 subnormals are kept (their pieces are normal bf16).
void gemm_f16_amx(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const half* a,
                  int64_t lda, const half* b, int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_f16,
                  int terms = 3);

}  // namespace hg::kernels::cpu::detail
