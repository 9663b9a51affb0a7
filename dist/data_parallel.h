#pragma once
// DataParallel: the data-parallel side of a training run, decided in one place so that a training
// program has no branch on it. From the launcher's environment (dist/bootstrap.h: mpirun, or
// RANK/WORLD_SIZE) and the ZeRO settings it joins a Communicator when one is needed, and wraps the
// optimizer the program built: in a single process without ZeRO it is used as it is, otherwise a
// ZeroOptimizer of the stage asked for (dist/zero_optimizer.h) shards its state across the ranks (AdamW,
// SGD, or any element-wise optimizer). Both are an optim::Optimizer, which is all the training loop
// (train/trainer.h) sees.
//
//   dist::DataParallel parallel(dist::DataParallelOptions().zero_stage(2));
//   std::unique_ptr<optim::Optimizer> optimizer = parallel.wrap(
//       model, std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions().lr(0.1).momentum(0.9)));
//   train::TrainerOptions().communicator(parallel.communicator());
//
// CONVENTION
//   - zero_stage -1: no ZeRO in a single process, stage 0 (plain data parallelism: gradients
//     all-reduced) when launched as several processes. offload_optimizer implies stage >= 0.
//   - Each rank trains on its own rows of every global batch: a DataLoader built with
//     DataLoaderOptions().rank(rank(), world_size()) and batch size rows_per_rank(global_batch).
//   - quiet_other_ranks: ranks other than 0 write nothing to stdout (their figures equal rank 0's).
#include <cstdint>
#include <memory>

#include "dist/communicator.h"
#include "layers/module.h"
#include "optim/adamw.h"

namespace hg::dist {

// DataParallelOptions().zero_stage(3).offload_optimizer(true).persistence_threshold(4 * dim)
struct DataParallelOptions {
  HG_OPTION(DataParallelOptions, int, zero_stage, -1);
  HG_OPTION(DataParallelOptions, bool, offload_optimizer, false);
  // ZeRO stage 3: tensors of at most this many elements stay whole on every rank.
  HG_OPTION(DataParallelOptions, int64_t, persistence_threshold, 0);
  HG_OPTION(DataParallelOptions, bool, quiet_other_ranks, true);
};

class DataParallel {
 public:
  // Collective when a communicator is joined (every process of the launch constructs one).
  explicit DataParallel(DataParallelOptions options = {});
  ~DataParallel();

  // The ranks' communicator; nullptr in a single process without ZeRO.
  Communicator* communicator() const { return comm_.get(); }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world_size() const { return comm_ ? comm_->world_size() : 1; }
  // Rows of each global batch per rank; an error names the batch and the world size when the
  // batch does not divide among the ranks.
  int64_t rows_per_rank(int64_t global_batch) const;

  // The run's optimizer over model.parameters(): `optimizer` itself in a single process without
  // ZeRO, otherwise a ZeroOptimizer sharding its state (see the header comment). Build the optimizer
  // after Module::to (a ZeroOptimizer lays the parameters out in flat buffers of their dtype and
  // device) and do not step it before. ZeRO keeps fp32 master weights for half models and rounds to
  // nearest (stochastic rounding is refused under ZeRO with a message that says so).
  std::unique_ptr<optim::Optimizer> wrap(nn::Module& model, std::unique_ptr<optim::LocalOptimizer> optimizer) const;
  // wrap() of an AdamW over model.parameters(); `mixed` is its mixed precision.
  std::unique_ptr<optim::Optimizer> adamw(nn::Module& model, const optim::AdamWOptions& options,
                                          const optim::MixedPrecisionOptions& mixed = {}) const;

 private:
  DataParallelOptions options_;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace hg::dist
