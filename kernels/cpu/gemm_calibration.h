#pragma once
// The process's CPU GEMM plan (issue 41): the first GEMM of a dtype that has a choice to make times
// each candidate path on a few representative shapes (a few milliseconds), picks one per shape class
// by choose_gemm_candidate (gemm_plan.h), remembers it for the process and caches the timings per CPU
// model and thread count under $XDG_CACHE_HOME/halfgrad (else ~/.cache/halfgrad), so later processes
// only read a small file. A cache file that is corrupt, foreign or stale is ignored with one line on
// stderr and measured again. HG_CPU_GEMM=auto (the default) is this; any other value fixes the paths
// without measuring (flags: the feature-flag rule; amx, amx4, avx512, fp32: forced half paths).
// docs/cpu_gemm.md, "Calibrated dispatch".
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_plan.h"
#include "kernels/dtype.h"

namespace hg::kernels::cpu {

// The paths gemm() takes for `dtype` (f32, bf16 or f16; settled now if not yet): "14x32" when every
// shape class takes the same one, else "square 14x32, skinny 14x32, k_small 6x64"; "eigen" for f32
// (or "f32 temporaries" for a half type) on a CPU without AVX-512.
std::string gemm_plan_description(DType dtype);
// Where that choice came from: "measured in 18 ms, cached in <path>", "cached in <path>",
// "HG_CPU_GEMM=fp32", "the only path on this CPU", ...
std::string gemm_plan_source(DType dtype);

// "cpu gemm: f32 14x32, bf16 avx512 (measured in 36 ms, cached in <path>)": the f32 paths and, for a
// half `precision`, its paths, with where the choice came from (the half dtype's source, which
// settles f32 first). What train_gpt and the benchmarks print.
std::string gemm_plan_line(DType precision);

namespace detail {

// HG_CPU_GEMM, read once per process (parse_cpu_gemm_choice's values).
CpuGemmChoice cpu_gemm_choice();

// The candidate the plan gives a GEMM of this dtype and shape. Under HG_CPU_GEMM=auto the decision
// is settled on first use (from the cache or by measuring); while an OpenMP parallel region is active
// an unsettled decision answers with the flag rule without settling (timing needs the threads).
// Other HG_CPU_GEMM values answer with the flag rule: forcing is gemm.cpp's business.
GemmCandidate planned_gemm_candidate(GemmPlanDType dtype, int64_t m, int64_t n, int64_t k);

// Times every decision of `dtype` now on this CPU with the current OpenMP threads (no cache).
std::vector<GemmDecisionTimings> measure_gemm_decisions(GemmPlanDType dtype, const CpuGemmCaps& caps);

// The cache file for this identity and thread count; "" when neither XDG_CACHE_HOME (absolute) nor
// HOME is set.
std::string gemm_cache_path(const std::string& identity, int threads);

// Forgets the process's plan, so that the next GEMM settles it again (tests: write a cache file,
// reset, and the next GEMM reads it). Not while another thread runs a GEMM.
void reset_gemm_plan();

}  // namespace detail
}  // namespace hg::kernels::cpu
