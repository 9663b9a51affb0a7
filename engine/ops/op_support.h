#pragma once
// Checks shared by op front-ends. Each throws hg::Error whose message starts with "[op]" and names
// what was given and what was expected.
#include <vector>

#include "engine/tensor.h"
#include "engine/kernel_dispatch.h"
#include "engine/saved_tensor.h"
#include "kernels/kernels.h"

namespace hg::ops {

void check_defined(const Tensor& t, const char* op, const char* what);
void check_floating(const Tensor& t, const char* op, const char* what);
void check_index(const Tensor& t, const char* op, const char* what);
// Same dtype and device for all of `tensors`; names each by `names`.
void check_same(const std::vector<const Tensor*>& tensors, const std::vector<const char*>& names, const char* op);
// The tensor's device has kernels in this build (a CUDA tensor exists only in a CUDA build).
void check_backend(const Tensor& t, const char* op);
// Strides that read `t` at every index of `shape`, which t broadcasts to (right-aligned; broadcast
// dimensions get stride 0).
Shape broadcast_strides(const Tensor& t, const Shape& shape);
// An empty contiguous tensor with x's dtype and device.
Tensor empty_as(const Shape& shape, const Tensor& x);

}  // namespace hg::ops
