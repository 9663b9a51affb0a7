#pragma once
// The mixed-precision flags of the samples, turned into what the training loop needs:
//   --precision fp32|bf16|fp16      the model's compute dtype (weights, activations, gradients)
//   --loss-scale dynamic|static:S|none   (default: dynamic for fp16, none otherwise)
//   --grad-accum N / --batch-tokens T    micro-batches per optimizer step
// A bad value is a one-line usage error (exit 2) naming the flag and what it accepts.
#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "optim/loss_scaler.h"

namespace hg::samples {

// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16.
DType parse_precision(const std::string& program, const std::string& value);
// "fp32" / "bf16" / "fp16" for a dtype parse_precision returns.
const char* precision_name(DType dtype);

// The scaler of --loss-scale `spec` for a model in `precision` ("" picks the default).
optim::LossScaler parse_loss_scale(const std::string& program, const std::string& spec, DType precision);

// Micro-batches per optimizer step: --grad-accum N, or, when batch_tokens > 0, batch_tokens /
// tokens_per_micro_batch, which must divide exactly (and not be given together with N > 1).
int64_t accumulation_steps(const std::string& program, int64_t grad_accum, int64_t batch_tokens,
                           int64_t tokens_per_micro_batch);

}  // namespace hg::samples
