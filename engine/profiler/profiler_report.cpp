// What a Profile says: the summary table, the per-step breakdown and the Chrome trace JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/profiler/profiler.h"
#include "kernels/error.h"

namespace hg::profiler {

namespace {

// The step range a range belongs to: its nearest enclosing `step` range (-1: none), and whether an
// enclosing range below that step already has the same category (then it is not outermost).
struct Placement {
  int64_t step_range = -1;
  bool outermost = true;
};

Placement place(const Profile& profile, int64_t index) {
  const Category category = profile.ranges[size_t(index)].category;
  Placement p;
  for (int64_t up = profile.ranges[size_t(index)].parent; up >= 0; up = profile.ranges[size_t(up)].parent) {
    const RangeRecord& r = profile.ranges[size_t(up)];
    if (r.category == Category::step) {
      p.step_range = up;
      break;
    }
    if (r.category == category) p.outermost = false;
  }
  return p;
}

double* slot(StepBreakdown& b, Category category) {
  switch (category) {
    case Category::data:
      return &b.data_ms;
    case Category::forward:
      return &b.forward_ms;
    case Category::backward:
      return &b.backward_ms;
    case Category::optimizer:
      return &b.optimizer_ms;
    case Category::communication:
      return &b.communication_ms;
    default:
      return nullptr;
  }
}

std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Microseconds as the trace wants them, from whole nanoseconds: rounding each end point (not the
// duration) keeps a child's interval inside its parent's exactly.
int64_t to_ns(double us) { return std::llround(us * 1e3); }
std::string micros(int64_t ns) {
  char text[40];
  std::snprintf(text, sizeof text, "%s%lld.%03lld", ns < 0 ? "-" : "", (long long)(std::llabs(ns) / 1000),
                (long long)(std::llabs(ns) % 1000));
  return text;
}

}  // namespace

std::vector<StepBreakdown> step_breakdown(const Profile& profile) {
  std::vector<StepBreakdown> steps;
  std::map<int64_t, size_t> by_range;  // step range index -> position in `steps`
  for (size_t i = 0; i < profile.ranges.size(); ++i) {
    const RangeRecord& r = profile.ranges[i];
    if (r.category != Category::step) continue;
    by_range[int64_t(i)] = steps.size();
    StepBreakdown b;
    b.step = r.step;
    b.total_ms = r.duration_us() / 1e3;
    steps.push_back(b);
  }
  for (size_t i = 0; i < profile.ranges.size(); ++i) {
    const RangeRecord& r = profile.ranges[i];
    if (r.category == Category::step || r.category == Category::op || r.category == Category::other) continue;
    const Placement p = place(profile, int64_t(i));
    if (p.step_range < 0 || !p.outermost) continue;
    *slot(steps[by_range.at(p.step_range)], r.category) += r.duration_us() / 1e3;
  }
  for (StepBreakdown& b : steps)
    b.other_ms =
        std::max(0.0, b.total_ms - b.data_ms - b.forward_ms - b.backward_ms - b.optimizer_ms - b.communication_ms);
  return steps;
}

std::vector<SummaryRow> summary(const Profile& profile) {
  double step_us = 0;
  for (const RangeRecord& r : profile.ranges)
    if (r.category == Category::step) step_us += r.duration_us();
  if (step_us <= 0) step_us = profile.duration_us;
  std::map<std::pair<std::string, Category>, SummaryRow> rows;
  for (const RangeRecord& r : profile.ranges) {
    SummaryRow& row = rows[{r.name, r.category}];
    row.name = r.name;
    row.category = r.category;
    row.count += 1;
    row.total_ms += r.duration_us() / 1e3;
    if (r.device_ms >= 0) row.device_total_ms = std::max(0.0, row.device_total_ms) + r.device_ms;
  }
  std::vector<SummaryRow> out;
  for (auto& [key, row] : rows) {
    row.mean_ms = row.total_ms / double(row.count);
    row.percent_of_step = step_us > 0 ? 100.0 * row.total_ms * 1e3 / step_us : 0.0;
    out.push_back(row);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SummaryRow& a, const SummaryRow& b) { return a.total_ms > b.total_ms; });
  return out;
}

std::string format_summary(const Profile& profile, size_t max_rows) {
  const std::vector<SummaryRow> rows = summary(profile);
  std::string text;
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-13s %9s %12s %11s %8s %12s\n", "range", "category", "count", "total ms",
                "mean ms", "% step", "device ms");
  text += line;
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const SummaryRow& r = rows[i];
    char device[32] = "-";
    if (r.device_total_ms >= 0) std::snprintf(device, sizeof device, "%.3f", r.device_total_ms);
    std::snprintf(line, sizeof line, "%-32.32s %-13s %9lld %12.3f %11.4f %7.1f%% %12s\n", r.name.c_str(),
                  category_name(r.category), (long long)r.count, r.total_ms, r.mean_ms, r.percent_of_step, device);
    text += line;
  }
  if (rows.size() > max_rows) {
    std::snprintf(line, sizeof line, "(%zu more rows)\n", rows.size() - max_rows);
    text += line;
  }
  if (profile.dropped > 0) {
    std::snprintf(line, sizeof line, "(%zu ranges dropped: Options::max_ranges was reached)\n", profile.dropped);
    text += line;
  }
  return text;
}

