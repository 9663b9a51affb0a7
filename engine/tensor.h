#pragma once
// Tensor: a strided view (shape, element strides, storage offset) of a reference-counted Storage,
// plus its autograd state. Copying a Tensor copies a handle: both name the same TensorImpl.
//
// CONVENTION
//   - rank 0..8; shape[d] >= 0; strides in elements; a size-1 or broadcast (expanded) dimension may
//     have any stride, including 0.
//   - View ops (view/reshape of contiguous data, transpose, permute, narrow, select, squeeze,
//     unsqueeze, expand) share storage; contiguous() and clone() materialise new storage.
//   - Kernels take contiguous inputs: op front-ends call contiguous() on what they pass down.
//   - Autograd: a tensor that requires grad is either a leaf (made by the user; gradients
//     accumulate into grad()) or the output of an op (grad_fn() is the graph node that made it).
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "engine/storage.h"
#include "kernels/dtype.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace hg {

using Shape = std::vector<int64_t>;
inline constexpr int kMaxTensorRank = 8;

class Node;
class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;

  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;        // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;           // the node that produced this tensor (non-leaf)
  uint32_t output_nr = 0;                  // which output of grad_fn this tensor is (multi-output ops)
  std::weak_ptr<Node> grad_accumulator;    // a leaf's AccumulateGrad node, while a graph holds it
  std::optional<DType> grad_dtype;         // the dtype grad accumulates in, when not `dtype`
  // Run after a backward has summed its gradient into `grad` (engine/autograd.h), with their handles.
  std::vector<std::pair<uint64_t, std::function<void()>>> post_accumulate_grad_hooks;
};

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<half>() { return DType::f16; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::b8; }

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ----
  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t offset() const { return checked().offset; }
  int dim() const { return int(checked().shape.size()); }
  // Size of dimension d; negative d counts from the end.
  int64_t size(int d) const;
  int64_t numel() const;
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  // "f32[2, 3] cpu"
  std::string describe() const;

  // ---- data access (CPU) ----
  void* data_ptr() const;
  template <class T>
  T* data() const {
    HG_CHECK(dtype() == dtype_of<T>(), "[Tensor::data] tensor is ", dtype_name(dtype()), ", requested ",
             dtype_name(dtype_of<T>()));
    return static_cast<T*>(data_ptr());
  }
  // Value of a one-element tensor, converted to double.
  double item() const;
  // All elements in row-major order, converted to T (any dtype, any layout).
  template <class T>
  std::vector<T> to_vector() const;

  // ---- autograd ----
  bool requires_grad() const { return checked().requires_grad; }
  // Marks a leaf as requiring grad. Only floating tensors can.
  Tensor& requires_grad_(bool enabled = true);
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  // The dtype a leaf's gradient is kept and summed in: the tensor's own, unless set_grad_dtype chose
  // another floating dtype. set_grad_dtype(f32) on a half parameter keeps an fp32 gradient buffer:
  // each backward's gradient is converted up and added in fp32, so summing many micro-batches does
  // not round to half at every addition (the optimizer reads the fp32 gradient as it is).
  DType grad_dtype() const;
  Tensor& set_grad_dtype(DType dtype);
  const std::shared_ptr<Node>& grad_fn() const { return checked().grad_fn; }
  // Back-propagates from this tensor (a one-element tensor, or any tensor with `gradient` of its
  // shape). Gradients accumulate (+=) into the grad() of leaves. The graph's saved tensors are
  // freed unless retain_graph.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Same data, no history, requires_grad false.
  Tensor detach() const;

  // ---- views and copies (recorded by autograd; see engine/ops.h) ----
  Tensor view(const Shape& shape) const;     // contiguous-compatible only; -1 infers one size
  Tensor reshape(const Shape& shape) const;  // a view when possible, a copy otherwise
  Tensor flatten() const { return reshape({-1}); }
  Tensor transpose(int d0, int d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<int>& dims) const;
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor select(int dim, int64_t index) const;
  Tensor unsqueeze(int dim) const;
  Tensor squeeze(int dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(const Device& device) const;

  // ---- in place (not recorded by autograd; refused on tensors that require grad while grad mode
  // is on, as silent in-place changes would corrupt saved values) ----
  // (const: a Tensor is a handle; these change the elements it names, not the handle.)
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const { return fill_(0.0); }
  // Copies src (same shape; any dtype and layout) into this tensor's elements.
  const Tensor& copy_(const Tensor& src) const;

 private:
  const TensorImpl& checked() const {
    HG_CHECK(impl_ != nullptr, "[Tensor] operation on an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// Wraps a negative dimension and checks it is in [0, rank); `op` names the caller in the error.
int normalize_dim(int dim, int rank, const char* op);

// ---- factories ----
Tensor empty(const Shape& shape, DType dtype = f32, const Device& device = kCPU);
Tensor zeros(const Shape& shape, DType dtype = f32, const Device& device = kCPU);
Tensor ones(const Shape& shape, DType dtype = f32, const Device& device = kCPU);
Tensor full(const Shape& shape, double value, DType dtype = f32, const Device& device = kCPU);
Tensor scalar_tensor(double value, DType dtype = f32, const Device& device = kCPU);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
// 0, 1, ..., n-1
Tensor arange(int64_t n, DType dtype = i64, const Device& device = kCPU);
// Values drawn from the default generator (engine/random.h).
Tensor rand(const Shape& shape, DType dtype = f32, const Device& device = kCPU);
Tensor randn(const Shape& shape, DType dtype = f32, const Device& device = kCPU);
// Uniform integers in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = i64, const Device& device = kCPU);

// A tensor holding `values` (converted to dtype), laid out row-major in `shape`.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, DType dtype = dtype_of<T>(),
                   const Device& device = kCPU);
// A tensor from a nested list of values: tensor({1, 2, 3}), shape [3].
Tensor tensor(std::initializer_list<double> values, DType dtype = f32);

}  // namespace hg
