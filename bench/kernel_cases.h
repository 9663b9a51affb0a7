#pragma once
// The hand-written CUDA kernels as benchmark cases: every op of kernels/kernels_cuda.h and
// kernels/step_kernels.h that runs a kernel of kernels/cuda (GEMM is cuBLASLt's, not ours), each at a
// size derived from one (rows, cols) pair, on random inputs, with the op's minimum DRAM traffic: each
// input read once and each output written once, every buffer rounded up to whole 32-byte sectors.
// bench_kernels times them on a GPU and audits them on the emulator (--audit) under the same names,
// so that scripts/audit-vs-measured can join the two.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "audit/h200_roofline.h"
#include "kernels/dtype.h"

struct CUstream_st;

namespace hg::bench {

// The size every case derives its shapes from: n = rows x cols elements for the flat ops, [rows, cols]
// for the row ops (softmax, LayerNorm, cross entropy, reductions); the others say how in kernel_cases.cpp.
// The size bench_kernels times on a GPU (and that the audit's L2 is scaled against).
inline constexpr int64_t kTimedRows = 16384, kTimedCols = 4096;

struct CaseSize {
  int64_t rows = 0, cols = 0;
  int64_t n() const { return rows * cols; }
};

// Device buffers of one case, freed with it.
class DeviceArena {
 public:
  explicit DeviceArena(CUstream_st* stream) : stream_(stream) {}
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  // n elements of a floating dtype, uniform in [low, high) (a fresh seed per buffer).
  void* uniform(int64_t n, DType dtype, double low = -1.0, double high = 1.0);
  void* zeros(size_t bytes);
  // A copy of `values` in device memory.
  void* upload(const void* values, size_t bytes);
  template <class T>
  T* upload(const std::vector<T>& values) {
    return static_cast<T*>(upload(values.data(), values.size() * sizeof(T)));
  }
  CUstream_st* stream() const { return stream_; }

 private:
  CUstream_st* stream_;
  std::vector<void*> buffers_;
  uint64_t seed_ = 1;
};

// One case made ready to run at a size and dtype.
struct PreparedCase {
  std::string shape;           // the shapes it runs at, for the report
  uint64_t min_bytes = 0;      // each input read once, each output written once (whole sectors)
  double flops = 0;            // counted only where compute can bound it (convolution GEMMs)
  audit::FlopKind flop_kind = audit::FlopKind::none;
  bool claims_no_bank_conflicts = true;
  std::function<void()> run;   // enqueues the op once on the arena's stream
};

struct KernelCase {
  std::string name;            // the report's name, joined on: "softmax_forward", "gelu_forward", ...
  std::vector<DType> dtypes;   // empty: the op has no dtype (reported as "none")
  bool audit_only = false;     // a path a GPU does not take by default (conv2d's im2col fallback)
  std::function<PreparedCase(const CaseSize&, DType, DeviceArena&)> prepare;
};

// Every case, in report order.
const std::vector<KernelCase>& kernel_cases();

// The bytes of `n` elements of `dtype` rounded up to 32-byte sectors (the unit of DRAM traffic).
uint64_t sector_bytes(uint64_t bytes);

}  // namespace hg::bench
