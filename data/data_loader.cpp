#include "data/data_loader.h"

#include <chrono>

#include "data/device_stager.h"

namespace hg::data {

namespace {
constexpr int64_t kStateVersion = 1;
constexpr int64_t kStateSize = 5;
}  // namespace

SamplerOptions DataLoaderOptions::sampler() const {
  return SamplerOptions()
      .batch_size(batch_size())
      .shuffle(shuffle())
      .drop_last(drop_last())
      .seed(seed())
      .rank(rank())
      .world_size(world_size());
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options)
    : DataLoader(dataset, std::make_shared<DistributedBatchSampler>(dataset ? dataset->size() : 0, options.sampler()),
                 options) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<const BatchSampler> sampler,
                       const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  HG_CHECK(dataset_ != nullptr, "[DataLoader] no dataset given");
  HG_CHECK(sampler_ != nullptr, "[DataLoader] no batch sampler given");
  HG_CHECK(options_.workers() >= 0, "[DataLoader] workers must be >= 0, got ", options_.workers());
  HG_CHECK(options_.prefetch_factor() >= 1, "[DataLoader] prefetch_factor must be >= 1, got ",
           options_.prefetch_factor());
  HG_CHECK(sampler_->batches_per_epoch() > 0, "[DataLoader] the sampler gives no batches per epoch");
  fields_ = dataset_->fields();
  HG_CHECK(!fields_.empty(), "[DataLoader] the dataset declares no fields");
  if (options_.device().is_cuda()) {
    pinned_ = true;
    stager_ = std::make_unique<DeviceStager>(options_.device());
  }
  start_workers();
}

DataLoader::~DataLoader() {
  stop_workers();
  stager_.reset();
}

void DataLoader::start_workers() {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = false;
  claim_position_ = deliver_position_ = next_position_;
  ready_.clear();
  for (int i = 0; i < options_.workers(); ++i) workers_.emplace_back([this] { worker_loop(); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  ready_.clear();
}

Batch DataLoader::build(int64_t position) const {
  const int64_t per_epoch = sampler_->batches_per_epoch();
  Batch batch;
  batch.epoch = position / per_epoch;
  batch.index_in_epoch = position % per_epoch;
  batch.indices = sampler_->batch(batch.epoch, batch.index_in_epoch);
  const int64_t rows = batch.size();
  const int64_t size = dataset_->size();
  for (int64_t index : batch.indices)
    HG_CHECK(index >= 0 && index < size, "[DataLoader] the sampler gave index ", index, " for a dataset of ", size,
             " examples");
  for (const Field& field : fields_) {
    Shape shape{rows};
    shape.insert(shape.end(), field.shape.begin(), field.shape.end());
    batch.tensors.push_back(pinned_ ? empty_pinned(shape, field.dtype) : empty(shape, field.dtype));
  }
  std::vector<void*> rows_out(fields_.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t f = 0; f < fields_.size(); ++f)
      rows_out[f] = static_cast<char*>(batch.tensors[f].data_ptr()) +
                    size_t(r * fields_[f].numel()) * dtype_size(fields_[f].dtype);
    dataset_->get_in_epoch(batch.indices[size_t(r)], batch.epoch, rows_out);
  }
  return batch;
}

DataLoader::Slot DataLoader::build_slot(int64_t position) const {
  Slot slot;
  try {
    slot.batch = build(position);
  } catch (...) {
    slot.error = std::current_exception();
  }
  return slot;
}

void DataLoader::worker_loop() {
  const int64_t capacity = int64_t(options_.workers()) * options_.prefetch_factor();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || claim_position_ - deliver_position_ < capacity; });
    if (stop_) return;
    const int64_t position = claim_position_++;
    lock.unlock();
    Slot slot = build_slot(position);
    lock.lock();
    if (stop_) return;
    ready_.emplace(position, std::move(slot));
    ready_cv_.notify_all();
  }
}

DataLoader::Slot DataLoader::take_host(int64_t position) {
  if (workers_.empty()) return build_slot(position);
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = ready_.find(position);
  if (it == ready_.end()) {
    const auto start = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, [&] { return (it = ready_.find(position)) != ready_.end(); });
    wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  Slot slot = std::move(it->second);
  ready_.erase(it);
  deliver_position_ = position + 1;
  lock.unlock();
  work_cv_.notify_all();
  return slot;
}

