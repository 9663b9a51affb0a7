#include "engine/tensor.h"

#include "engine/host_reads.h"

#include <sstream>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/ops/op_support.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace hg {

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int normalize_dim(int dim, int rank, const char* op) {
  const int wrapped = dim < 0 ? dim + rank : dim;
  HG_CHECK(wrapped >= 0 && wrapped < rank, "[", op, "] dimension ", dim, " is out of range for a tensor of rank ", rank,
           "; expected a dimension in [", -rank, ", ", rank - 1, "]");
  return wrapped;
}

int64_t Tensor::size(int d) const { return shape()[normalize_dim(d, dim(), "Tensor::size")]; }

int64_t Tensor::numel() const { return shape_numel(shape()); }

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked();
  if (shape_numel(t.shape) == 0) return true;
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " " + device().str();
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = checked();
  HG_CHECK(!t.storage->released() && t.storage->ready(), "[Tensor] ", describe(), " has no memory: its storage was "
           "released or is still being filled (a ZeRO stage 3 parameter used outside its module's forward and backward; "
           "hold ZeroOptimizer::gather_parameters() to read it)");
  return static_cast<char*>(t.storage->data()) + t.offset * int64_t(dtype_size(t.dtype));
}

// For a CUDA tensor: a copy to the host (cuda::copy_to_host), which waits for the device and so also
// raises any index error a kernel recorded since the last host read (docs/cuda.md).
double Tensor::item() const {
  HG_CHECK(numel() == 1, "[Tensor::item] expected a one-element tensor, got ", describe());
  return to_vector<double>()[0];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  note_host_read("[Tensor::to_vector] of " + describe());
  if (!device().is_cpu()) return to(kCPU).to_vector<T>();
  Tensor dense = contiguous();
  std::vector<T> out(static_cast<size_t>(dense.numel()));
  kernels::cpu::cast(dense.data_ptr(), dense.dtype(), out.data(), dtype_of<T>(), dense.numel());
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<half> Tensor::to_vector<half>() const;
template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

Tensor& Tensor::requires_grad_(bool enabled) {
  TensorImpl& t = *impl_;
  HG_CHECK(!enabled || is_floating(t.dtype), "[requires_grad_] only floating tensors can require grad, got ",
           describe());
  HG_CHECK(t.grad_fn == nullptr, "[requires_grad_] can only be set on a leaf tensor; this one is the output of '",
           t.grad_fn ? t.grad_fn->name() : "", "' (use detach() to make a leaf)");
  t.requires_grad = enabled;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(checked().grad); }

DType Tensor::grad_dtype() const {
  const TensorImpl& t = checked();
  return t.grad_dtype.value_or(t.dtype);
}

Tensor& Tensor::set_grad_dtype(DType dtype) {
  checked();
  TensorImpl& t = *impl_;
  HG_CHECK(is_floating(dtype), "[set_grad_dtype] gradients must be floating, got ", dtype_name(dtype), " for ",
           describe());
  HG_CHECK(t.grad == nullptr || Tensor(t.grad).dtype() == dtype, "[set_grad_dtype] ", describe(),
           " already holds a ", dtype_name(Tensor(t.grad).dtype()), " gradient; clear it (zero_grad) first");
  t.grad_dtype = dtype;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    HG_CHECK(grad.shape() == shape(), "[set_grad] gradient ", grad.describe(), " does not match tensor ", describe());
  }
  impl_->grad = grad.impl_ptr();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  Tensor seed = gradient;
  if (!seed.defined()) {
    HG_CHECK(numel() == 1, "[backward] implicit gradient needs a one-element tensor, got ", describe(),
             "; pass a gradient of the same shape");
    seed = ones(shape(), dtype(), device());
  }
  HG_CHECK(seed.shape() == shape(), "[backward] gradient ", seed.describe(), " does not match tensor ", describe());
  run_backward(*this, seed, retain_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked();
  auto out = std::make_shared<TensorImpl>();
  out->storage = t.storage;
  out->shape = t.shape;
  out->strides = t.strides;
  out->offset = t.offset;
  out->dtype = t.dtype;
  return Tensor(std::move(out));
}

Tensor Tensor::view(const Shape& s) const { return hg::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return hg::reshape(*this, s); }
Tensor Tensor::transpose(int d0, int d1) const { return hg::transpose(*this, d0, d1); }
Tensor Tensor::permute(const std::vector<int>& dims) const { return hg::permute(*this, dims); }
Tensor Tensor::narrow(int d, int64_t start, int64_t length) const { return hg::narrow(*this, d, start, length); }
Tensor Tensor::select(int d, int64_t index) const { return hg::select(*this, d, index); }
Tensor Tensor::unsqueeze(int d) const { return hg::unsqueeze(*this, d); }
Tensor Tensor::squeeze(int d) const { return hg::squeeze(*this, d); }
Tensor Tensor::expand(const Shape& s) const { return hg::expand(*this, s); }
Tensor Tensor::contiguous() const { return hg::contiguous(*this); }
Tensor Tensor::to(DType t) const { return hg::cast(*this, t); }
Tensor Tensor::to(const Device& d) const { return hg::to_device(*this, d); }

Tensor Tensor::clone() const {
  // A fresh contiguous copy that stays connected to the graph (gradient flows through unchanged).
  Tensor out = empty(shape(), dtype(), device());
  {
    NoGradGuard no_grad;
    out.copy_(*this);
  }
  if (should_record({this})) {
    record_op("clone", {*this}, out, [](const Tensor& g, const NeedsGrad&) { return std::vector<Tensor>{g}; });
  }
  return out;
}

namespace {
void check_writable(const Tensor& t, const char* op) {
  HG_CHECK(!(grad_mode_enabled() && t.requires_grad()), "[", op, "] in-place change of ", t.describe(),
           " which requires grad; do it under NoGradGuard (e.g. in an optimizer step) or on a detached tensor");
}
}  // namespace

const Tensor& Tensor::fill_(double value) const {
  check_writable(*this, "fill_");
  if (is_contiguous()) {
    HG_KERNEL(device(), fill, data_ptr(), numel(), value, dtype());
  } else {
    Tensor source = full(shape(), value, dtype(), device());
    copy_(source);
  }
  return *this;
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  check_writable(*this, "copy_");
  HG_CHECK(src.shape() == shape(), "[copy_] source ", src.describe(), " does not match destination ", describe(),
           "; expected equal shapes");
  Tensor source = src;
  {
    NoGradGuard no_grad;
    if (source.device() != device()) source = source.to(device());
    if (source.dtype() != dtype()) source = source.to(dtype());
  }
  HG_KERNEL(device(), copy_strided, source.data_ptr(), source.strides().data(), data_ptr(), strides().data(),
            shape().data(), dim(), dtype());
  return *this;
}

}  // namespace hg
