#pragma once
#include <cstdint>

namespace hg::bench {
// Prints {"bench":"fma_peak",...} then {"bench":"gemm",...} lines (gemm_bench.cpp).
void run_gemm_bench(bool quick);
// Prints {"bench":"memcpy"|"softmax"|"layer_norm"|"gelu"|"copy"|"accumulate"|"add_then_copy"|"compare_lt"|
// "where",...} lines
// with GB/s (bandwidth_bench.cpp).
void run_bandwidth_bench(bool quick);
// Prints {"bench":"half_ops",...} lines: f32 vs bf16 vs f16 elementwise kernels and the conversions,
// one thread, thread CPU time, ratios to f32 from the same process (half_ops_bench.cpp).
void run_half_ops_bench(bool quick);
// Prints the memcpy baseline's lines for an f32 tensor [rows, cols] (one thread, and split over the
// OpenMP threads), best of `repeats`; returns the faster GB/s (bandwidth_bench.cpp).
double run_memcpy_baseline(int64_t rows, int64_t cols, int repeats);
// Prints the losses' and conv_transpose2d's lines through the engine's ops, forward and forward + backward
// (op_bench.cpp).
void run_op_bench(bool quick);
}  // namespace hg::bench
