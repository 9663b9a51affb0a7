#pragma once
// The standard figure of a training run from its metrics log: loss (and validation loss, log scale),
// accuracy, memory, throughput, learning rate, GPU utilisation — each panel only when the log has
// its fields.
#include <string>
#include <vector>

#include "metrics/chart.h"
#include "metrics/metrics_log.h"

namespace hg::metrics {

Figure figure_from_metrics(const std::vector<Record>& records, const std::string& title);

}  // namespace hg::metrics
