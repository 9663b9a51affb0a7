#pragma once
// The order topk sorts by, as one unsigned 64-bit key per element (kernels/kernels.h: topk): larger
// keys come first. For `largest` the key grows with the value, NaN above +inf (PyTorch counts NaN as
// the largest value); otherwise it is the complement, so the smallest value has the largest key and
// NaN the smallest. -0.0 and +0.0 get the same key (they compare equal, so the index decides).
// Ties -- equal keys -- go by increasing index.
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace hg::kernels {

// The order-preserving bits of a double: negative values flipped whole, positive ones with the sign
// bit set, so that unsigned comparison orders them as the values.
HG_HOST_DEVICE inline uint64_t topk_key(double value, bool largest) {
  uint64_t key;
  if (value != value) {
    key = ~uint64_t(0);
  } else {
    if (value == 0.0) value = 0.0;  // -0.0 -> +0.0
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    key = (bits >> 63) ? ~bits : bits | (uint64_t(1) << 63);
  }
  return largest ? key : ~key;
}

// a before b in topk's output.
HG_HOST_DEVICE inline bool topk_before(uint64_t key_a, int64_t index_a, uint64_t key_b, int64_t index_b) {
  return key_a > key_b || (key_a == key_b && index_a < index_b);
}

}  // namespace hg::kernels
