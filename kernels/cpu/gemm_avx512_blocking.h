#pragma once
// Internal to kernels/cpu: the fp32 packed GEMM's tile shape and cache blocking, chosen per CPU at
// run time (gemm_avx512.cpp explains the choice), and entry points that take an explicit blocking
// so that tests can put small blocks under small matrices and gemm_bench can compare the tiles in
// one process. Arguments other than the blocking are those of the gemm_avx512.h entry points.
#include <cstdint>

#include "kernels/half.h"

namespace hg::kernels::cpu::detail {

// The micro-tile: rows x columns of C held in registers.
enum class GemmTile {
  mr14_nr32,  // 28 accumulators, 16 loads per 28 FMAs: one FMA pipe (AMD Zen 4)
  mr6_nr64,   // 24 accumulators, 10 loads per 24 FMAs
};
const char* gemm_tile_name(GemmTile tile);  // "14x32", "6x64"

// kc: depth of one packed slice; mc: rows of a packed A block (a multiple of the tile's rows);
// nc: columns of a packed B block. pack_a_by_rows: a transposed A (stored [k][m]) is packed a row
// of A at a time for the whole MC block, rather than panel by panel (the 6 x 64 tile always is).
struct GemmBlocking {
  GemmTile tile;
  int64_t kc, mc, nc;
  bool pack_a_by_rows = false;
};

// Data cache sizes per core in bytes, 0 where unknown.
struct CpuCaches {
  int64_t l1d = 0, l2 = 0;
};
// From cpuid (leaf 4 on Intel, 0x8000001D on AMD), read once.
CpuCaches detect_cpu_caches();
// The fp32 kernel's blocking for a CPU with these caches and a product of depth k (pure; the rule
// is in gemm_avx512.cpp's comment).
GemmBlocking f32_blocking_for(const CpuCaches& caches, int64_t k);
// The blocking that goes with each tile on a CPU with these caches: KC 512 and NC 2048 for both (so
// both sum every C element in the same order), MC 224 (14 x 32) or 240 (6 x 64); A^T packed by rows
// for 6 x 64 always and for 14 x 32 where L1d >= 48 KiB.
GemmBlocking f32_blocking_of_tile(GemmTile tile, const CpuCaches& caches);
// What gemm_f32_avx512 and the gemm_half_via_f32_avx512 paths use for an m x n x k product: the tile
// of the calibrated plan for its shape class (gemm_calibration.h), or f32_blocking_for(caches, k)
// under HG_CPU_GEMM=flags (or any forced value), with f32_blocking_of_tile's blocking.
GemmBlocking f32_blocking(int64_t m, int64_t n, int64_t k);

// gemm_f32_avx512 / gemm_half_via_f32_avx512 with an explicit blocking (kc >= 1, mc a positive
// multiple of the tile's rows, nc >= 1). Only call them when cpu_has_avx512_gemm().
void gemm_f32_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                             float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                             int64_t ldc);
void gemm_half_via_f32_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                      int64_t k, float alpha, const half* a, int64_t lda, const half* b, int64_t ldb,
                                      float beta, void* c, int64_t ldc, bool c_is_half);
void gemm_half_via_f32_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n,
                                      int64_t k, float alpha, const bfloat16* a, int64_t lda, const bfloat16* b,
                                      int64_t ldb, float beta, void* c, int64_t ldc, bool c_is_half);

// The vdpbf16ps GEMM's blocking (gemm_bf16_avx512.cpp; always the 14 x 32 tile, kc even), and
// gemm_bf16_avx512 with an explicit one. Only call it when cpu_has_avx512_bf16_gemm().
GemmBlocking bf16_blocking_for(const CpuCaches& caches);
const GemmBlocking& bf16_blocking();
void gemm_bf16_avx512_blocked(const GemmBlocking& blocking, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb, float beta,
                              void* c, int64_t ldc, bool c_is_bf16);

}  // namespace hg::kernels::cpu::detail
