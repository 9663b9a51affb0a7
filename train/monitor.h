#pragma once
// What the training loop (train/trainer.h) reports besides its progress line, behind four settings
// (the samples' flags):
//   --profile FILE       profiler session (engine/profiler): Chrome trace to FILE, summary and
//                        per-step breakdown printed at the end; --profile-ops adds a range per kernel
//   --metrics-log FILE   one JSONL record per step (metrics/metrics_log.h), plus GPU utilisation and
//                        memory from NVML on a CUDA device
//   --early-stop N       stop after N evaluations without improvement and restore the best weights
//                        (train/early_stopping.h); --early-stop-delta sets min_delta
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/profiler/nvml.h"
#include "engine/profiler/profiler.h"
#include "metrics/metrics_log.h"
#include "train/early_stopping.h"

namespace hg::train {

// MonitorOptions().metrics_path("run.jsonl").early_stop_patience(3)
struct MonitorOptions {
  HG_OPTION(MonitorOptions, std::string, profile_path, "");
  HG_OPTION(MonitorOptions, std::string, metrics_path, "");
  HG_OPTION(MonitorOptions, bool, profile_ops, false);
  HG_OPTION(MonitorOptions, int64_t, early_stop_patience, 0);  // 0: off
  HG_OPTION(MonitorOptions, double, early_stop_min_delta, 0.0);
  // Where memory statistics and NVML samples come from.
  HG_OPTION(MonitorOptions, Device, device, Device::cpu());
};

class TrainingMonitor {
 public:
  // `mode`: whether the evaluation metric is minimised (loss) or maximised (accuracy).
  TrainingMonitor(const MonitorOptions& options, std::vector<Tensor> parameters, StopMode mode);
  ~TrainingMonitor();

  // Marks the start of a step (its number appears in the trace).
  void begin_step(int64_t step);
  // Completes the step's record with memory (and NVML) figures and writes it to the log.
  void end_step(metrics::Record record);
  // Reports an evaluation; true when early stopping says to stop.
  bool evaluated(int64_t step, double metric);
  // Ends the run: writes the trace and prints the profiler tables; restores the best weights when
  // early stopping is on. Returns a line saying what was restored ("" when nothing was).
  std::string finish();

  bool profiling() const { return profiling_; }
  bool early_stopping() const { return stopper_ != nullptr; }
  std::optional<double> best() const;
  // The step of the best evaluation (early stopping on and an evaluation improved), if any.
  std::optional<int64_t> best_step() const;

 private:
  MonitorOptions options_;
  bool profiling_ = false;
  std::unique_ptr<metrics::MetricsLog> log_;
  std::unique_ptr<profiler::Nvml> nvml_;
  std::unique_ptr<EarlyStopping> stopper_;
  std::vector<int64_t> eval_steps_;
};

}  // namespace hg::train
