#pragma once
// The training metrics log: one JSON object per line (JSONL), one line per step, flushed as written so
// a run that dies keeps its log. Fields a run does not have are omitted, never filled with a guess.
//
//   metrics::MetricsLog log("run.jsonl");
//   log.write(metrics::Record(step).set("loss", loss).set("lr", lr).set("val_loss", maybe_val_loss));
//   std::vector<metrics::Record> back = metrics::read_metrics("run.jsonl");
//
// Field names used by train_gpt (and understood by plot_metrics): loss, val_loss, accuracy, lr,
// grad_norm, loss_scale, tokens_per_s, step_ms, memory_allocated_mib, memory_peak_mib,
// gpu_util_percent, gpu_memory_used_mib. A non-finite value (a diverged loss) is written as null and
// read back as NaN.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hg::metrics {

class Record {
 public:
  Record() = default;
  explicit Record(int64_t step) : step_(step) {}
  // Sets (or replaces) a field; fields keep the order they were first set in.
  Record& set(const std::string& key, double value);
  // nullopt leaves the field absent.
  Record& set(const std::string& key, std::optional<double> value);
  int64_t step() const { return step_; }
  bool has(const std::string& key) const;
  std::optional<double> find(const std::string& key) const;
  // The field's value; throws hg::Error naming the key and the step when it is absent.
  double at(const std::string& key) const;
  const std::vector<std::pair<std::string, double>>& fields() const { return fields_; }

 private:
  int64_t step_ = 0;
  std::vector<std::pair<std::string, double>> fields_;
};

// {"step": 12, "loss": 1.25, ...} without a newline; values round-trip exactly.
std::string to_json_line(const Record& record);
// Parses one line; throws hg::Error when it is not a JSON object with an integer "step" and numeric
// (or null) fields.
Record parse_json_line(const std::string& line);

class MetricsLog {
 public:
  // Creates (truncates) the file; throws hg::Error when it cannot be opened.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const Record& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Every record of a JSONL file (blank lines skipped); errors name the file and the line number.
std::vector<Record> read_metrics(const std::string& path);

}  // namespace hg::metrics
