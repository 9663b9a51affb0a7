// Recording: one buffer per thread (its own mutex, uncontended except at stop()), a session number
// so a range that began in an earlier session is ignored, CUDA events resolved only at stop().
#include "engine/profiler/profiler.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "engine/cuda/cuda_context.h"
#include "engine/profiler/nvtx.h"
#include "kernels/error.h"

namespace hg::profiler {

namespace detail {
std::atomic<bool> g_recording{false};
std::atomic<bool> g_op_ranges{false};

struct PendingDeviceRange {
  int64_t index;
  int device;
  std::unique_ptr<cuda::Event> start, end;
};

struct ThreadBuffer {
  std::mutex mutex;
  uint32_t id = 0;
  std::string name;
  uint64_t session = 0;
  std::vector<RangeRecord> ranges;
  std::vector<int64_t> open;  // indices of the ranges open on this thread, innermost last
  std::vector<PendingDeviceRange> device_ranges;
};
}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;
using detail::ThreadBuffer;

struct DeviceReference {
  std::unique_ptr<cuda::Event> event;
  double host_us = 0;
};

// Everything a session shares, guarded by `mutex` (ranges themselves go to per-thread buffers).
struct Session {
  std::mutex mutex;
  std::atomic<uint64_t> number{0};
  Options options;
  Clock::time_point origin;
  std::atomic<int64_t> step{-1};
  std::atomic<size_t> stored{0}, dropped{0};
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;  // every thread that ever recorded
  std::vector<CounterSample> counters;
  std::map<int, DeviceReference> references;
};

Session& session() {
  static Session s;
  return s;
}

double now_us(const Session& s) { return std::chrono::duration<double, std::micro>(Clock::now() - s.origin).count(); }

ThreadBuffer& this_thread_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> buffer = [] {
    auto b = std::make_shared<ThreadBuffer>();
    Session& s = session();
    std::lock_guard lock(s.mutex);
    b->id = uint32_t(s.buffers.size());
    b->name = b->id == 0 ? "main" : "thread " + std::to_string(b->id);
    s.buffers.push_back(b);
    return b;
  }();
  return *buffer;
}

// Makes sure the buffer holds the current session's ranges only (a thread may have recorded in an
// earlier session). Called with the buffer's mutex held.
void adopt_session(ThreadBuffer& b, uint64_t number) {
  if (b.session == number) return;
  b.session = number;
  b.ranges.clear();
  b.open.clear();
  b.device_ranges.clear();
}

// The host time at which `device`'s compute stream reached the reference event: recorded and waited
// for once per session and device, so later event times can be placed on the host time line.
void ensure_reference(Session& s, int device) {
  std::lock_guard lock(s.mutex);
  if (s.references.count(device)) return;
  DeviceReference ref;
  ref.event = std::make_unique<cuda::Event>();
  ref.event->record(cuda::compute_stream(device));
  ref.event->synchronize();
  ref.host_us = now_us(s);
  s.references.emplace(device, std::move(ref));
}

}  // namespace

const char* category_name(Category category) {
  switch (category) {
    case Category::step:
      return "step";
    case Category::data:
      return "data";
    case Category::forward:
      return "forward";
    case Category::backward:
      return "backward";
    case Category::optimizer:
      return "optimizer";
    case Category::communication:
      return "communication";
    case Category::op:
      return "op";
    case Category::other:
      return "other";
  }
  return "other";
}

void start(const Options& options) {
  Session& s = session();
  std::lock_guard lock(s.mutex);
  HG_CHECK(!detail::g_recording.load(), "[profiler] start() while a session is already recording; call stop() first");
  HG_CHECK(options.max_ranges() > 0, "[profiler] max_ranges must be positive, got 0");
  s.number += 1;
  s.options = options;
  s.origin = Clock::now();
  s.step = -1;
  s.stored = 0;
  s.dropped = 0;
  s.counters.clear();
  s.references.clear();
  detail::g_op_ranges.store(options.op_ranges(), std::memory_order_relaxed);
  detail::g_recording.store(true, std::memory_order_release);
}

bool is_recording() { return detail::g_recording.load(std::memory_order_acquire); }

void set_step(int64_t step) { session().step.store(step, std::memory_order_relaxed); }

