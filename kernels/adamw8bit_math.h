#pragma once
// 8-bit AdamW state (bitsandbytes' block-wise 8-bit Adam, Dettmers et al. 2022): the sizes every
// backend and the optimizer agree on. The quantisation maps and the per-block math follow here.
#include <cstdint>

namespace hg::kernels {

// Elements per quantisation block: each block of m (and of v) has its own fp32 absmax.
inline constexpr int64_t kAdamW8BitBlock = 2048;
// Parameters with fewer elements keep 32-bit moments (as bitsandbytes' min_8bit_size).
inline constexpr int64_t kAdamW8BitMinElements = 4096;

inline constexpr int64_t adamw8bit_blocks(int64_t n) { return (n + kAdamW8BitBlock - 1) / kAdamW8BitBlock; }

}  // namespace hg::kernels
