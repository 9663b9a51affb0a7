// ZeroOptimizer's moment buffers (dist/zero_optimizer.h), and the 8-bit AdamW state under ZeRO:
// AdamWOptions().state_bits(8) (bitsandbytes' block-wise 8-bit Adam; kernels/adamw8bit_math.h).
//
// Update. This rank's part of each parameter is one StateSlice (dist/zero_layout.h places the flat
// space so that a quantised parameter's slice starts on one of its block boundaries). A quantised
// slice keeps u8 codes of m and v (packed slice after slice in q8_) and one fp32 absmax per block of
// 2048 of its elements (packed likewise, from StateSlice::block). The update hands adamw8bit_step_device (or, offloaded, cpu::adamw8bit_offload_step)
// exactly the parameter's blocks the single-process AdamW hands it: same absmax, same codes, same
// bits. Parameters under kAdamW8BitMinElements keep fp32 moments, packed in exp_avg_ / exp_avg_sq_.
//
// Checkpoint (save_state / load_state, one file per rank, metadata state_bits = 8, block = 2048).
// As with 32-bit state the file holds ranges of the parameters concatenated without padding, so any
// stage and world size reads any other's; per element of the ranges, in order:
//   "master"                          f32, every element (when a master is kept)
//   "exp_avg", "exp_avg_sq"           u8 codes, the elements of quantised parameters
//   "exp_avg_absmax", ...sq_absmax    f32, one per block of those elements (ranges start on blocks)
//   "exp_avg_fp32", "exp_avg_sq_fp32" f32, the elements of the other parameters
// No block straddles two ranks in any layout, so re-partitioning copies whole blocks: codes and
// absmax move unchanged and a resumed run continues bit for bit. A saved range of a quantised
// parameter that does not start on a block boundary (or ends inside a block short of the parameter's
// end) is refused: its blocks could not be rebuilt exactly.
#include <algorithm>
#include <functional>

#include "dist/zero_layout.h"
#include "dist/zero_optimizer.h"
#include "engine/ops.h"
#include "kernels/step_kernels.h"

namespace hg::dist {
using kernels::kAdamW8BitBlock;
using layout::overlap;

void ZeroOptimizer::init_moments() {
  HG_CHECK(state_bits() == 8 || state_bits() == 32, "[ZeroOptimizer] state_bits ", state_bits(),
           " is not supported: expected 32 (fp32 moments) or 8 (block-wise 8-bit moments)");
  const bool eight = state_bits() == 8;
  int64_t codes = 0, blocks = 0, wide = 0;
  slices_.clear();
  for (const OwnedRange& range : owned_)
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t numel = params_[i].numel();
      const int64_t begin = std::max(offsets_[i], range.begin);
      const int64_t count = overlap(offsets_[i], offsets_[i] + numel, range.begin, range.begin + range.count);
      if (count == 0) continue;
      StateSlice s;
      s.param = i;
      s.first = begin - offsets_[i];
      s.count = count;
      s.local = range.local + begin - range.begin;
      s.quantized = layout::quantized_state(numel, state_bits());
      if (s.quantized) {
        HG_CHECK(s.first % kAdamW8BitBlock == 0, "[ZeroOptimizer] internal: rank ", comm_.rank(),
                 "'s slice of parameter ", i, " starts at its element ", s.first, ", inside a quantisation block");
        s.state = codes;
        s.block = blocks;
        codes += count;
        blocks += kernels::adamw8bit_blocks(count);
      } else {
        s.state = eight ? wide : s.local;
        wide += count;
      }
      HG_CHECK(slice_of(i, s.first) == nullptr, "[ZeroOptimizer] internal: parameter ", i, " owned twice");
      slices_.push_back(s);
    }
  if (!fused_adamw()) return init_rule_state();  // dist/zero_elementwise_update.cpp
  if (!eight) {
    exp_avg_ = new_state(opt_count_);
    exp_avg_sq_ = new_state(opt_count_);
    return;
  }
  exp_avg_ = new_state(wide);
  exp_avg_sq_ = new_state(wide);
  // The initial state of kernels/adamw8bit_math.h, as the single-process AdamW starts it: every code
  // its map's 0.0 entry, every absmax 0.
  q8_.exp_avg = new_state(codes, DType::u8);
  q8_.exp_avg.fill_(double(kernels::kAdamW8BitSignedZeroCode));
  q8_.exp_avg_sq = new_state(codes, DType::u8);
  q8_.exp_avg_sq.fill_(double(kernels::kAdamW8BitUnsignedZeroCode));
  q8_.exp_avg_absmax = new_state(blocks);
  q8_.exp_avg_sq_absmax = new_state(blocks);
}

