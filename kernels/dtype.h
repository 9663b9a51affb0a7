#pragma once
// Element types. f64 exists for the CPU gradchecks; f16/bf16 are the half types kernels read and
// write while accumulating in fp32. u8 is a storage type (8-bit optimizer states: one code byte per
// element): it can be created, filled, copied, cast, moved between devices and saved, but it is not
// floating and not an index type, so arithmetic ops refuse it through the dtype dispatch.
// b8 is the boolean type (PyTorch's torch.bool, printed "bool"): one byte per element holding 0 or 1,
// the result of comparisons and the type of masks (engine/ops.h: eq ... ge, logical_*, where). Like u8
// it is stored, cast, moved and saved, and refused by arithmetic; a cast to b8 maps nonzero (and NaN)
// to 1, a cast from it gives 0 or 1.
#include <cstddef>
#include <cstdint>
#include <string>

namespace hg {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, b8 };

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType f16 = DType::f16;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType u8 = DType::u8;
inline constexpr DType b8 = DType::b8;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::b8: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::b8: return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }
constexpr bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }
constexpr bool is_integral(DType t) { return t == DType::i32 || t == DType::i64; }

// The dtype in which reductions and statistics of a tensor of dtype t are kept: f64 for f64,
// f32 for everything else (the fp32-accumulation rule).
constexpr DType accumulate_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

}  // namespace hg
