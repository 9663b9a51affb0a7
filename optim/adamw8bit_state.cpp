// AdamW's 8-bit state (optim/adamw.h, 8-BIT STATE): which parameters keep quantised moments, the
// buffers they keep (u8 codes in the parameter's shape, f32 absmax per block of
// kernels::kAdamW8BitBlock) and their zero state, the fused adamw8bit_step_device call, and the check that a loaded state
// has the optimizer's width before LocalOptimizer copies it in.
#include <charconv>

#include "engine/kernel_dispatch.h"
#include "kernels/adamw8bit_math.h"
#include "kernels/step_kernels.h"
#include "optim/adamw.h"

namespace hg::optim {
namespace {

bool is_moment_code(const std::string& buffer) { return buffer == "exp_avg" || buffer == "exp_avg_sq"; }
bool is_block_scale(const std::string& buffer) {
  return buffer == "exp_avg_absmax" || buffer == "exp_avg_sq_absmax";
}

}  // namespace

bool AdamW::quantizes(const Tensor& param, const AdamWOptions& options) {
  const DType t = param.dtype();
  return options.state_bits() == 8 && (t == DType::f32 || is_half(t)) &&
         param.numel() >= kernels::kAdamW8BitMinElements;
}

int64_t AdamW::moment_bytes(const Tensor& param, const AdamWOptions& options) {
  const int64_t n = param.numel();
  if (!quantizes(param, options)) return 2 * n * int64_t(dtype_size(accumulate_dtype(param.dtype())));
  return 2 * n + 2 * kernels::adamw8bit_blocks(n) * int64_t(sizeof(float));
}

std::vector<std::string> AdamW::state_buffer_names_for(const Tensor& param) const {
  if (!quantizes(param)) return state_buffer_names();
  return {"exp_avg", "exp_avg_sq", "exp_avg_absmax", "exp_avg_sq_absmax"};
}

std::pair<Shape, DType> AdamW::state_buffer_layout(const Tensor& param, const std::string& buffer) const {
  if (!quantizes(param)) return {param.shape(), state_dtype(param)};
  if (is_block_scale(buffer)) return {Shape{kernels::adamw8bit_blocks(param.numel())}, DType::f32};
  return {param.shape(), DType::u8};
}

void AdamW::init_moments(const Tensor& param, ParamState& state) const {
  for (const std::string& name : state_buffer_names_for(param)) {
    const auto [shape, dtype] = state_buffer_layout(param, name);
    state.buffers[name] = zeros(shape, dtype, param.device());
  }
  // kernels/adamw8bit_math.h: before the first step every code is its map's 0.0 entry and every
  // absmax 0 (the unsigned map's zero code is 0 already).
  if (quantizes(param)) state.buffers.at("exp_avg").fill_(double(kernels::kAdamW8BitSignedZeroCode));
}

void AdamW::quantized_step(const Tensor& param, void* master, const Tensor& grad, ParamState& state,
                           const kernels::AdamWStepScalars& scalars, const AdamWOptions& o, double weight_decay) {
  kernels::QuantizedMoments moments;
  moments.exp_avg = static_cast<uint8_t*>(state.buffers.at("exp_avg").data_ptr());
  moments.exp_avg_sq = static_cast<uint8_t*>(state.buffers.at("exp_avg_sq").data_ptr());
  moments.absmax_exp_avg = static_cast<float*>(state.buffers.at("exp_avg_absmax").data_ptr());
  moments.absmax_exp_avg_sq = static_cast<float*>(state.buffers.at("exp_avg_sq_absmax").data_ptr());
  HG_KERNEL(param.device(), adamw8bit_step_device, param.data_ptr(), master, grad.data_ptr(), moments, param.numel(),
            scalars, o.beta1(), o.beta2(), o.eps(), weight_decay, param.dtype());
}

void AdamW::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) {
  const std::vector<Tensor> params = parameters();
  for (const auto& [key, value] : entries) {
    // Malformed names and indices are LocalOptimizer's to report; only the moments are looked at here.
    const size_t dot = key.find('.');
    if (dot == std::string::npos || !value.defined()) continue;
    size_t index = 0;
    const auto parsed = std::from_chars(key.data(), key.data() + dot, index);
    if (parsed.ec != std::errc() || parsed.ptr != key.data() + dot || index >= params.size()) continue;
    const std::string buffer = key.substr(dot + 1);
    if (!is_moment_code(buffer) && !is_block_scale(buffer)) continue;
    const Tensor& p = params[index];
    const bool entry_8bit = is_block_scale(buffer) || value.dtype() == DType::u8;
    if (quantizes(p)) {
      HG_CHECK(entry_8bit, "[AdamW] load_state_tensors: entry '", key, "' is ", value.describe(),
               ", a 32-bit moment, but this optimizer keeps 8-bit state for parameter ", index, " (", p.describe(),
               "): state_bits(8) and ", p.numel(), " >= ", kernels::kAdamW8BitMinElements,
               " elements; expected u8 codes and f32 block scales (build the optimizer with state_bits(32) to "
               "resume a 32-bit state)");
    } else {
      HG_CHECK(!entry_8bit, "[AdamW] load_state_tensors: entry '", key, "' is ", value.describe(),
               ", 8-bit state, but this optimizer keeps 32-bit moments for parameter ", index, " (", p.describe(),
               "; state_bits(", options_.state_bits(), "), 8-bit only from ", kernels::kAdamW8BitMinElements,
               " elements); expected ", dtype_name(state_dtype(p)),
               " moments (build the optimizer with state_bits(8) to resume an 8-bit state)");
    }
  }
  LocalOptimizer::load_state_tensors(entries);
}

}  // namespace hg::optim