const ZeroOptimizer::StateSlice* ZeroOptimizer::slice_of(size_t param, int64_t element) const {
  for (const StateSlice& s : slices_)
    if (s.param == param && element >= s.first && element < s.first + s.count) return &s;
  return nullptr;
}

void ZeroOptimizer::for_each_saved_run(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                       const std::function<void(size_t, int64_t, int64_t)>& fn) const {
  for (const auto& [offset, count] : ranges) {
    // The parameter holding `offset`: the last whose first element is at or before it.
    size_t i = size_t(std::upper_bound(unpadded_offsets_.begin(), unpadded_offsets_.end(), offset) -
                      unpadded_offsets_.begin() - 1);
    for (int64_t at = offset; at < offset + count; ++i) {
      const int64_t end = std::min(offset + count, unpadded_offsets_[i] + params_[i].numel());
      if (end > at) fn(i, at - unpadded_offsets_[i], end - at);
      at = std::max(at, end);
    }
  }
}

safetensors::NamedTensors ZeroOptimizer::quantized_file_tensors(const std::vector<Piece>& pieces) const {
  std::vector<Tensor> master, m, v, m_absmax, v_absmax, m_wide, v_wide;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Piece& p : pieces) ranges.emplace_back(p.unpadded, p.count);
  for_each_saved_run(ranges, [&](size_t i, int64_t first, int64_t n) {
    const StateSlice* s = slice_of(i, first);
    HG_CHECK(s != nullptr && first + n <= s->first + s->count, "[ZeroOptimizer] internal: elements [", first, ", ",
             first + n, ") of parameter ", i, " are not all owned by rank ", comm_.rank());
    const int64_t rel = first - s->first;
    if (master_.defined()) master.push_back(master_.narrow(0, s->local + rel, n).to(kCPU));
    if (s->quantized) {
      HG_CHECK(rel % kAdamW8BitBlock == 0, "[ZeroOptimizer] internal: a saved run starts inside a block");
      const int64_t block = s->block + rel / kAdamW8BitBlock, blocks = kernels::adamw8bit_blocks(n);
      m.push_back(q8_.exp_avg.narrow(0, s->state + rel, n).to(kCPU));
      v.push_back(q8_.exp_avg_sq.narrow(0, s->state + rel, n).to(kCPU));
      m_absmax.push_back(q8_.exp_avg_absmax.narrow(0, block, blocks).to(kCPU));
      v_absmax.push_back(q8_.exp_avg_sq_absmax.narrow(0, block, blocks).to(kCPU));
    } else {
      m_wide.push_back(exp_avg_.narrow(0, s->state + rel, n).to(kCPU));
      v_wide.push_back(exp_avg_sq_.narrow(0, s->state + rel, n).to(kCPU));
    }
  });
  auto join = [](const std::vector<Tensor>& parts, DType dtype) {
    return parts.empty() ? zeros({0}, dtype, kCPU) : cat(parts, 0);
  };
  safetensors::NamedTensors out;
  if (master_.defined()) out.emplace_back("master", join(master, DType::f32));
  out.emplace_back("exp_avg", join(m, DType::u8));
  out.emplace_back("exp_avg_sq", join(v, DType::u8));
  out.emplace_back("exp_avg_absmax", join(m_absmax, DType::f32));
  out.emplace_back("exp_avg_sq_absmax", join(v_absmax, DType::f32));
  out.emplace_back("exp_avg_fp32", join(m_wide, DType::f32));
  out.emplace_back("exp_avg_sq_fp32", join(v_wide, DType::f32));
  return out;
}

