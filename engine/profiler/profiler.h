#pragma once
// The profiler: named, nested time ranges on every thread, recorded between start() and stop().
//
//   profiler::start(profiler::Options().op_ranges(true));
//   { profiler::ScopedRange step("step", profiler::Category::step); ... }
//   profiler::Profile profile = profiler::stop();
//   profiler::write_chrome_trace(profile, "trace.json");          // Perfetto / chrome://tracing
//   std::puts(profiler::format_summary(profile).c_str());          // count, total, mean, % of step
//
// A range records host time (steady clock) and, when it names a CUDA device, CUDA event time on that
// device's compute stream (resolved at stop(), so recording never waits for the GPU). Builds with
// real CUDA also push an NVTX range, so Nsight Systems shows the same names. With op_ranges on, every
// kernel call made through HG_KERNEL (engine/kernel_dispatch.h) and every autograd backward node gets
// a range of its own (Category::op); off, that hook costs one relaxed load and a predictable branch.
//
// CONVENTION
//   - Ranges nest per thread (RAII); a range's parent is the innermost range open on its thread when
//     it began. Ranges that are still open at stop() end at stop().
//   - Times are microseconds since start(); device times are placed on the host time line through a
//     reference event recorded on each device when it is first used.
//   - Outside start()/stop() a ScopedRange costs one relaxed load and records nothing.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/device.h"
#include "kernels/options.h"

namespace hg::profiler {

// What a range measures. The per-step breakdown sums data, forward, backward, optimizer and
// communication ranges inside each `step` range.
enum class Category : uint8_t { step, data, forward, backward, optimizer, communication, op, other };
const char* category_name(Category category);

// What a session records; validated by start().
//   profiler::Options().op_ranges(true).max_ranges(1'000'000)
struct Options {
  // A range around every kernel call and backward node.
  HG_OPTION(Options, bool, op_ranges, false);
  // CUDA events around ranges that name a CUDA device.
  HG_OPTION(Options, bool, device_timing, true);
  // Beyond this, ranges are counted in Profile::dropped, not stored.
  HG_OPTION(Options, size_t, max_ranges, 4'000'000);
};

struct RangeRecord {
  std::string name;
  Category category = Category::other;
  uint32_t thread = 0;                         // index into Profile::thread_names
  int32_t depth = 0;                           // nesting depth on its thread (0: outermost)
  int64_t parent = -1;                         // index into Profile::ranges of the enclosing range on the same thread
  int64_t step = -1;                           // the step set by set_step() when the range began (-1: none)
  double start_us = 0, end_us = 0;             // host time since start()
  int device = -1;                             // CUDA device timed with events (-1: host only)
  double device_start_us = 0, device_ms = -1;  // device_ms < 0: no device time
  double duration_us() const { return end_us - start_us; }
};

// A value sampled over time (GPU utilisation, memory): a counter track in the trace.
struct CounterSample {
  std::string name;
  double time_us = 0;
  double value = 0;
};

struct Profile {
  std::vector<RangeRecord> ranges;  // ordered by thread, then start time; parents precede children
  std::vector<CounterSample> counters;
  std::vector<std::string> thread_names;
  size_t dropped = 0;      // ranges not stored because max_ranges was reached
  double duration_us = 0;  // start() to stop()
};

// Starts a recording session (clearing any previous one). Throws if one is already running.
void start(const Options& options = Options());
// Ends the session and returns what it recorded, device times resolved (synchronizes the devices
// that were timed). Throws if no session is running.
Profile stop();
bool is_recording();
// The step that ranges begun from now on belong to (shown in the trace's args).
void set_step(int64_t step);
// Records a counter sample at the current time (ignored when not recording).
void counter(const std::string& name, double value);
// Names the calling thread in the trace ("main", "loader 0", ...).
void set_thread_name(const std::string& name);

namespace detail {
extern std::atomic<bool> g_recording;
extern std::atomic<bool> g_op_ranges;
struct ThreadBuffer;
}  // namespace detail

// Whether HG_KERNEL and backward nodes record ranges now (recording with op_ranges on).
inline bool op_ranges_enabled() { return detail::g_op_ranges.load(std::memory_order_relaxed); }

class ScopedRange {
 public:
  explicit ScopedRange(const char* name, Category category = Category::other) {
    if (detail::g_recording.load(std::memory_order_acquire)) begin(name, category, nullptr);
  }
  ScopedRange(const std::string& name, Category category) : ScopedRange(name.c_str(), category) {}
  // Also timed with CUDA events when `device` is a CUDA device (and Options::device_timing()).
  ScopedRange(const char* name, Category category, const Device& device) {
    if (detail::g_recording.load(std::memory_order_acquire)) begin(name, category, &device);
  }
  ~ScopedRange() {
    if (buffer_) end();
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  void begin(const char* name, Category category, const Device* device);
  void end();
  detail::ThreadBuffer* buffer_ = nullptr;
  int64_t index_ = -1;
  uint64_t session_ = 0;
};

// ---- reports (engine/profiler/profiler_report.cpp) ----

// One step's wall time split by category: the outermost ranges of each category inside the step.
// other_ms is what no category range covered (bookkeeping, logging, synchronisation).
struct StepBreakdown {
  int64_t step = -1;
  double total_ms = 0, data_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0, communication_ms = 0,
         other_ms = 0;
};
std::vector<StepBreakdown> step_breakdown(const Profile& profile);

// Per range name: count, total, mean, share of the summed step time (of the session's duration when
// there are no step ranges), and total device time when the ranges were timed on a device.
struct SummaryRow {
  std::string name;
  Category category = Category::other;
  int64_t count = 0;
  double total_ms = 0, mean_ms = 0, percent_of_step = 0;
  double device_total_ms = -1;  // < 0: no device time
};
std::vector<SummaryRow> summary(const Profile& profile);  // sorted by total time, largest first

// Text tables for the end of a run: the summary (top max_rows rows) and the breakdown (mean, min,
// max per category over the steps).
std::string format_summary(const Profile& profile, size_t max_rows = 25);
std::string format_step_breakdown(const std::vector<StepBreakdown>& steps);

// Chrome trace event format ({"traceEvents": [...]}): one complete ("X") event per range on its
// thread, device-timed ranges again on a track per device, counters as "C" events. Opens in
// Perfetto (ui.perfetto.dev) and chrome://tracing. Throws hg::Error when the file cannot be written.
void write_chrome_trace(const Profile& profile, const std::string& path);
std::string chrome_trace_json(const Profile& profile);

}  // namespace hg::profiler
