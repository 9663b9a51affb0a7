#pragma once
// The training state the checkpoint fuzz target loads into, and make_fuzz_seeds saves as its seed:
// a tiny GPT after one AdamW step (so the optimizer has moments), a dynamic loss scaler, counters,
// the default Philox generator, a mt19937_64 and an extra i64 tensor -- what train_gpt registers.
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/random.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "train/checkpoint.h"

namespace hg::fuzz {

struct CheckpointRig {
  std::shared_ptr<nn::GPT> model;
  std::unique_ptr<optim::AdamW> optimizer;
  optim::LossScaler scaler;
  std::mt19937_64 data_rng;
  int64_t step = 1;
  Tensor position;
  train::TrainingState state;

  explicit CheckpointRig(uint64_t seed) {
    manual_seed(seed);
    const auto config = nn::GPTConfig().vocab_size(8).context(4).n_layer(1).n_head(2).n_embd(4);
    model = std::make_shared<nn::GPT>(config);
    optimizer = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions().lr(1e-2));
    scaler = optim::LossScaler::dynamic(optim::DynamicLossScaleOptions().init_scale(256).growth_interval(3));
    data_rng.seed(seed);
    const Tensor ids = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {1, 4});
    const Tensor targets = from_vector(std::vector<int64_t>{2, 3, 4, 5}, {1, 4});
    model->loss(ids, targets).backward();
    optimizer->step();
    optimizer->zero_grad();
    position = from_vector(std::vector<int64_t>{3, 7}, {2});
    state.model(*model)
        .optimizer(*optimizer)
        .scaler(scaler)
        .counter("step", step)
        .generator("default", default_generator())
        .mt19937_64("data", data_rng)
        .extra("loader", position);
  }
  CheckpointRig(const CheckpointRig&) = delete;

  std::vector<std::vector<unsigned char>> snapshot() const {
    std::vector<std::vector<unsigned char>> out;
    for (const auto& [name, t] : state.tensors()) {
      const Tensor c = t.contiguous();
      out.emplace_back(size_t(c.numel()) * c.element_size());
      if (!out.back().empty()) std::memcpy(out.back().data(), c.data_ptr(), out.back().size());
    }
    return out;
  }
};

}  // namespace hg::fuzz
