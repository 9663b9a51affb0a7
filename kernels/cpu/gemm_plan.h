#pragma once
// Internal to kernels/cpu: which CPU GEMM path each dtype takes, chosen by what this CPU measures
// rather than by its feature flags (issue 41). The pure parts live here (shape classes, the
// candidates a CPU can run, the rule that picks one from timings, the cache file's format) so that
// tests can drive them with injected timings; gemm_calibration.cpp measures, caches and serves the
// process's plan. docs/cpu_gemm.md, "Calibrated dispatch", has the why and the figures.
//
// A decision is (dtype, shape class). Its candidates:
//   f32:  the packed kernel's micro-tile and blocking, "14x32" or "6x64" (both KC = 512, so every C
//         element is summed in the same order: the choice never changes an f32 result's bits);
//   bf16: "amx" (tdpbf16ps tiles), "avx512" (vdpbf16ps), "fp32" (the f32 kernel widening bf16 while
//         packing);
//   f16:  "amx" (each f16 split into two bf16, 3 tile products), "fp32" (widening while packing).
// The names are HG_CPU_GEMM's values for the same paths.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/gemm_avx512_blocking.h"

namespace hg::kernels::cpu::detail {

// skinny: min(m, n) < 64 (a small batch, a narrow output); k_small: C not skinny and k <= 256 (a
// small width, head or channel count: the depth where a 14 x 32 B panel still fits a 48 KiB L1d);
// square: the rest.
enum class GemmShapeClass : uint8_t { square, skinny, k_small };
constexpr int kGemmShapeClasses = 3;
const char* gemm_shape_class_name(GemmShapeClass shape);
GemmShapeClass classify_gemm_shape(int64_t m, int64_t n, int64_t k);

enum class GemmPlanDType : uint8_t { f32, bf16, f16 };
constexpr int kGemmPlanDTypes = 3;
const char* gemm_plan_dtype_name(GemmPlanDType dtype);

enum class GemmCandidate : uint8_t { tile14x32, tile6x64, amx, vdpbf16ps, fp32 };
const char* gemm_candidate_name(GemmCandidate candidate);  // "14x32", "6x64", "amx", "avx512", "fp32"

// What this CPU (and OS) can run, and its caches.
struct CpuGemmCaps {
  bool avx512 = false;       // AVX-512 F/VL/BW/DQ + FMA: the packed kernels
  bool avx512_bf16 = false;  // + AVX512_BF16: vdpbf16ps
  bool amx = false;          // AMX-BF16 tiles granted by the OS
  CpuCaches caches;
};
const CpuGemmCaps& detect_cpu_gemm_caps();  // read once

// The candidates of a decision on a CPU with `caps`, in the cache file's order. Fewer than two
// means there is nothing to measure (f32 without AVX-512 is Eigen; f16 without AMX is fp32).
std::vector<GemmCandidate> gemm_candidates(GemmPlanDType dtype, const CpuGemmCaps& caps);

// What the feature flags alone would take (HG_CPU_GEMM=flags, and the incumbent the timings must
// beat): f32 the cache rule of f32_blocking_for at the class's representative depth; bf16 AMX, else
// vdpbf16ps, else fp32; f16 AMX, else fp32.
GemmCandidate flag_rule_candidate(GemmPlanDType dtype, GemmShapeClass shape, const CpuGemmCaps& caps);

// The shape a decision is timed on with `threads` OpenMP threads, [m, n, k]; each is timed as forward
// (A B^T) plus weight gradient (A^T B), the two layouts a training step spends its GEMM time in. The
// side the kernels split across threads grows with the thread count (square 128t x 384 x 512, skinny
// 32 x 512t x 512, k_small 384t x 384 x 128, t capped at 64), so each thread times the same work and
// calibration costs the same at any thread count.
struct GemmShape {
  int64_t m, n, k;
};
GemmShape representative_shape(GemmShapeClass shape, int threads);

// One candidate's time for one decision: seconds for the representative products, the best of
// the rounds. A candidate whose time is not finite and positive is never chosen.
struct GemmTiming {
  GemmCandidate candidate;
  double seconds;
};
struct GemmDecisionTimings {
  GemmPlanDType dtype;
  GemmShapeClass shape;
  std::vector<GemmTiming> timings;
};

// The rule (choose_fastest, calibration_rule.h): the fastest candidate, except that the incumbent (the
// flag rule's choice) stays unless another is at least 5% faster, so noise between near-equal paths
// does not flip the choice from run to run. Deterministic given the timings; the incumbent when none
// is usable.
GemmCandidate choose_gemm_candidate(const std::vector<GemmTiming>& timings, GemmCandidate incumbent);

// ---- the cache file -------------------------------------------------------------------------------
// One text file per CPU identity and thread count, under $XDG_CACHE_HOME/halfgrad (else
// ~/.cache/halfgrad):
//   halfgrad cpu gemm calibration 1
//   cpu <identity>
//   threads <n>
//   <dtype> <class> <candidate>=<seconds> ...      one line per decision measured, all 3 classes of a dtype
//   checksum <FNV-1a 64 of every byte above, 16 hex digits>
// It is trusted only if every line is exactly as this process would write it: same identity and
// thread count, the candidate set this CPU has, finite positive times, an intact checksum.

// The CPU's identity: cpuid's brand string, family/model/stepping, the capabilities and caches.
std::string cpu_identity(const CpuGemmCaps& caps);
std::string format_gemm_cache(const std::string& identity, int threads,
                              const std::vector<GemmDecisionTimings>& decisions);
// The decisions of a cache file, or an empty vector and `error` set to what is wrong with it.
std::vector<GemmDecisionTimings> parse_gemm_cache(std::string_view text, const std::string& identity, int threads,
                                                  const CpuGemmCaps& caps, std::string& error);
uint64_t fnv1a64(std::string_view bytes);

}  // namespace hg::kernels::cpu::detail