bool DataLoader::try_take_host(int64_t position, Slot& out) {
  if (workers_.empty()) return false;
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = ready_.find(position);
  if (it == ready_.end()) return false;
  out = std::move(it->second);
  ready_.erase(it);
  deliver_position_ = position + 1;
  lock.unlock();
  work_cv_.notify_all();
  return true;
}

namespace {
[[noreturn]] void rethrow_worker_error(const std::exception_ptr& error, int64_t position, int64_t per_epoch) {
  const std::string where =
      "batch " + std::to_string(position % per_epoch) + " of epoch " + std::to_string(position / per_epoch);
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    HG_FAIL("[DataLoader] building ", where, " failed: ", e.what());
  } catch (...) {
    HG_FAIL("[DataLoader] building ", where, " failed with a non-standard exception");
  }
}
}  // namespace

Batch DataLoader::next() {
  const int64_t position = next_position_;
  const int64_t per_epoch = batches_per_epoch();
  if (!stager_) {
    const auto start = std::chrono::steady_clock::now();
    Slot slot = take_host(position);
    if (workers_.empty())
      wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    next_position_ = position + 1;
    if (slot.error) rethrow_worker_error(slot.error, position, per_epoch);
    return std::move(slot.batch);
  }
  // CUDA: batch `position` is normally staged already (its copy issued during the previous call).
  if (!stager_->has_staged()) {
    Slot slot = take_host(position);
    if (slot.error) {
      next_position_ = position + 1;
      rethrow_worker_error(slot.error, position, per_epoch);
    }
    stager_->issue(std::move(slot.batch));
  }
  Batch out = stager_->take();
  next_position_ = position + 1;
  // Issue the next batch's copy now if a worker has it, so it overlaps this batch's compute.
  Slot ahead;
  if (try_take_host(next_position_, ahead)) {
    if (ahead.error) {
      // Put it back: next() reports it on the consumer's next call, in order.
      std::lock_guard<std::mutex> lock(mutex_);
      ready_.emplace(next_position_, std::move(ahead));
      deliver_position_ = next_position_;
    } else {
      stager_->issue(std::move(ahead.batch));
    }
  }
  return out;
}

Tensor DataLoader::state() const {
  return from_vector(
      std::vector<int64_t>{kStateVersion, epoch(), batch_in_epoch(), batches_per_epoch(), int64_t(options_.seed())},
      {kStateSize});
}

void DataLoader::load_state(const Tensor& state) {
  const int64_t position = checked_position(state);
  stop_workers();
  if (stager_) stager_->discard();
  next_position_ = position;
  start_workers();
}

void DataLoader::check_state(const Tensor& state) const { checked_position(state); }

int64_t DataLoader::checked_position(const Tensor& state) const {
  HG_CHECK(state.defined() && state.dtype() == i64 && state.dim() == 1 && state.size(0) == kStateSize,
           "[DataLoader::load_state] expected the i64 tensor [", kStateSize, "] that state() returns, got ",
           state.defined() ? state.describe() : std::string("an undefined tensor"));
  const std::vector<int64_t> s = state.to(kCPU).contiguous().to_vector<int64_t>();
  HG_CHECK(s[0] == kStateVersion, "[DataLoader::load_state] state format version ", s[0], "; this build reads version ",
           kStateVersion);
  HG_CHECK(s[3] == batches_per_epoch(), "[DataLoader::load_state] the state was saved with ", s[3],
           " batches per epoch, this loader has ", batches_per_epoch(),
           "; expected the same dataset, batch size, world size and drop_last");
  HG_CHECK(s[4] == int64_t(options_.seed()), "[DataLoader::load_state] the state was saved with seed ", s[4],
           ", this loader has seed ", int64_t(options_.seed()));
  HG_CHECK(s[1] >= 0 && s[2] >= 0 && s[2] < batches_per_epoch(), "[DataLoader::load_state] position epoch ", s[1],
           " batch ", s[2], " is invalid; expected epoch >= 0 and batch in [0, ", batches_per_epoch(), ")");
  return s[1] * batches_per_epoch() + s[2];
}

}  // namespace hg::data
