#pragma once
// A tensor's own bytes (copied to the host, made contiguous), for bit-for-bit comparisons.
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace hg::test {

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(kCPU).contiguous();
  const auto* b = static_cast<const uint8_t*>(host.data_ptr());
  return std::vector<uint8_t>(b, b + host.numel() * int64_t(host.element_size()));
}

}  // namespace hg::test
