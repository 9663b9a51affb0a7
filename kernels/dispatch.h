#pragma once
// Run-time dtype dispatch with a generic lambda: dispatch_floating(dt, [&]<class T>() { ... })
// instantiates the body once per floating type and calls the one matching dt. acc_t<T> is the type
// a kernel accumulates in: double for double, float for everything else. dispatch_all adds the
// integer types (i32, i64 and the storage type u8) and bool for the kernels that only convert (fill,
// cast). dispatch_compare: every dtype whose values compare (floating, i32, i64, u8, bool).
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace hg::kernels {

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class F>
decltype(auto) dispatch_floating(DType dt, const char* what, F&& body) {
  switch (dt) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::f16: return body.template operator()<half>();
    case DType::bf16: return body.template operator()<bfloat16>();
    default: break;
  }
  HG_FAIL("[", what, "] expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(dt));
}

template <class F>
decltype(auto) dispatch_index(DType dt, const char* what, F&& body) {
  switch (dt) {
    case DType::i32: return body.template operator()<int32_t>();
    case DType::i64: return body.template operator()<int64_t>();
    default: break;
  }
  HG_FAIL("[", what, "] expected an index dtype (i32, i64), got ", dtype_name(dt));
}

template <class F>
decltype(auto) dispatch_all(DType dt, const char* what, F&& body) {
  switch (dt) {
    case DType::i32: return body.template operator()<int32_t>();
    case DType::i64: return body.template operator()<int64_t>();
    case DType::u8: return body.template operator()<uint8_t>();
    case DType::b8: return body.template operator()<bool>();
    default: return dispatch_floating(dt, what, std::forward<F>(body));
  }
}

}  // namespace hg::kernels
