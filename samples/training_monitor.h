#pragma once
// What a sample's training loop reports besides its progress line, behind four flags:
//   --profile FILE       profiler session (engine/profiler): Chrome trace to FILE, summary and
//                        per-step breakdown printed at the end; --profile-ops adds a range per kernel
//   --metrics-log FILE   one JSONL record per step (metrics/metrics_log.h), plus GPU utilisation and
//                        memory from NVML on a CUDA device
//   --early-stop N       stop after N evaluations without improvement and restore the best weights
//                        (optim/early_stopping.h); --early-stop-delta sets min_delta
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/profiler/nvml.h"
#include "engine/profiler/profiler.h"
#include "metrics/metrics_log.h"
#include "optim/early_stopping.h"

namespace hg::samples {

struct MonitorOptions {
  std::string profile_path, metrics_path;
  bool profile_ops = false;
  int64_t early_stop_patience = 0;  // 0: off
  double early_stop_min_delta = 0;
  Device device;
};

class TrainingMonitor {
 public:
  // `mode`: whether the evaluation metric is minimised (loss) or maximised (accuracy).
  TrainingMonitor(const MonitorOptions& options, std::vector<Tensor> parameters, optim::StopMode mode);
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

 private:
  MonitorOptions options_;
  bool profiling_ = false;
  std::unique_ptr<metrics::MetricsLog> log_;
  std::unique_ptr<profiler::Nvml> nvml_;
  std::unique_ptr<optim::EarlyStopping> stopper_;
  std::vector<int64_t> eval_steps_;
};

}  // namespace hg::samples
