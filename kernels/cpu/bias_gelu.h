#pragma once
// The fused bias + GELU kernels of the MLP (kernels/cpu/bias_gelu.cpp), CPU only: the CUDA path of the
// bias_gelu op composes existing CUDA kernels (engine/ops/bias_gelu.cpp).
//
// Math, per row r of contiguous x [rows, cols] and bias b [cols], in acc_t (f32; f64 for f64):
//   forward:  y[r, j]  = gelu(x[r, j] + b[j])                      (gelu_tanh_of or gelu_erf_of, kernels/unary_math.h)
//   backward: dx[r, j] = dy[r, j] * gelu'(x[r, j] + b[j])
//             db[j]    = sum over r of dx[r, j]                    (summed in a fixed order: deterministic)
// x, b, y, dy, dx, db share one floating dtype. db may be null (no bias gradient wanted).
#include <cstdint>

#include "kernels/dtype.h"

namespace hg::kernels::cpu {

void bias_gelu_forward(const void* x, const void* bias, void* y, int64_t rows, int64_t cols, bool erf, DType dtype);
void bias_gelu_backward(const void* x, const void* bias, const void* dy, void* dx, void* dbias, int64_t rows,
                        int64_t cols, bool erf, DType dtype);

}  // namespace hg::kernels::cpu
