// Tensor factories: empty/zeros/ones/full, from host values, ranges and random draws.
#include <cmath>

#include "engine/kernel_dispatch.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"

namespace hg {

namespace {
void check_shape(const Shape& shape, const char* op) {
  HG_CHECK(shape.size() <= size_t(kMaxTensorRank), "[", op, "] rank ", shape.size(), " of shape ", shape_str(shape),
           " exceeds the maximum rank ", kMaxTensorRank);
  for (int64_t s : shape)
    HG_CHECK(s >= 0, "[", op, "] negative size in shape ", shape_str(shape), "; expected sizes >= 0");
}
}  // namespace

Tensor empty(const Shape& shape, DType dtype, const Device& device) {
  check_shape(shape, "empty");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(size_t(shape_numel(shape)) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// A constant tensor is filled where it lives: on a CUDA device by the fill kernel, not made on the CPU
// and copied (a staged host-to-device copy of every zero-initialised gradient, every step).
// Random and listed values are made on the CPU and moved (one copy).
Tensor full(const Shape& shape, double value, DType dtype, const Device& device) {
  Tensor t = empty(shape, dtype, device);
  HG_KERNEL(device, fill, t.data_ptr(), t.numel(), value, dtype);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, const Device& device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, const Device& device) { return full(shape, 1.0, dtype, device); }
Tensor scalar_tensor(double value, DType dtype, const Device& device) { return full({}, value, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

Tensor arange(int64_t n, DType dtype, const Device& device) {
  HG_CHECK(n >= 0, "[arange] expected n >= 0, got ", n);
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = double(i);
  return from_vector(values, {n}, dtype, device);
}

Tensor rand(const Shape& shape, DType dtype, const Device& device) {
  if (!device.is_cpu()) return rand(shape, dtype, kCPU).to(device);
  Tensor t = empty(shape, dtype, device);
  const GeneratorState s = default_generator().reserve(philox_blocks(uint64_t(t.numel())));
  kernels::cpu::uniform_fill(t.data_ptr(), t.numel(), 0.0, 1.0, s.seed, s.offset, dtype);
  return t;
}

Tensor randn(const Shape& shape, DType dtype, const Device& device) {
  if (!device.is_cpu()) return randn(shape, dtype, kCPU).to(device);
  Tensor t = empty(shape, dtype, device);
  // normal_fill consumes two Philox words per element.
  const GeneratorState s = default_generator().reserve(philox_blocks(2 * uint64_t(t.numel())));
  kernels::cpu::normal_fill(t.data_ptr(), t.numel(), 0.0, 1.0, s.seed, s.offset, dtype);
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, const Device& device) {
  HG_CHECK(low < high, "[randint] expected low < high, got [", low, ", ", high, ")");
  check_shape(shape, "randint");
  const int64_t n = shape_numel(shape);
  const GeneratorState s = default_generator().reserve(philox_blocks(2 * uint64_t(n)));
  const uint64_t range = uint64_t(high - low);
  std::vector<int64_t> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // 64 random bits from two words; the modulo bias is below 2^-32 for ranges < 2^32.
    const uint64_t bits = (uint64_t(philox_bits(s.seed, s.offset, 2 * uint64_t(i))) << 32) |
                          philox_bits(s.seed, s.offset, 2 * uint64_t(i) + 1);
    values[size_t(i)] = low + int64_t(bits % range);
  }
  return from_vector(values, shape, dtype, device);
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, DType dtype, const Device& device) {
  check_shape(shape, "from_vector");
  HG_CHECK(int64_t(values.size()) == shape_numel(shape), "[from_vector] ", values.size(), " values cannot fill shape ",
           shape_str(shape), " (", shape_numel(shape), " elements)");
  if (!device.is_cpu()) return from_vector(values, shape, dtype, kCPU).to(device);
  Tensor t = empty(shape, dtype, device);
  kernels::cpu::cast(values.data(), dtype_of<T>(), t.data_ptr(), dtype, t.numel());
  return t;
}
template Tensor from_vector(const std::vector<float>&, const Shape&, DType, const Device&);
template Tensor from_vector(const std::vector<double>&, const Shape&, DType, const Device&);
template Tensor from_vector(const std::vector<half>&, const Shape&, DType, const Device&);
template Tensor from_vector(const std::vector<bfloat16>&, const Shape&, DType, const Device&);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, DType, const Device&);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, DType, const Device&);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, DType, const Device&);

Tensor tensor(std::initializer_list<double> values, DType dtype) {
  return from_vector(std::vector<double>(values), {int64_t(values.size())}, dtype);
}

}  // namespace hg
