#pragma once
// The mixed-precision settings of a training run, from their text form (the samples' flags and run
// config keys use these spellings), and the accumulation count a token budget implies:
//   precision    fp32 | bf16 | fp16              the model's compute dtype (weights, activations, grads)
//   loss scale   dynamic | static:S | none | ""  ("" picks the default: dynamic for fp16, none otherwise)
//   micro-batches per optimizer step: grad_accum, or batch_tokens / tokens per micro-batch
// A bad value throws hg::Error whose message names the setting and what it accepts (the samples turn
// it into a usage error, exit code 2).
#include <cstdint>
#include <string>

#include "kernels/dtype.h"
#include "optim/loss_scaler.h"

namespace hg::train {

// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16.
DType parse_precision(const std::string& value);
// "fp32" / "bf16" / "fp16" for a dtype parse_precision returns.
const char* precision_name(DType dtype);

// The scaler of loss-scale `spec` for a model in `precision`.
optim::LossScaler parse_loss_scale(const std::string& spec, DType precision);

// Micro-batches per optimizer step: grad_accum, or, when batch_tokens > 0, batch_tokens /
// tokens_per_micro_batch, which must divide exactly (and not be given together with grad_accum > 1).
int64_t accumulation_steps(int64_t grad_accum, int64_t batch_tokens, int64_t tokens_per_micro_batch);

}  // namespace hg::train
