// measure_memory (plan/measure_memory.h): one measured training step of a configuration.
#include "plan/measure_memory.h"

#include <memory>
#include <optional>

#include "dist/communicator.h"
#include "dist/zero_optimizer.h"
#include "engine/activation_offload.h"
#include "engine/allocator.h"
#include "engine/random.h"
#include "layers/nn.h"
#include "optim/adamw.h"
#if HALFGRAD_HAS_CUDA
#include "engine/cuda/cuda_allocator.h"
#endif

namespace hg::plan {

namespace {

DType dtype_of(Precision p) {
  switch (p) {
    case Precision::fp32:
      return DType::f32;
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
  }
  return DType::f32;
}

int64_t host_allocated(const Device& device) {
  return device.is_cpu() ? host_offload_allocator().stats().allocated_bytes : pinned_memory_stats().allocated_bytes;
}
int64_t host_peak(const Device& device) {
  return device.is_cpu() ? host_offload_allocator().stats().peak_allocated_bytes
                         : pinned_memory_stats().peak_allocated_bytes;
}
void reset_host_peak(const Device& device) {
  if (device.is_cpu()) host_offload_allocator().reset_peak();
#if HALFGRAD_HAS_CUDA
  else
    cuda::pinned_allocator().reset_peak();
#endif
}

}  // namespace

MeasuredMemory measure_memory(const ModelShape& shape, const TrainingConfig& config, const Device& device,
                              dist::Communicator* shared_comm) {
  HG_CHECK(config.state_bits == 32 || (config.state_bits == 8 && config.zero_stage < 0 && !config.offload_optimizer),
           "[plan::measure_memory] optimizer state width ", config.state_bits, " with zero stage ", config.zero_stage,
           config.offload_optimizer ? " and optimizer offload" : "",
           ": 8-bit state is measured with the local AdamW only; expected 32 bits, or 8 without ZeRO");
  HG_CHECK(config.micro_batch >= 1 && config.grad_accum >= 1,
           "[plan::measure_memory] expected micro_batch >= 1 and "
           "grad_accum >= 1, got ",
           config.micro_batch, " and ", config.grad_accum);
  const int64_t device_before = memory_stats(device).allocated_bytes;
  const int64_t host_before = host_allocated(device);
  MeasuredMemory measured;
  {
    manual_seed(1234);
    const auto gpt_config = nn::GPTConfig()
                                .vocab_size(shape.vocab)
                                .context(shape.context)
                                .n_layer(shape.layers)
                                .n_head(shape.heads)
                                .n_embd(shape.dim)
                                .dropout(shape.dropout)
                                .attention(shape.fused_attention ? AttentionImpl::Auto : AttentionImpl::Composed)
                                .fused_classifier(shape.fused_classifier)
                                .recompute_every(config.recompute_every);
    auto model = std::make_shared<nn::GPT>(gpt_config);
    model->to(dtype_of(config.precision));
    model->to(device);
    if (config.fp32_grads) model->set_grad_dtype(DType::f32);
    model->train();

    const auto adamw =
        optim::AdamWOptions().lr(1e-4).weight_decay(0.1).decay_only_matrices(true).state_bits(config.state_bits);
    std::unique_ptr<dist::Communicator> own_comm;
    std::unique_ptr<optim::Optimizer> optimizer;
    const bool world_of_one = shared_comm == nullptr || shared_comm->world_size() == 1;
    HG_CHECK(world_of_one || config.zero_stage >= 0 || config.offload_optimizer, "[plan::measure_memory] a world of ",
             shared_comm ? shared_comm->world_size() : 1, " ranks needs a ZeRO stage (0..3), got ", config.zero_stage);
    if (config.zero_stage < 0 && !config.offload_optimizer) {
      auto local = std::make_unique<optim::AdamW>(model->parameters(), adamw);
      local->set_mixed_precision(optim::MixedPrecisionOptions().master_weights(config.master_weights));
      optimizer = std::move(local);
    } else {
      if (shared_comm == nullptr) own_comm = std::make_unique<dist::Communicator>();
      dist::Communicator& comm = shared_comm ? *shared_comm : *own_comm;
      optimizer = std::make_unique<dist::ZeroOptimizer>(*model, comm,
                                                        dist::ZeroOptions()
                                                            .stage(std::max(config.zero_stage, 0))
                                                            .offload_optimizer(config.offload_optimizer)
                                                            .persistence_threshold(4 * shape.dim)
                                                            .adamw(adamw));
    }

    const int64_t B = config.micro_batch, T = shape.context;
    auto step = [&] {
      for (int64_t micro = 0; micro < config.grad_accum; ++micro) {
        const Tensor ids = randint(0, shape.vocab, {B, T}, DType::i64).to(device);
        const Tensor targets = randint(0, shape.vocab, {B, T}, DType::i64).to(device);
        optimizer->set_gradient_sync(micro == config.grad_accum - 1);
        Tensor loss;
        {
          std::optional<hg::ActivationOffload> offload;
          if (config.offload_activations != OffloadMode::off) offload.emplace(config.offload_activations);
          loss = model->loss(ids, targets) * (1.0 / double(config.grad_accum));
        }
        loss.backward();
      }
      optimizer->clip_grad_norm(1.0);
      optimizer->step();
      optimizer->zero_grad();
    };
    step();  // warm-up: optimizer state, caches
    reset_peak_memory(device);
    reset_host_peak(device);
    step();
    measured.device_peak = memory_stats(device).peak_allocated_bytes - device_before;
    measured.host_peak = host_peak(device) - host_before;
  }
  return measured;
}

}  // namespace hg::plan
