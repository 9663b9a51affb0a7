// The gate's exemptions: kernels that are what they are by design (audit/exemptions.h). Each reason is
// also in the kernel's header comment; add both or neither.
#include "audit/exemptions.h"

namespace hg::audit {
namespace {

constexpr const char* kResampleGather =
    "a gather by design, one thread per output: a tap table's lanes read every other 8-byte entry (two taps "
    "per output) and a transposed (backward) or pooling window's lanes read inputs 2 or more elements apart, "
    "so a warp request fills half its sectors; the neighbouring taps read the other half from L1, and DRAM "
    "stays within 1.2x the minimum. Planned: fixed-width (ELL) tables and tiles staged in shared memory";

constexpr const char* kAttentionBackwardPasses =
    "the deterministic backward is three kernels (delta, key tiles, query tiles), each reading its operands "
    "once: q, k, v and dO are read by both tile kernels and o, dO by the delta kernel, 1.63x one pass by "
    "design (no dQ atomics, the same bits every run)";

}  // namespace

const std::vector<Exemption>& exemptions() {
  static const std::vector<Exemption> list = {
      {"loss_scale_update", Check::efficiency,
       "one thread updates the loss scaler's few scalars: no warp to coalesce, a handful of sectors per step"},
      {"step_count_advance", Check::efficiency,
       "one thread advances one step counter: no warp to coalesce, two sectors per step"},
      {"lr_schedule_eval", Check::efficiency,
       "one thread evaluates the schedule at the step count: no warp to coalesce, two sectors per step"},
      {"conv2d_forward_im2col", Check::dram_ratio,
       "im2col materialises the patch matrix (KH x KW copies of the input) by design: the fallback path that "
       "cuDNN replaces on a GPU"},
      {"conv2d_backward_data_im2col", Check::dram_ratio,
       "the backward GEMM writes the patch-matrix gradient that col2im gathers: the im2col fallback by design"},
      {"conv2d_backward_filter_im2col", Check::dram_ratio,
       "im2col materialises the patch matrix per image by design: the fallback path that cuDNN replaces on a GPU"},
      {"attention_backward", Check::dram_ratio, kAttentionBackwardPasses},
      {"attention_backward_d128", Check::dram_ratio, kAttentionBackwardPasses},
      {"attention_backward_padded", Check::dram_ratio, kAttentionBackwardPasses},
      {"bilinear2x_forward", Check::efficiency, kResampleGather},
      {"bilinear2x_backward", Check::efficiency, kResampleGather},
      {"adaptive_avg_pool2d_forward", Check::efficiency, kResampleGather},
  };
  return list;
}

const Exemption* find_exemption(const std::string& op, Check check) {
  for (const Exemption& e : exemptions()) {
    if (op == e.op && e.check == check) return &e;
  }
  return nullptr;
}

}  // namespace hg::audit
