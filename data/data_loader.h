#pragma once
// DataLoader: batches of a Dataset in the order a BatchSampler gives, built by worker threads
// ahead of the training loop and, for a CUDA device, copied to it asynchronously.
//
//   auto loader = DataLoader(dataset, DataLoaderOptions().batch_size(64).workers(2).seed(7));
//   Batch b = loader.next();          // b[0] = ids [64, T], b[1] = targets [64, T]
//   Tensor position = loader.state(); // i64 [5]: goes into a checkpoint; load_state() resumes
//
// CONVENTION
//   - Batches form one endless stream over epochs: batch b of epoch e is sampler.batch(e, b);
//     after the last batch of an epoch comes batch 0 of the next. The stream is the same for any
//     number of workers (workers build batches in any order; delivery is in order).
//   - workers = 0 builds each batch on the calling thread inside next(). workers = N > 0 starts N
//     threads; at most N * prefetch_factor batches are built ahead of the consumer (a bounded
//     queue: memory stays bounded however slow the consumer is).
//   - Batch buffers for a CUDA device are pinned host memory (engine/cuda pinned allocator). The
//     copy to the device runs on the copy stream and is issued as soon as the batch is ready, one
//     batch ahead of the consumer; the compute stream waits for it through an event only when the
//     batch is handed out, so compute never waits for data that is already there, and the host
//     never waits for a copy.
//   - An exception thrown by Dataset::get in a worker is rethrown by next() on the consumer thread
//     as hg::Error naming the batch and carrying the message; the stream then continues with the
//     next batch.
//   - The destructor (or load_state) stops the workers and joins them, mid-epoch included: a worker
//     finishes at most the batch it is building, nobody waits on a full queue.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"
#include "engine/device.h"

namespace hg::data {

class DeviceStager;

// Validated by DataLoader's constructor (the sampler's options by DistributedBatchSampler's).
//   DataLoaderOptions().batch_size(64).rank(rank, world).workers(2).device(Device::cuda(0))
struct DataLoaderOptions {
  // The sampler's options (SamplerOptions; same defaults), for the DistributedBatchSampler that
  // DataLoader(dataset, options) builds.
  HG_OPTION(DataLoaderOptions, int64_t, batch_size, SamplerOptions().batch_size());
  HG_OPTION(DataLoaderOptions, bool, shuffle, SamplerOptions().shuffle());
  HG_OPTION(DataLoaderOptions, bool, drop_last, SamplerOptions().drop_last());
  HG_OPTION(DataLoaderOptions, uint64_t, seed, SamplerOptions().seed());
  HG_OPTION(DataLoaderOptions, int64_t, rank, SamplerOptions().rank());
  HG_OPTION(DataLoaderOptions, int64_t, world_size, SamplerOptions().world_size());
  HG_OPTION(DataLoaderOptions, int, workers, 0);
  HG_OPTION(DataLoaderOptions, int, prefetch_factor, 2);
  // Where next() delivers batches; a CUDA device turns on pinned staging and async copies.
  HG_OPTION(DataLoaderOptions, Device, device, kCPU);

 public:
  // This process's place among the data-parallel ranks: rank(r).world_size(w).
  DataLoaderOptions& rank(int64_t r, int64_t w) { return rank(r).world_size(w); }
  // The sampler's options, gathered.
  SamplerOptions sampler() const;
};

class DataLoader {
 public:
  // Batches from a DistributedBatchSampler built from the options.
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options);
  // Batches from any sampler (e.g. a curriculum); the options' sampler fields are then unused.
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const BatchSampler> sampler,
             const DataLoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch of the stream, on options.device().
  Batch next();

  int64_t batches_per_epoch() const { return sampler_->batches_per_epoch(); }
  // Where the next call to next() reads: epoch and batch within it.
  int64_t epoch() const { return next_position_ / batches_per_epoch(); }
  int64_t batch_in_epoch() const { return next_position_ % batches_per_epoch(); }

  // The position as an i64 tensor [5]: {format version, epoch, batch in epoch, batches per
  // epoch, seed}. Plain integers so a checkpoint (safetensors) carries it as is.
  Tensor state() const;
  // Resumes at a position from state(): the following batches equal those the saved loader would
  // have produced. Throws hg::Error when the tensor is not such a state, or when it was saved by a
  // loader with another number of batches per epoch or another seed.
  void load_state(const Tensor& state);
  // The checks of load_state alone: throws as load_state would, changes nothing.
  void check_state(const Tensor& state) const;

  // Seconds next() spent waiting for a batch that was not ready yet, since construction.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  int64_t checked_position(const Tensor& state) const;  // the stream position a state names, checked
  void start_workers();
  void stop_workers();
  void worker_loop();
  Batch build(int64_t position) const;
  Slot build_slot(int64_t position) const;
  // The host batch at `position` (blocking); and a non-blocking variant.
  Slot take_host(int64_t position);
  bool try_take_host(int64_t position, Slot& out);

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const BatchSampler> sampler_;
  DataLoaderOptions options_;
  std::vector<Field> fields_;
  bool pinned_ = false;
  std::unique_ptr<DeviceStager> stager_;

  int64_t next_position_ = 0;  // stream position of the next batch next() hands out
  double wait_seconds_ = 0;

  // Shared with the workers, under mutex_.
  std::mutex mutex_;
  std::condition_variable work_cv_, ready_cv_;
  bool stop_ = false;
  int64_t claim_position_ = 0;    // the next position a worker will build
  int64_t deliver_position_ = 0;  // the oldest position not yet taken by the consumer
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> workers_;
};

}  // namespace hg::data
