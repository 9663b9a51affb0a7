// The training loop's profiler session, metrics log, NVML sampling and early stopping.
#include "train/monitor.h"

#include <cstdio>
#include <fstream>

#include "engine/allocator.h"
#include "kernels/error.h"

namespace hg::train {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}

TrainingMonitor::TrainingMonitor(const MonitorOptions& options, std::vector<Tensor> parameters, StopMode mode)
    : options_(options) {
  if (!options_.metrics_path().empty()) log_ = std::make_unique<metrics::MetricsLog>(options_.metrics_path());
  if (options_.device().is_cuda() && (log_ || !options_.profile_path().empty())) {
    nvml_ = std::make_unique<profiler::Nvml>();
    if (!nvml_->available()) std::printf("note: %s\n", nvml_->unavailable_reason().c_str());
  }
  if (options_.early_stop_patience() > 0)
    stopper_ = std::make_unique<EarlyStopping>(std::move(parameters), EarlyStoppingOptions()
                                                                          .mode(mode)
                                                                          .patience(options_.early_stop_patience())
                                                                          .min_delta(options_.early_stop_min_delta()));
  if (!options_.profile_path().empty()) {
    // Fail now, not after the run, when the trace cannot be written.
    HG_CHECK(std::ofstream(options_.profile_path()).is_open(), "[train] cannot open trace file \"",
             options_.profile_path(), "\" for writing");
    profiler::Options p;
    p.op_ranges(options_.profile_ops());
    profiler::start(p);
    profiler::set_thread_name("train loop");
    profiling_ = true;
  }
}

TrainingMonitor::~TrainingMonitor() {
  if (profiling_ && profiler::is_recording()) profiler::stop();
}

void TrainingMonitor::begin_step(int64_t step) {
  if (profiling_) profiler::set_step(step);
}

void TrainingMonitor::end_step(metrics::Record record) {
  if (!log_ && !profiling_) return;
  const MemoryStats memory = memory_stats(options_.device());
  record.set("memory_allocated_mib", double(memory.allocated_bytes) / kMiB);
  record.set("memory_peak_mib", double(memory.peak_allocated_bytes) / kMiB);
  if (nvml_ && nvml_->available()) {
    if (auto sample = nvml_->sample(options_.device().index)) {
      record.set("gpu_util_percent", double(sample->gpu_percent));
      record.set("gpu_memory_used_mib", double(sample->memory_used_bytes) / kMiB);
      profiler::counter("gpu_util_percent", double(sample->gpu_percent));
      profiler::counter("gpu_memory_used_mib", double(sample->memory_used_bytes) / kMiB);
    }
  }
  profiler::counter("memory_allocated_mib", double(memory.allocated_bytes) / kMiB);
  if (log_) log_->write(record);
}

bool TrainingMonitor::evaluated(int64_t step, double metric) {
  if (!stopper_) return false;
  eval_steps_.push_back(step);
  return stopper_->update(metric);
}

std::optional<double> TrainingMonitor::best() const {
  if (!stopper_ || !stopper_->has_best()) return std::nullopt;
  return stopper_->best();
}

std::optional<int64_t> TrainingMonitor::best_step() const {
  if (!stopper_ || !stopper_->has_best()) return std::nullopt;
  return eval_steps_[size_t(stopper_->best_evaluation() - 1)];
}

std::string TrainingMonitor::finish() {
  if (profiling_) {
    const profiler::Profile profile = profiler::stop();
    profiling_ = false;
    profiler::write_chrome_trace(profile, options_.profile_path());
    std::printf("profile: %zu ranges -> %s (open in ui.perfetto.dev or chrome://tracing)\n%s%s", profile.ranges.size(),
                options_.profile_path().c_str(), profiler::format_summary(profile).c_str(),
                profiler::format_step_breakdown(profiler::step_breakdown(profile)).c_str());
  }
  if (!stopper_ || !stopper_->has_best()) return "";
  stopper_->restore_best();
  const int64_t step = eval_steps_[size_t(stopper_->best_evaluation() - 1)];
  char line[160];
  std::snprintf(
      line, sizeof line, "early stopping: restored the weights of step %lld (best metric %.6g, %lld evaluation%s)",
      (long long)step, stopper_->best(), (long long)stopper_->evaluations(), stopper_->evaluations() == 1 ? "" : "s");
  return line;
}

}  // namespace hg::train
