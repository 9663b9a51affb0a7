#include "engine/activation_offload.h"

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/allocator.h"
#include "engine/cuda/cuda_allocator.h"
#include "engine/cuda/cuda_context.h"

namespace hg {

namespace {

// Pinned buffers whose copies may still be in flight go back to their allocator only once the copies'
// events have completed -- checked with cudaEventQuery (no wait) whenever an offload starts or ends.
// Waiting for the events in the destructor instead would block the host in every backward.
struct DeferredRelease {
  Allocator* allocator;
  void* host;
  std::unique_ptr<cuda::Event> copied, fetched;
  bool done() const { return (!copied || copied->query()) && (!fetched || fetched->query()); }
};
std::mutex g_deferred_mutex;
std::vector<DeferredRelease> g_deferred;

void release_completed_copies() {
  std::lock_guard<std::mutex> lock(g_deferred_mutex);
  for (size_t i = 0; i < g_deferred.size();) {
    if (!g_deferred[i].done()) {
      ++i;
      continue;
    }
    g_deferred[i].allocator->deallocate(g_deferred[i].host);
    g_deferred[i] = std::move(g_deferred.back());
    g_deferred.pop_back();
  }
}

// One Storage that a saved tensor lives in, held in host memory between forward and backward.
class OffloadedStorage {
 public:
  OffloadedStorage(const Storage& source, int group)
      : device_(source.device()), nbytes_(source.nbytes()), group_(group) {
    host_allocator_ = device_.is_cpu() ? &host_offload_allocator() : &cuda::pinned_allocator();
    if (!device_.is_cpu()) release_completed_copies();  // so the pool can hand those buffers out again
    host_ = host_allocator_->allocate(nbytes_);
    if (device_.is_cpu()) {
      std::memcpy(host_, source.data(), nbytes_);
      return;
    }
    // After the compute work that produced the data; the block is not reused until the copy has read it.
    const int d = device_.index;
    cuda::Event produced;
    produced.record(cuda::compute_stream(d));
    produced.block(cuda::copy_stream(d));
    cuda::copy_to_host_async(host_, source.data(), nbytes_, cuda::copy_stream(d));
    cuda::record_stream(source.data(), d, cuda::copy_stream(d));
    copied_ = std::make_unique<cuda::Event>();
    copied_->record(cuda::copy_stream(d));
  }

  ~OffloadedStorage() {
    // A destructor must not throw: a failed query leaves the pinned buffer to the process.
    try {
      if (device_.is_cpu()) {
        host_allocator_->deallocate(host_);
        return;
      }
      {
        std::lock_guard<std::mutex> lock(g_deferred_mutex);
        g_deferred.push_back({host_allocator_, host_, std::move(copied_), std::move(fetched_)});
      }
      release_completed_copies();
    } catch (...) {
    }
  }

  OffloadedStorage(const OffloadedStorage&) = delete;
  OffloadedStorage& operator=(const OffloadedStorage&) = delete;

  int group() const { return group_; }
  size_t nbytes() const { return nbytes_; }

  // Starts bringing the bytes back to the device (a no-op when already started).
  void fetch() {
    if (restored_) return;
    restored_ = Storage::allocate(nbytes_, device_);
    if (device_.is_cpu()) {
      std::memcpy(restored_->data(), host_, nbytes_);
      return;
    }
    const int d = device_.index;
    // The new block may have been used by compute work queued just before: copy after it. The copy
    // stream runs the device -> host copy of these bytes first (same stream), so host_ is complete.
    cuda::Event free_to_write;
    free_to_write.record(cuda::compute_stream(d));
    free_to_write.block(cuda::copy_stream(d));
    cuda::copy_to_device_async(restored_->data(), host_, nbytes_, cuda::copy_stream(d));
    cuda::record_stream(restored_->data(), d, cuda::copy_stream(d));
    fetched_ = std::make_unique<cuda::Event>();
    fetched_->record(cuda::copy_stream(d));
  }

  // The bytes on the device, ordered before everything the compute stream runs from now on.
  std::shared_ptr<Storage> storage() {
    fetch();
    if (fetched_) fetched_->block(cuda::compute_stream(device_.index));
    return restored_;
  }

 private:
  Device device_;
  size_t nbytes_;
  int group_;
  Allocator* host_allocator_;
  void* host_ = nullptr;
  std::unique_ptr<cuda::Event> copied_, fetched_;  // CUDA only
  std::shared_ptr<Storage> restored_;
};

}  // namespace

// The hooks: which storages went out, in which group, so a group can be brought back together.
class ActivationOffload::Hooks final : public SavedTensorHooks, public std::enable_shared_from_this<Hooks> {
 public:
  explicit Hooks(OffloadMode mode) : mode_(mode), groups_(1) {}

