#pragma once
// The H200's roofline: the one place that states the machine constants the kernel audit predicts with
// (bench_kernels --audit, docs/kernel_audit.md). Source: NVIDIA H200 Tensor Core GPU datasheet, H200 SXM
// column (nvidia.com/en-us/data-center/h200); the datasheet's tensor figures are "with sparsity", the
// dense rates below are half of them.
//
//   predicted_us(dram_bytes, flops, kind) = max(dram_bytes / HBM bandwidth, flops / rate(kind))
//                                           + kLaunchOverheadUs
//
// A roofline bound, not a simulation: it assumes a kernel streams its DRAM bytes at the full HBM3e rate,
// or computes at the full rate of its unit, whichever is slower. The launch overhead (stated below) is
// added once per kernel launch, because the audited sizes are small enough that it dominates.
#include <cstdint>

namespace hg::audit {

// What executes a kernel's floating-point work.
enum class FlopKind : uint8_t {
  none,         // memory-bound: its arithmetic intensity is far below the ridge point (the flops are not counted)
  fp32_fma,     // CUDA cores, FP32 (a fused multiply-add counts 2)
  fp64_fma,     // CUDA cores, FP64
  tf32_tensor,  // tensor cores, TF32 inputs (an f32 GEMM allowed TF32)
  bf16_tensor,  // tensor cores, BF16 or FP16 inputs, FP32 accumulation
};
const char* flop_kind_name(FlopKind kind);

struct H200 {
  static constexpr double hbm_bytes_per_s = 4.8e12;        // HBM3e, 4.8 TB/s
  static constexpr double bf16_tensor_flops = 989.5e12;    // dense BF16/FP16 tensor (1,979 with sparsity)
  static constexpr double tf32_tensor_flops = 494.7e12;    // dense TF32 tensor (989 with sparsity)
  static constexpr double fp32_flops = 67e12;              // FP32 on the CUDA cores (FMA = 2 flops)
  static constexpr double fp64_flops = 34e12;              // FP64 on the CUDA cores
  // Per kernel launch: the gap between two back-to-back small kernels on one stream (launch latency,
  // grid start and drain), ~2-3 us measured on Hopper; 2.5 us here. Not in the datasheet: an estimate.
  static constexpr double launch_overhead_us = 2.5;
};

// Peak rate of `kind` in flop/s (0 for none).
double peak_flops(FlopKind kind);
// dram_bytes at the HBM rate, in microseconds.
double memory_us(double dram_bytes);
// flops at the peak rate of `kind`, in microseconds (0 for none).
double compute_us(double flops, FlopKind kind);
// The roofline time of one launch plus the launch overhead, in microseconds.
double predicted_us(double dram_bytes, double flops, FlopKind kind);
// The same for `launches` launches whose bytes and flops are summed (the overhead paid per launch).
double predicted_us(double dram_bytes, double flops, FlopKind kind, int64_t launches);

}  // namespace hg::audit