void ZeroOptimizer::check_quantized_shard(const safetensors::File& file, const std::string& path,
                                          const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
  const char* who = "[ZeroOptimizer] load_state: ";
  auto block = file.metadata.find("block");
  HG_CHECK(block != file.metadata.end() && block->second == std::to_string(kAdamW8BitBlock), who, path,
           " holds 8-bit state in blocks of ", block == file.metadata.end() ? std::string("?") : block->second,
           " elements; expected ", kAdamW8BitBlock);
  int64_t all = 0, codes = 0, blocks = 0, wide = 0;
  for_each_saved_run(ranges, [&](size_t i, int64_t first, int64_t n) {
    all += n;
    if (!layout::quantized_state(params_[i].numel(), 8)) {
      wide += n;
      return;
    }
    HG_CHECK(first % kAdamW8BitBlock == 0 && ((first + n) % kAdamW8BitBlock == 0 || first + n == params_[i].numel()),
             who, path, " holds elements [", first, ", ", first + n, ") of parameter ", i, " (", params_[i].numel(),
             " elements), which do not start and end on its quantisation blocks of ", kAdamW8BitBlock);
    codes += n;
    blocks += kernels::adamw8bit_blocks(n);
  });
  auto check = [&](const char* name, DType dtype, int64_t needed, bool optional) {
    const Tensor* t = file.find(name);
    HG_CHECK(t || optional, who, path, " has no '", name, "'");
    HG_CHECK(!t || (t->dim() == 1 && t->dtype() == dtype && t->numel() >= needed), who, path, " '", name, "' is ",
             t ? t->describe() : std::string(), " but its ranges need ", needed, " ", dtype_name(dtype), " elements");
  };
  check("master", DType::f32, all, true);
  check("exp_avg", DType::u8, codes, false);
  check("exp_avg_sq", DType::u8, codes, false);
  check("exp_avg_absmax", DType::f32, blocks, false);
  check("exp_avg_sq_absmax", DType::f32, blocks, false);
  check("exp_avg_fp32", DType::f32, wide, false);
  check("exp_avg_sq_fp32", DType::f32, wide, false);
}

void ZeroOptimizer::load_quantized_shard(const safetensors::File& file,
                                         const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  const Tensor* saved_master = file.find("master");
  const Tensor &m = *file.find("exp_avg"), &v = *file.find("exp_avg_sq");
  const Tensor &m_absmax = *file.find("exp_avg_absmax"), &v_absmax = *file.find("exp_avg_sq_absmax");
  const Tensor &m_wide = *file.find("exp_avg_fp32"), &v_wide = *file.find("exp_avg_sq_fp32");
  int64_t at_all = 0, at_codes = 0, at_blocks = 0, at_wide = 0;  // where the run starts in the file
  for_each_saved_run(ranges, [&](size_t i, int64_t first, int64_t n) {
    const bool quantized = layout::quantized_state(params_[i].numel(), 8);
    for (const StateSlice& s : slices_) {
      if (s.param != i) continue;
      const int64_t lo = std::max(first, s.first), hi = std::min(first + n, s.first + s.count);
      if (hi <= lo) continue;
      // A master the files lack keeps the copy of the loaded parameters.
      if (saved_master && master_.defined())
        master_.narrow(0, s.local + lo - s.first, hi - lo).copy_(saved_master->narrow(0, at_all + lo - first, hi - lo));
      if (quantized) {  // lo is on a block of both (checked), hi on one or the parameter's end
        q8_.exp_avg.narrow(0, s.state + lo - s.first, hi - lo).copy_(m.narrow(0, at_codes + lo - first, hi - lo));
        q8_.exp_avg_sq.narrow(0, s.state + lo - s.first, hi - lo).copy_(v.narrow(0, at_codes + lo - first, hi - lo));
        const int64_t mine = s.block + (lo - s.first) / kAdamW8BitBlock;
        const int64_t theirs = at_blocks + (lo - first) / kAdamW8BitBlock;
        const int64_t blocks = kernels::adamw8bit_blocks(hi - lo);
        q8_.exp_avg_absmax.narrow(0, mine, blocks).copy_(m_absmax.narrow(0, theirs, blocks));
        q8_.exp_avg_sq_absmax.narrow(0, mine, blocks).copy_(v_absmax.narrow(0, theirs, blocks));
      } else {
        exp_avg_.narrow(0, s.state + lo - s.first, hi - lo).copy_(m_wide.narrow(0, at_wide + lo - first, hi - lo));
        exp_avg_sq_.narrow(0, s.state + lo - s.first, hi - lo).copy_(v_wide.narrow(0, at_wide + lo - first, hi - lo));
      }
    }
    at_all += n;
    if (quantized) {
      at_codes += n;
      at_blocks += kernels::adamw8bit_blocks(n);
    } else {
      at_wide += n;
    }
  });
}

}  // namespace hg::dist
