#pragma once
// HostBuffer: raw host memory of any dtype, read and written as doubles (rounded to the dtype on
// store: half.h's conversions; integers truncate). Kernel tests fill inputs with it, poison outputs,
// and read results back; the CPU and CUDA kernel suites share it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace hg::testing {

class HostBuffer {
 public:
  // Starts as 0xff bytes: NaN in every float type, -1 in the index types (what cudaMemset(0xff)
  // leaves on the device), so an element nobody writes never looks like a result.
  HostBuffer(DType dtype, int64_t n)
      : dtype_(dtype), n_(n), bytes_(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dtype), 0xff) {}

  DType dtype() const { return dtype_; }
  int64_t size() const { return n_; }
  size_t bytes() const { return static_cast<size_t>(n_) * dtype_size(dtype_); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(bytes_.data());
  }

  void set(int64_t i, double v) {
    switch (dtype_) {
      case DType::f32: as<float>()[i] = float(v); break;
      case DType::f64: as<double>()[i] = v; break;
      case DType::f16: as<half>()[i] = half(float(v)); break;
      case DType::bf16: as<bfloat16>()[i] = bfloat16(float(v)); break;
      case DType::i32: as<int32_t>()[i] = int32_t(v); break;
      case DType::i64: as<int64_t>()[i] = int64_t(v); break;
      case DType::u8: as<uint8_t>()[i] = uint8_t(v); break;
      case DType::b8: as<uint8_t>()[i] = v != 0; break;  // a bool is one byte, 0 or 1
    }
  }
  double get(int64_t i) const {
    const void* p = bytes_.data();
    switch (dtype_) {
      case DType::f32: return static_cast<const float*>(p)[i];
      case DType::f64: return static_cast<const double*>(p)[i];
      case DType::f16: return float(static_cast<const half*>(p)[i]);
      case DType::bf16: return float(static_cast<const bfloat16*>(p)[i]);
      case DType::i32: return static_cast<const int32_t*>(p)[i];
      case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
      case DType::u8:
      case DType::b8: return double(static_cast<const uint8_t*>(p)[i]);
    }
    return std::numeric_limits<double>::quiet_NaN();
  }
  std::vector<double> values() const {
    std::vector<double> out(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) out[size_t(i)] = get(i);
    return out;
  }
  bool bitwise_equal(const HostBuffer& other) const { return bytes_ == other.bytes_; }

  // NaN in every element of a floating dtype; 0x5a bytes (a recognisable garbage pattern) otherwise.
  void poison_with_nan() {
    if (is_floating(dtype_)) {
      for (int64_t i = 0; i < n_; ++i) set(i, std::numeric_limits<double>::quiet_NaN());
    } else {
      std::memset(bytes_.data(), 0x5a, bytes_.size());
    }
  }

 private:
  DType dtype_;
  int64_t n_;
  std::vector<unsigned char> bytes_;
};

}  // namespace hg::testing
