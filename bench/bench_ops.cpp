// bench_ops: CPU kernel throughput, one JSON object per line.
//   - the machine's fp32 FMA peak (measured here, same process) and GEMM GFLOP/s as a fraction of it;
//   - memory-bound kernels (softmax, layer_norm, GELU) in GB/s at sizes far beyond cache.
// Usage: bench_ops [--quick]   (--quick: smaller sizes, fewer repeats; for smoke runs)
#include <cstring>

#include "bench_sections.h"

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  hg::bench::run_gemm_bench(quick);
  hg::bench::run_bandwidth_bench(quick);
  return 0;
}
