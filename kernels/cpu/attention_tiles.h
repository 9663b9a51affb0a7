#pragma once
// Internal to kernels/cpu: the two tile operations the fused CPU attention (attention.cpp) spends its
// time in, with a portable implementation (attention.cpp, any compute type) and an AVX-512 one for
// f32 (attention_avx512.cpp, compiled for AVX-512 whatever the build target and only called after
// cpu_has_avx512_gemm()). Declared here so tests/test_attention_cpu.cpp can run the whole kernel on
// either path, and the vectorised exp on its own.
#include <cstdint>

#include "kernels/attention_problem.h"
#include "kernels/dtype.h"

namespace hg::kernels::cpu::detail {

// The tile operations, for compute type Acc (float or double):
//  product:     C[i, j] (= or +=) sum_{p < k} A(i, p) B[p * ldb + j]   for i < m, j < n,
//               A(i, p) = a[i * a_row + p * a_col] (any strides: a transposed tile is a stride
//               swap), B row-major with unit column stride. Each C element is one sum in p order.
//  exp_shifted: x[r * ld + c] = exp(x[r * ld + c] - shift[c]) for r < rows, c < cols (-inf -> 0);
//               when sums is not null, sums[c] = sum over r of the new x[r * ld + c], in r order.
template <class Acc>
struct AttentionTileOps {
  void (*product)(int64_t m, int64_t n, int64_t k, const Acc* a, int64_t a_row, int64_t a_col, const Acc* b,
                  int64_t ldb, Acc* c, int64_t ldc, bool accumulate);
  void (*exp_shifted)(Acc* x, int64_t rows, int64_t cols, int64_t ld, const Acc* shift, Acc* sums);
};

// The AVX-512 f32 tile operations (attention_avx512.cpp).
AttentionTileOps<float> attention_tile_ops_avx512();
// y[i] = exp(x[i]), the AVX-512 exp the tiles use (exposed for its accuracy test): relative error
// below 2^-22 (4 ulp) for x in [-87.3, 88.7], exactly 0 below -87.3 (so -inf gives 0; the true
// value there is < 2^-126, a subnormal), +inf above 88.7.
void exp_f32_avx512(const float* x, float* y, int64_t n);

// Which f32 tile operations attention_forward/backward use: automatic = AVX-512 when the CPU has
// it (cpu_has_avx512_gemm(), gemm_avx512.h), else portable. f64 is always portable (in double).
enum class AttentionPath { automatic, portable, avx512 };

void attention_forward_on(AttentionPath path, const AttentionProblem& p, AttentionTensor q, AttentionTensor k,
                          AttentionTensor v, AttentionTensor o, void* lse, DType dtype);
void attention_backward_on(AttentionPath path, const AttentionProblem& p, AttentionTensor q, AttentionTensor k,
                           AttentionTensor v, AttentionTensor o, AttentionTensor dout, const void* lse, void* delta,
                           AttentionTensor dq, AttentionTensor dk, AttentionTensor dv, DType dtype);

}  // namespace hg::kernels::cpu::detail
