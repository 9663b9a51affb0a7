#pragma once
// Run-time dtype dispatch to the device element types, the CUDA twin of kernels/dispatch.h:
//   dispatch_floating_cuda(dt, "op", [&]<class T>() { ... })
// instantiates the body for float, double, __half and __nv_bfloat16 and calls the one matching dt
// (hg::half / hg::bfloat16 are the host types; kernels use CUDA's, whose conversion intrinsics
// are bit-identical to them). dispatch_index_cuda does the same for i32/i64 index tensors,
// dispatch_all_cuda for every dtype (fill, cast, compare), and dispatch_bits_cuda for kernels that only
// move bits (by element size: 1, 2, 4 or 8 bytes).
#include <cstdint>
#include <utility>

#include "kernels/cuda/platform.h"
#include "kernels/dtype.h"
#include "kernels/error.h"

namespace hg::kernels::cuda {

template <class F>
decltype(auto) dispatch_floating_cuda(DType dt, const char* what, F&& body) {
  switch (dt) {
    case DType::f32:
      return body.template operator()<float>();
    case DType::f64:
      return body.template operator()<double>();
    case DType::f16:
      return body.template operator()<__half>();
    case DType::bf16:
      return body.template operator()<__nv_bfloat16>();
    default:
      break;
  }
  HG_FAIL("[", what, "] expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(dt));
}

template <class F>
decltype(auto) dispatch_index_cuda(DType dt, const char* what, F&& body) {
  switch (dt) {
    case DType::i32:
      return body.template operator()<int32_t>();
    case DType::i64:
      return body.template operator()<int64_t>();
    default:
      break;
  }
  HG_FAIL("[", what, "] expected an index dtype (i32, i64), got ", dtype_name(dt));
}

// The device types of all eight dtypes.
template <class F>
decltype(auto) dispatch_all_cuda(DType dt, const char* what, F&& body) {
  switch (dt) {
    case DType::u8:
      return body.template operator()<uint8_t>();
    case DType::b8:
      return body.template operator()<bool>();
    case DType::i32:
      return body.template operator()<int32_t>();
    case DType::i64:
      return body.template operator()<int64_t>();
    default:
      return dispatch_floating_cuda(dt, what, std::forward<F>(body));
  }
}

template <class F>
decltype(auto) dispatch_bits_cuda(DType dt, const char* what, F&& body) {
  switch (dtype_size(dt)) {
    case 1:
      return body.template operator()<uint8_t>();
    case 2:
      return body.template operator()<uint16_t>();
    case 4:
      return body.template operator()<uint32_t>();
    case 8:
      return body.template operator()<uint64_t>();
    default:
      break;
  }
  HG_FAIL("[", what, "] unsupported dtype ", dtype_name(dt));
}

}  // namespace hg::kernels::cuda
