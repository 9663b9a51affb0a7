// The H200 roofline (constants and their sources: h200_roofline.h).
#include "audit/h200_roofline.h"

#include <algorithm>

namespace hg::audit {

const char* flop_kind_name(FlopKind kind) {
  switch (kind) {
    case FlopKind::none: return "none";
    case FlopKind::fp32_fma: return "fp32";
    case FlopKind::fp64_fma: return "fp64";
    case FlopKind::tf32_tensor: return "tf32_tensor";
    case FlopKind::bf16_tensor: return "bf16_tensor";
  }
  return "?";
}

double peak_flops(FlopKind kind) {
  switch (kind) {
    case FlopKind::none: return 0.0;
    case FlopKind::fp32_fma: return H200::fp32_flops;
    case FlopKind::fp64_fma: return H200::fp64_flops;
    case FlopKind::tf32_tensor: return H200::tf32_tensor_flops;
    case FlopKind::bf16_tensor: return H200::bf16_tensor_flops;
  }
  return 0.0;
}

double memory_us(double dram_bytes) { return dram_bytes / H200::hbm_bytes_per_s * 1e6; }

double compute_us(double flops, FlopKind kind) {
  const double rate = peak_flops(kind);
  return rate > 0 ? flops / rate * 1e6 : 0.0;
}

double predicted_us(double dram_bytes, double flops, FlopKind kind) {
  return predicted_us(dram_bytes, flops, kind, 1);
}

double predicted_us(double dram_bytes, double flops, FlopKind kind, int64_t launches) {
  return std::max(memory_us(dram_bytes), compute_us(flops, kind)) + double(launches) * H200::launch_overhead_us;
}

}  // namespace hg::audit
