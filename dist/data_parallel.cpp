// DataParallel (dist/data_parallel.h): one communicator and one optimizer for a training run.
#include "dist/data_parallel.h"

#include <cstdio>
#include <string>

#include "dist/bootstrap.h"
#include "dist/zero_optimizer.h"

namespace hg::dist {

DataParallel::DataParallel(DataParallelOptions options) : options_(options) {
  HG_CHECK(options_.zero_stage() >= -1 && options_.zero_stage() <= 3, "[DataParallel] --zero ", options_.zero_stage(),
           " is not a ZeRO stage; expected 0, 1, 2 or 3 (or -1: none in a single process)");
  if (options_.offload_optimizer() && options_.zero_stage() < 0) options_.zero_stage(0);
  if (options_.zero_stage() < 0 && detect_process().world_size > 1) options_.zero_stage(0);
  if (options_.zero_stage() < 0) return;
  comm_ = std::make_unique<Communicator>();
  if (options_.quiet_other_ranks() && comm_->rank() != 0)
    HG_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "[DataParallel] cannot silence rank ", comm_->rank(),
             "'s stdout");
}

DataParallel::~DataParallel() = default;

int64_t DataParallel::rows_per_rank(int64_t global_batch) const {
  HG_CHECK(global_batch % world_size() == 0, "--batch ", global_batch, " must be a multiple of the ", world_size(),
           " ranks (each trains on batch / ranks rows of the global batch)");
  return global_batch / world_size();
}

std::unique_ptr<optim::Optimizer> DataParallel::wrap(nn::Module& model,
                                                     std::unique_ptr<optim::LocalOptimizer> optimizer) const {
  HG_CHECK(optimizer != nullptr, "[DataParallel] wrap: no optimizer (a null pointer)");
  if (!comm_) return optimizer;
  return std::make_unique<ZeroOptimizer>(std::move(optimizer), model, *comm_,
                                         ZeroOptions()
                                             .stage(options_.zero_stage())
                                             .offload_optimizer(options_.offload_optimizer())
                                             .persistence_threshold(options_.persistence_threshold()));
}

std::unique_ptr<optim::Optimizer> DataParallel::adamw(nn::Module& model, const optim::AdamWOptions& options,
                                                      const optim::MixedPrecisionOptions& mixed) const {
  auto local = std::make_unique<optim::AdamW>(model.parameters(), options);
  local->set_mixed_precision(mixed);
  return wrap(model, std::move(local));
}

}  // namespace hg::dist
