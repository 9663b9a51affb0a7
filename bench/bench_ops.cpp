// bench_ops: CPU kernel throughput, one JSON object per line.
//   - the machine's fp32 FMA peak (measured here, same process) and GEMM GFLOP/s as a fraction of it;
//   - memory-bound kernels (softmax, layer_norm, GELU, copy, accumulate, compare, where, index_select,
//     index_add, gather, scatter_add, cumsum, rms_norm, batch_norm, group_norm, upsampling,
//     adaptive_avg_pool2d, topk) in GB/s at sizes far
//     beyond cache;
//   - f32 vs bf16 vs f16 kernels on the GPT activation shapes, one thread (half_ops lines);
//   - the losses and conv_transpose2d through the engine's ops, forward and forward + backward (op_bench.cpp).
// Usage: bench_ops [--quick] [--half-only | --bandwidth-only | --ops-only]   (--quick: smaller sizes, fewer
//        repeats, for smoke runs; each --*-only runs that section alone)
#include <cstdio>
#include <cstring>

#include "bench_args.h"
#include "bench_sections.h"

constexpr const char* kUsage =
    "usage: bench_ops [--quick] [--half-only | --bandwidth-only | --ops-only]\n"
    "CPU kernel throughput. Prints JSON lines to stdout: the fp32 FMA peak and GEMM GFLOP/s against it,\n"
    "memory-bound kernels (softmax, layer_norm, GELU, copy, accumulate, compare, where, index_select,\n"
    "index_add, gather, scatter_add, cumsum, rms_norm, batch_norm, group_norm, upsampling,\n"
    "adaptive_avg_pool2d, topk) in GB/s against\n"
    "memcpy, f32 vs bf16 vs f16 kernels (half_ops), and the losses and conv_transpose2d through the engine's\n"
    "ops, forward and forward + backward.\n"
    "  --quick           smaller sizes, fewer repeats (smoke runs)\n"
    "  --half-only       only the half_ops lines\n"
    "  --bandwidth-only  only the memory-bound kernels and the memcpy baseline\n"
    "  --ops-only        only the losses and conv_transpose2d (PyTorch's side: bench/peers/pytorch_ops.py --ops-only)\n"
    "  -h, --help        this text\n";

int main(int argc, char** argv) {
  bool quick = false, half_only = false, bandwidth_only = false, ops_only = false;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--half-only") == 0) {
      half_only = true;
    } else if (std::strcmp(argv[i], "--bandwidth-only") == 0) {
      bandwidth_only = true;
    } else if (std::strcmp(argv[i], "--ops-only") == 0) {
      ops_only = true;
    } else {
      hg::bench::exit_unknown_argument("bench_ops", argv[i], kUsage);
    }
  }
  if (int(half_only) + int(bandwidth_only) + int(ops_only) > 1) {
    std::fprintf(stderr, "bench_ops: --half-only, --bandwidth-only and --ops-only exclude each other; give one\n%s",
                 kUsage);
    return 2;
  }
  const bool all = !half_only && !bandwidth_only && !ops_only;
  if (all) hg::bench::run_gemm_bench(quick);
  if (all || bandwidth_only) hg::bench::run_bandwidth_bench(quick);
  if (all || half_only) hg::bench::run_half_ops_bench(quick);
  if (all || ops_only) hg::bench::run_op_bench(quick);
  return 0;
}
