#include "engine/ops/op_support.h"

namespace hg::ops {

void check_defined(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.defined(), "[", op, "] ", what, " is an undefined tensor");
}

void check_floating(const Tensor& t, const char* op, const char* what) {
  check_defined(t, op, what);
  HG_CHECK(is_floating(t.dtype()), "[", op, "] ", what, " must be floating (f32, f64, f16, bf16), got ", t.describe());
}

void check_index(const Tensor& t, const char* op, const char* what) {
  check_defined(t, op, what);
  HG_CHECK(is_integral(t.dtype()), "[", op, "] ", what, " must hold indices (i32 or i64), got ", t.describe());
}

void check_same(const std::vector<const Tensor*>& tensors, const std::vector<const char*>& names, const char* op) {
  for (size_t i = 0; i < tensors.size(); ++i) check_defined(*tensors[i], op, names[i]);
  for (size_t i = 1; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i]->dtype() == tensors[0]->dtype(), "[", op, "] dtype mismatch: ", names[0], " is ",
             tensors[0]->describe(), " but ", names[i], " is ", tensors[i]->describe(),
             "; expected equal dtypes (cast one with .to(dtype))");
    HG_CHECK(tensors[i]->device() == tensors[0]->device(), "[", op, "] device mismatch: ", names[0], " is ",
             tensors[0]->describe(), " but ", names[i], " is ", tensors[i]->describe(),
             "; expected both on one device (move one with .to(device))");
  }
}

void check_backend(const Tensor& t, const char* op) {
#if defined(HALFGRAD_HAS_CUDA)
  (void)t;
  (void)op;
#else
  HG_CHECK(t.device().is_cpu(), "[", op, "] no kernel for device ", t.device().str(),
           " in this build; expected a CPU tensor");
#endif
}

Tensor empty_as(const Shape& shape, const Tensor& x) { return empty(shape, x.dtype(), x.device()); }

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape strides(shape.size(), 0);
  const size_t lead = shape.size() - size_t(t.dim());
  for (size_t i = 0; i < size_t(t.dim()); ++i) strides[lead + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return strides;
}

}  // namespace hg::ops
