#pragma once
// Element access by run-time dtype, for the emulated libraries' small elementwise steps (cuBLASLt's
// bias added after a beta != 0 product, cuDNN's alpha/beta blends and cudnnAddTensor): an element
// read as double, and a double rounded to the dtype on store (half.h's round-to-nearest-even).
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace hg::emu {

inline double load_element(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return half_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16: return bfloat16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

inline void store_element(void* base, int64_t i, DType t, double v) {
  switch (t) {
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = float_to_half_bits(float(v)); break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = float_to_bfloat16_bits(float(v)); break;
    default: static_cast<float*>(base)[i] = float(v); break;
  }
}

}  // namespace hg::emu