std::string format_step_breakdown(const std::vector<StepBreakdown>& steps) {
  if (steps.empty()) return "(no step ranges)\n";
  struct Column {
    const char* name;
    double StepBreakdown::*field;
  };
  const Column columns[] = {{"data wait", &StepBreakdown::data_ms},
                            {"forward", &StepBreakdown::forward_ms},
                            {"backward", &StepBreakdown::backward_ms},
                            {"optimizer", &StepBreakdown::optimizer_ms},
                            {"communication", &StepBreakdown::communication_ms},
                            {"other", &StepBreakdown::other_ms},
                            {"step", &StepBreakdown::total_ms}};
  double all_steps = 0;
  for (const StepBreakdown& s : steps) all_steps += s.total_ms;
  std::string text;
  char line[160];
  std::snprintf(line, sizeof line, "per-step breakdown over %zu steps\n%-14s %10s %10s %10s %8s\n", steps.size(),
                "phase", "mean ms", "min ms", "max ms", "% step");
  text += line;
  for (const Column& c : columns) {
    double sum = 0, lo = INFINITY, hi = -INFINITY;
    for (const StepBreakdown& s : steps) {
      sum += s.*c.field;
      lo = std::min(lo, s.*c.field);
      hi = std::max(hi, s.*c.field);
    }
    std::snprintf(line, sizeof line, "%-14s %10.3f %10.3f %10.3f %7.1f%%\n", c.name, sum / double(steps.size()), lo, hi,
                  all_steps > 0 ? 100.0 * sum / all_steps : 0.0);
    text += line;
  }
  return text;
}

std::string chrome_trace_json(const Profile& profile) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  // Appends one event from its pieces (appending, rather than chains of operator+, keeps GCC 12's
  // -Wrestrict false positive away).
  auto event = [&](std::initializer_list<std::string_view> pieces) {
    out += first ? "{" : ",\n{";
    first = false;
    for (std::string_view piece : pieces) out += piece;
    out += "}";
  };
  constexpr int kHostPid = 1, kDevicePid = 2;
  event({"\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": \"host\"}"});
  for (size_t t = 0; t < profile.thread_names.size(); ++t)
    event({"\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": ", std::to_string(t),
           ", \"args\": {\"name\": ", quoted(profile.thread_names[t]), "}"});
  std::map<int, bool> devices;
  for (const RangeRecord& r : profile.ranges) {
    const int64_t start = to_ns(r.start_us), end = to_ns(r.end_us);
    std::string args = "\"step\": ";
    args += std::to_string(r.step);
    if (r.device_ms >= 0) {
      args += ", \"device_ms\": ";
      args += std::to_string(r.device_ms);
    }
    event({"\"name\": ", quoted(r.name), ", \"cat\": \"", category_name(r.category), "\", \"ph\": \"X\", \"ts\": ",
           micros(start), ", \"dur\": ", micros(end - start), ", \"pid\": ", std::to_string(kHostPid),
           ", \"tid\": ", std::to_string(r.thread), ", \"args\": {", args, "}"});
    if (r.device_ms >= 0) {
      devices[r.device] = true;
      const int64_t device_start = to_ns(r.device_start_us);
      event({"\"name\": ", quoted(r.name), ", \"cat\": \"", category_name(r.category),
             "\", \"ph\": \"X\", \"ts\": ", micros(device_start), ", \"dur\": ", micros(to_ns(r.device_ms * 1e3)),
             ", \"pid\": ", std::to_string(kDevicePid), ", \"tid\": ", std::to_string(r.device),
             ", \"args\": {\"step\": ", std::to_string(r.step), "}"});
    }
  }
  if (!devices.empty()) {
    event(
        {"\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 2, \"tid\": 0, \"args\": {\"name\": \"CUDA (event "
         "time)\"}"});
    for (const auto& [device, unused] : devices)
      event({"\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 2, \"tid\": ", std::to_string(device),
             ", \"args\": {\"name\": \"cuda:", std::to_string(device), " compute stream\"}"});
  }
  for (const CounterSample& c : profile.counters) {
    char value[64];
    std::snprintf(value, sizeof value, "%.17g", std::isfinite(c.value) ? c.value : 0.0);
    event({"\"name\": ", quoted(c.name), ", \"ph\": \"C\", \"ts\": ", micros(to_ns(c.time_us)),
           ", \"pid\": 1, \"tid\": 0, \"args\": {\"value\": ", value, "}"});
  }
  out += "\n]}\n";
  return out;
}

void write_chrome_trace(const Profile& profile, const std::string& path) {
  const std::string json = chrome_trace_json(profile);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  HG_CHECK(file.is_open(), "[profiler] cannot open trace file \"", path, "\" for writing");
  file.write(json.data(), std::streamsize(json.size()));
  file.close();
  HG_CHECK(!file.fail(), "[profiler] writing the trace file \"", path, "\" failed (disk full?)");
}

}  // namespace hg::profiler
