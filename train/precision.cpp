// The mixed-precision settings from their text form (train/precision.h).
#include "train/precision.h"

#include <cmath>
#include <cstdlib>

#include "kernels/error.h"

namespace hg::train {

DType parse_precision(const std::string& value) {
  if (value == "fp32") return DType::f32;
  if (value == "bf16") return DType::bf16;
  if (value == "fp16") return DType::f16;
  throw Error("unknown --precision \"" + value + "\"; expected fp32, bf16 or fp16");
}

const char* precision_name(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "fp16";
    default:
      return "fp32";
  }
}

optim::LossScaler parse_loss_scale(const std::string& spec, DType precision) {
  if (spec.empty()) return precision == DType::f16 ? optim::LossScaler::dynamic() : optim::LossScaler::none();
  if (spec == "dynamic") return optim::LossScaler::dynamic();
  if (spec == "none") return optim::LossScaler::none();
  const std::string prefix = "static:";
  if (spec.rfind(prefix, 0) == 0) {
    const std::string number = spec.substr(prefix.size());
    char* end = nullptr;
    const double scale = std::strtod(number.c_str(), &end);
    if (!number.empty() && end == number.c_str() + number.size() && std::isfinite(scale) && scale > 0)
      return optim::LossScaler::fixed(scale);
    throw Error("--loss-scale " + spec + ": expected static:S with a finite S > 0 (e.g. static:1024)");
  }
  throw Error("unknown --loss-scale \"" + spec + "\"; expected dynamic, static:S or none");
}

int64_t accumulation_steps(int64_t grad_accum, int64_t batch_tokens, int64_t tokens_per_micro_batch) {
  if (batch_tokens <= 0) return grad_accum;
  if (grad_accum > 1)
    throw Error(
        "give either --grad-accum or --batch-tokens, not both (--batch-tokens derives the number of "
        "micro-batches)");
  if (batch_tokens % tokens_per_micro_batch != 0)
    throw Error("--batch-tokens " + std::to_string(batch_tokens) + " is not a multiple of the micro-batch's " +
                std::to_string(tokens_per_micro_batch) +
                " tokens (--batch x tokens per sequence); expected a multiple of it");
  return batch_tokens / tokens_per_micro_batch;
}

}  // namespace hg::train