void counter(const std::string& name, double value) {
  if (!is_recording()) return;
  Session& s = session();
  std::lock_guard lock(s.mutex);
  s.counters.push_back({name, now_us(s), value});
}

void set_thread_name(const std::string& name) {
  ThreadBuffer& b = this_thread_buffer();
  std::lock_guard lock(b.mutex);
  b.name = name;
}

void ScopedRange::begin(const char* name, Category category, const Device* device) {
  Session& s = session();
  if (s.stored.fetch_add(1, std::memory_order_relaxed) >= s.options.max_ranges()) {
    s.dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ThreadBuffer& b = this_thread_buffer();
  const bool timed = device && device->is_cuda() && s.options.device_timing();
  if (timed) ensure_reference(s, device->index);
  std::lock_guard lock(b.mutex);
  adopt_session(b, s.number);
  RangeRecord record;
  record.name = name;
  record.category = category;
  record.thread = b.id;
  record.depth = int32_t(b.open.size());
  record.parent = b.open.empty() ? -1 : b.open.back();
  record.step = s.step.load(std::memory_order_relaxed);
  record.start_us = now_us(s);
  record.end_us = -1;
  index_ = int64_t(b.ranges.size());
  if (timed) {
    record.device = device->index;
    detail::PendingDeviceRange pending{index_, device->index, std::make_unique<cuda::Event>(),
                                       std::make_unique<cuda::Event>()};
    pending.start->record(cuda::compute_stream(device->index));
    b.device_ranges.push_back(std::move(pending));
  }
  b.ranges.push_back(std::move(record));
  b.open.push_back(index_);
  buffer_ = &b;
  session_ = s.number;
  nvtx::push(name);
}

void ScopedRange::end() {
  Session& s = session();
  nvtx::pop();
  std::lock_guard lock(buffer_->mutex);
  // A range begun in a session that has since stopped (stop() resets the buffer's session to 0) or
  // been replaced by another one is not recorded.
  if (buffer_->session != session_ || !detail::g_recording.load(std::memory_order_relaxed)) return;
  RangeRecord& record = buffer_->ranges[size_t(index_)];
  record.end_us = now_us(s);
  if (record.device >= 0) {
    for (auto it = buffer_->device_ranges.rbegin(); it != buffer_->device_ranges.rend(); ++it) {
      if (it->index == index_) {
        it->end->record(cuda::compute_stream(record.device));
        break;
      }
    }
  }
  if (!buffer_->open.empty() && buffer_->open.back() == index_) buffer_->open.pop_back();
}

Profile stop() {
  Session& s = session();
  std::lock_guard lock(s.mutex);
  HG_CHECK(detail::g_recording.load(), "[profiler] stop() without a recording session; call start() first");
  detail::g_recording.store(false, std::memory_order_release);
  detail::g_op_ranges.store(false, std::memory_order_relaxed);
  Profile profile;
  profile.duration_us = now_us(s);
  profile.dropped = s.dropped.load();
  profile.counters = std::move(s.counters);
  s.counters.clear();
  for (const auto& [device, ref] : s.references) cuda::synchronize(device);
  for (const auto& buffer : s.buffers) {
    std::lock_guard buffer_lock(buffer->mutex);
    profile.thread_names.push_back(buffer->name);
    if (buffer->session != s.number) continue;
    const int64_t offset = int64_t(profile.ranges.size());
    for (const detail::PendingDeviceRange& pending : buffer->device_ranges) {
      RangeRecord& record = buffer->ranges[size_t(pending.index)];
      const DeviceReference& ref = s.references.at(pending.device);
      if (record.end_us < 0) continue;  // still open: its end event was never recorded
      record.device_start_us = ref.host_us + 1e3 * double(pending.start->elapsed_ms_since(*ref.event));
      record.device_ms = double(pending.end->elapsed_ms_since(*pending.start));
    }
    for (RangeRecord& record : buffer->ranges) {
      if (record.end_us < 0) record.end_us = profile.duration_us;  // open at stop()
      if (record.parent >= 0) record.parent += offset;
      if (record.device >= 0 && record.device_ms < 0) record.device = -1;
      profile.ranges.push_back(std::move(record));
    }
    buffer->ranges.clear();
    buffer->open.clear();
    buffer->device_ranges.clear();
    buffer->session = 0;
  }
  s.references.clear();
  return profile;
}

}  // namespace hg::profiler
