#pragma once
// Internal to kernels/cpu: the f32 GEMM paths that gemm() chooses between, declared here so that
// gemm.cpp can dispatch to them and tests/test_gemm.cpp can run each one directly on a CPU that
// could take either. Arguments are those of hg::kernels::cpu::gemm (row-major, row strides).
#include <cstdint>

namespace hg::kernels::cpu::detail {

// True when this CPU (and OS) can run gemm_f32_avx512: AVX-512 F/VL/DQ and FMA. Defined in
// gemm.cpp, which is compiled for the build target, so the check itself runs on any x86-64 CPU.
bool cpu_has_avx512_gemm();

// The cache-blocked, packed GEMM with the AVX-512 micro-kernel (gemm_avx512.cpp). Only call it
// when cpu_has_avx512_gemm(); it is compiled for AVX-512 whatever the build target.
void gemm_f32_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The portable path: Eigen's GEMM on mapped row-major views (gemm.cpp).
void gemm_f32_eigen(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace hg::kernels::cpu::detail
