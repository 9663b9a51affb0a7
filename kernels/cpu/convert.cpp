// Array conversions float <-> half types (convert.h). Scalar loops over half.h's conversions: the
// reference behaviour that any vectorised version must reproduce bit for bit.
#include "kernels/cpu/convert.h"

#include <algorithm>

namespace hg::kernels::cpu {

void to_float(const half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}
void to_float(const bfloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}
void to_float(const float* src, float* dst, int64_t n) { std::copy(src, src + n, dst); }

void from_float(const float* src, half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half(src[i]);
}
void from_float(const float* src, bfloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bfloat16(src[i]);
}
void from_float(const float* src, float* dst, int64_t n) { std::copy(src, src + n, dst); }

}  // namespace hg::kernels::cpu
