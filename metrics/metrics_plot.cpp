// Panels of the standard figure, built from whichever fields the log has.
#include "metrics/metrics_plot.h"

#include <cmath>

namespace hg::metrics {

namespace {

struct Field {
  const char* key;
  const char* legend;
  double scale;
};

// A chart with one series per field present in the records; nullopt-like empty when none is.
Chart panel(const std::vector<Record>& records, const std::string& title, const std::string& y_label,
            std::vector<Field> fields, bool log_y) {
  std::vector<Series> present;
  for (const Field& f : fields) {
    Series series{f.legend, {}};
    for (const Record& r : records)
      if (auto v = r.find(f.key)) series.points.emplace_back(double(r.step()), *v * f.scale);
    if (!series.points.empty()) present.push_back(std::move(series));
  }
  return Chart().title(title).x_label("step").y_label(y_label).series(std::move(present)).log_y(log_y);
}

}  // namespace

Figure figure_from_metrics(const std::vector<Record>& records, const std::string& title) {
  const Chart candidates[] = {
      panel(records, "loss", "cross-entropy", {{"loss", "train loss", 1}, {"val_loss", "validation loss", 1}}, true),
      panel(records, "accuracy", "%", {{"accuracy", "held-out accuracy", 100}}, false),
      panel(records, "memory", "MiB",
            {{"memory_allocated_mib", "allocated", 1},
             {"memory_peak_mib", "peak allocated", 1},
             {"gpu_memory_used_mib", "GPU used (NVML)", 1}},
            false),
      panel(records, "throughput", "tokens/s", {{"tokens_per_s", "tokens/s", 1}}, false),
      panel(records, "learning rate", "lr", {{"lr", "lr", 1}}, false),
      panel(records, "gradient norm", "norm", {{"grad_norm", "global grad norm", 1}}, true),
      panel(records, "GPU utilisation", "%", {{"gpu_util_percent", "GPU busy (NVML)", 1}}, false),
      panel(records, "loss scale", "scale", {{"loss_scale", "loss scale", 1}}, true),
  };
  std::vector<Chart> charts;
  for (const Chart& c : candidates)
    if (!c.series().empty()) charts.push_back(c);
  return Figure().title(title).charts(std::move(charts));
}

}  // namespace hg::metrics