  std::shared_ptr<PackedTensor> pack(const Tensor& t, SavedRole role) override;
  void begin_group() override {
    if (!groups_.back().empty()) groups_.emplace_back();
  }

  // Called by the first unpack in `group`: that group comes back now, the one before it starts to.
  void prefetch_for(int group) {
    for (int g : {group, group - 1}) {
      if (g < 0 || g >= int(groups_.size())) continue;
      for (const auto& weak : groups_[size_t(g)])
        if (auto s = weak.lock()) s->fetch();
    }
  }

  OffloadStats stats;

 private:
  struct Entry {
    std::weak_ptr<Storage> source;  // to tell a live storage from a new one at the same address
    std::weak_ptr<OffloadedStorage> offloaded;
  };
  OffloadMode mode_;
  std::vector<std::vector<std::weak_ptr<OffloadedStorage>>> groups_;
  std::unordered_map<const Storage*, Entry> by_storage_;
};

namespace {

// A saved tensor whose bytes are in host memory: the view to rebuild over the storage brought back.
class OffloadedView final : public PackedTensor {
 public:
  OffloadedView(std::shared_ptr<OffloadedStorage> storage, const Tensor& t,
                std::shared_ptr<ActivationOffload::Hooks> hooks)
      : storage_(std::move(storage)),
        shape_(t.shape()),
        strides_(t.strides()),
        offset_(t.offset()),
        dtype_(t.dtype()),
        hooks_(std::move(hooks)) {}

  Tensor unpack() override {
    hooks_->prefetch_for(storage_->group());
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = storage_->storage();
    impl->shape = shape_;
    impl->strides = strides_;
    impl->offset = offset_;
    impl->dtype = dtype_;
    return Tensor(std::move(impl));
  }

 private:
  std::shared_ptr<OffloadedStorage> storage_;
  Shape shape_, strides_;
  int64_t offset_;
  DType dtype_;
  std::shared_ptr<ActivationOffload::Hooks> hooks_;
};

}  // namespace

std::shared_ptr<PackedTensor> ActivationOffload::Hooks::pack(const Tensor& t, SavedRole role) {
  if (mode_ == OffloadMode::recompute_inputs && role != SavedRole::recompute_input) return nullptr;
  const std::shared_ptr<Storage>& source = t.storage();
  if (source->nbytes() == 0) return nullptr;
  std::shared_ptr<OffloadedStorage> offloaded;
  auto it = by_storage_.find(source.get());
  if (it != by_storage_.end() && it->second.source.lock() == source) offloaded = it->second.offloaded.lock();
  if (!offloaded) {
    if (groups_.back().empty()) ++stats.groups;
    offloaded = std::make_shared<OffloadedStorage>(*source, int(groups_.size()) - 1);
    groups_.back().push_back(offloaded);
    by_storage_[source.get()] = Entry{source, offloaded};
    ++stats.storages_offloaded;
    stats.bytes_offloaded += int64_t(source->nbytes());
  }
  ++stats.tensors_packed;
  return std::make_shared<OffloadedView>(std::move(offloaded), t, shared_from_this());
}

OffloadMode parse_offload_mode(const std::string& text) {
  if (text == "off") return OffloadMode::off;
  if (text == "inputs") return OffloadMode::recompute_inputs;
  if (text == "all") return OffloadMode::all;
  HG_INPUT_FAIL("[offload] unknown activation offload mode \"", text,
                "\"; expected \"off\", \"inputs\" (the inputs of recompute regions only) or \"all\" (every saved activation)");
}

const char* offload_mode_name(OffloadMode mode) {
  switch (mode) {
    case OffloadMode::off:
      return "off";
    case OffloadMode::recompute_inputs:
      return "inputs";
    case OffloadMode::all:
      return "all";
  }
  return "?";
}

namespace {
std::shared_ptr<ActivationOffload::Hooks> offload_hooks(OffloadMode mode) {
  HG_CHECK(mode != OffloadMode::off, "[ActivationOffload] mode off offloads nothing: install no ActivationOffload");
  return std::make_shared<ActivationOffload::Hooks>(mode);
}
}  // namespace

ActivationOffload::ActivationOffload(OffloadMode mode) : hooks_(offload_hooks(mode)), guard_(hooks_) {}
ActivationOffload::~ActivationOffload() = default;
OffloadStats ActivationOffload::stats() const { return hooks_->stats; }

}  // namespace hg
