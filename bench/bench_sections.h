#pragma once
namespace hg::bench {
// Prints {"bench":"fma_peak",...} then {"bench":"gemm",...} lines (gemm_bench.cpp).
void run_gemm_bench(bool quick);
// Prints {"bench":"softmax"|"layer_norm"|"gelu",...} lines with GB/s (bandwidth_bench.cpp).
void run_bandwidth_bench(bool quick);
}  // namespace hg::bench
