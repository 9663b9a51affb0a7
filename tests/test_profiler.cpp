// The profiler (engine/profiler): ranges, nesting and threads in the Chrome trace JSON, the summary and
// per-step breakdown against the recorded ranges, per-op ranges through HG_KERNEL, and NVML's
// absent-library path.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "engine/ops.h"
#include "engine/profiler/nvml.h"
#include "engine/profiler/profiler.h"
#include "support/check_error.h"

using namespace hg;
using namespace hg::profiler;
using json = nlohmann::json;

namespace {

void spin_us(double us) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double, std::micro>(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

int64_t ns(const json& value) { return std::llround(value.get<double>() * 1e3); }

const RangeRecord& find_range(const Profile& p, const std::string& name) {
  for (const RangeRecord& r : p.ranges)
    if (r.name == name) return r;
  FAIL("no range named ", name);
  return p.ranges.front();
}

}  // namespace

TEST_CASE("profiler trace JSON parses with nesting timestamps escaped names and thread ids") {
  const std::string odd = "fwd \"quoted\" \\ back\nslash\ttab \x01 \xc3\xa9 <&>";
  start();
  {
    ScopedRange step("step", Category::step);
    set_step(7);
    {
      ScopedRange forward(odd.c_str(), Category::forward);
      spin_us(200);
      ScopedRange inner("inner", Category::op);
      spin_us(100);
    }
    std::thread worker([] {
      set_thread_name("worker \"w\"");
      ScopedRange data("load", Category::data);
      spin_us(150);
      ScopedRange decode("decode", Category::other);
      spin_us(50);
    });
    worker.join();
    counter("gpu_util_percent", 42.5);
  }
  const Profile profile = stop();
  REQUIRE(profile.ranges.size() == 5);

  const RangeRecord& step = find_range(profile, "step");
  const RangeRecord& fwd = find_range(profile, odd);
  const RangeRecord& inner = find_range(profile, "inner");
  const RangeRecord& load = find_range(profile, "load");
  CHECK(step.depth == 0);
  CHECK(fwd.depth == 1);
  CHECK(inner.depth == 2);
  CHECK(&profile.ranges[size_t(inner.parent)] == &fwd);
  CHECK(&profile.ranges[size_t(fwd.parent)] == &step);
  CHECK(load.parent == -1);  // ranges nest per thread
  CHECK(load.thread != step.thread);
  CHECK(step.step == -1);
  CHECK(fwd.step == 7);
  CHECK(fwd.duration_us() >= 300);
  CHECK(profile.thread_names[load.thread] == "worker \"w\"");

  const json trace = json::parse(chrome_trace_json(profile));  // throws on invalid JSON
  REQUIRE(trace.contains("traceEvents"));
  std::map<std::string, json> by_name;
  std::map<int64_t, std::string> thread_names;
  int counters = 0;
  for (const json& e : trace["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e["pid"].is_number_integer());
    REQUIRE(e["tid"].is_number_integer());
    if (e["ph"] == "X") by_name[e["name"].get<std::string>()] = e;
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"].get<int64_t>()] = e["args"]["name"];
    if (e["ph"] == "C") {
      counters += 1;
      CHECK(e["name"] == "gpu_util_percent");
      CHECK(e["args"]["value"].get<double>() == 42.5);
    }
  }
  CHECK(counters == 1);
  REQUIRE(by_name.size() == 5);
  // The odd name survives escaping except for the control character, which JSON escapes as \u0001.
  REQUIRE(by_name.count(odd) == 1);
  CHECK(thread_names[int64_t(load.thread)] == "worker \"w\"");
  // Children lie inside their parents, on the parent's thread.
  auto inside = [&](const std::string& child, const std::string& parent) {
    const json& c = by_name.at(child);
    const json& p = by_name.at(parent);
    CHECK(c["tid"] == p["tid"]);
    CHECK(ns(c["ts"]) >= ns(p["ts"]));
    CHECK(ns(c["ts"]) + ns(c["dur"]) <= ns(p["ts"]) + ns(p["dur"]));
  };
  inside(odd, "step");
  inside("inner", odd);
  inside("decode", "load");
  CHECK(by_name.at("load")["tid"] != by_name.at("step")["tid"]);
  CHECK(by_name.at(odd)["cat"] == "forward");
  CHECK(by_name.at(odd)["args"]["step"] == 7);
  CHECK(std::abs(by_name.at(odd)["dur"].get<double>() - fwd.duration_us()) < 0.002);
  CHECK(std::abs(by_name.at(odd)["ts"].get<double>() - fwd.start_us) < 0.002);
}

TEST_CASE("profiler summary and step breakdown agree with the recorded ranges") {
  start();
  for (int s = 0; s < 3; ++s) {
    set_step(s);
    ScopedRange step("step", Category::step);
    {
      ScopedRange data("data", Category::data);
      spin_us(100);
    }
    {
      ScopedRange forward("forward", Category::forward);
      ScopedRange nested("forward part", Category::forward);  // same category inside: not counted twice
      spin_us(200);
    }
    {
      ScopedRange backward("backward", Category::backward);
      spin_us(300);
    }
    {
      ScopedRange optimizer("optimizer", Category::optimizer);
      spin_us(50);
    }
    spin_us(80);  // bookkeeping: "other"
  }
  const Profile profile = stop();
  REQUIRE(profile.ranges.size() == 3 * 6);

  std::map<std::string, std::pair<int64_t, double>> expected;  // count, total ms
  double step_ms = 0;
  for (const RangeRecord& r : profile.ranges) {
    expected[r.name].first += 1;
    expected[r.name].second += r.duration_us() / 1e3;
    if (r.category == Category::step) step_ms += r.duration_us() / 1e3;
  }
  const std::vector<SummaryRow> rows = summary(profile);
  REQUIRE(rows.size() == expected.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const SummaryRow& row = rows[i];
    CAPTURE(row.name);
    CHECK(row.count == expected[row.name].first);
    CHECK(row.total_ms == doctest::Approx(expected[row.name].second).epsilon(1e-12));
    CHECK(row.mean_ms == doctest::Approx(row.total_ms / double(row.count)).epsilon(1e-12));
    CHECK(row.percent_of_step == doctest::Approx(100.0 * row.total_ms / step_ms).epsilon(1e-9));
    CHECK(row.device_total_ms < 0);
    if (i > 0) CHECK(rows[i - 1].total_ms >= row.total_ms);
  }
  CHECK(rows[0].name == "step");
  CHECK(rows[0].percent_of_step == doctest::Approx(100.0));

  const std::vector<StepBreakdown> steps = step_breakdown(profile);
  REQUIRE(steps.size() == 3);
  for (size_t s = 0; s < steps.size(); ++s) {
    const StepBreakdown& b = steps[s];
    CHECK(b.step == int64_t(s));
    auto range_ms = [&](const std::string& name) {
      for (const RangeRecord& r : profile.ranges)
        if (r.name == name && r.step == int64_t(s)) return r.duration_us() / 1e3;
      return -1.0;
    };
    CHECK(b.total_ms == doctest::Approx(range_ms("step")));
    CHECK(b.data_ms == doctest::Approx(range_ms("data")));
    CHECK(b.forward_ms == doctest::Approx(range_ms("forward")));  // "forward part" not added again
    CHECK(b.backward_ms == doctest::Approx(range_ms("backward")));
    CHECK(b.optimizer_ms == doctest::Approx(range_ms("optimizer")));
    CHECK(b.communication_ms == 0);
    CHECK(b.other_ms >= 0.079);
    CHECK(b.data_ms + b.forward_ms + b.backward_ms + b.optimizer_ms + b.other_ms == doctest::Approx(b.total_ms));
  }
  const std::string table = format_summary(profile);
  CHECK(table.find("forward part") != std::string::npos);
  CHECK(format_step_breakdown(steps).find("data wait") != std::string::npos);
}

TEST_CASE("per-op ranges cover every kernel call and backward node only when asked") {
  Tensor a = randn({8, 16}).requires_grad_();
  Tensor b = randn({16, 4}).requires_grad_();
  CHECK_FALSE(op_ranges_enabled());
  start();  // op_ranges off
  CHECK_FALSE(op_ranges_enabled());
  sum(gelu(matmul(a, b))).backward();
  CHECK(stop().ranges.empty());

  const auto options = Options().op_ranges(true);
  start(options);
  CHECK(op_ranges_enabled());
  {
    std::optional<ScopedRange> phase(std::in_place, "forward", Category::forward);
    Tensor loss = sum(gelu(matmul(a, b)));
    phase.emplace("backward", Category::backward);
    loss.backward();
  }
  const Profile profile = stop();
  CHECK_FALSE(op_ranges_enabled());
  std::map<std::string, int> count;
  for (const RangeRecord& r : profile.ranges) count[r.name] += 1;
  CHECK(count["gemm"] >= 3);  // forward + two backward GEMMs
  CHECK(count["unary_forward"] >= 1);
  CHECK(count["reduce"] >= 1);
  bool backward_node = false;
  for (const auto& [name, n] : count) backward_node = backward_node || name.find(" backward") != std::string::npos;
  CHECK(backward_node);
  for (const RangeRecord& r : profile.ranges) {
    if (r.category != Category::op) continue;
    CHECK(r.parent >= 0);  // inside forward or backward
    CHECK(r.device == -1);
  }
}

TEST_CASE("profiler sessions: misuse errors open ranges and ranges across sessions") {
  CHECK_ERROR(stop(), "stop() without a recording session");
  start();
  CHECK_ERROR(start(), "already recording");
  std::optional<ScopedRange> open(std::in_place, "left open", Category::other);
  const Profile first = stop();
  REQUIRE(first.ranges.size() == 1);
  CHECK(first.ranges[0].end_us == first.duration_us);  // ended at stop()
  start();
  open.reset();  // began in the first session: not part of the second
  { ScopedRange fresh("fresh", Category::other); }
  const Profile second = stop();
  REQUIRE(second.ranges.size() == 1);
  CHECK(second.ranges[0].name == "fresh");
  CHECK_ERROR(write_chrome_trace(second, "/nonexistent-dir/trace.json"), "cannot open trace file",
              "/nonexistent-dir/trace.json");
  const auto bad = Options().max_ranges(0);
  CHECK_ERROR(start(bad), "max_ranges");
  const auto small = Options().max_ranges(2);
  start(small);
  for (int i = 0; i < 5; ++i) ScopedRange r("r", Category::other);
  const Profile capped = stop();
  CHECK(capped.ranges.size() == 2);
  CHECK(capped.dropped == 3);
  CHECK(format_summary(capped).find("3 ranges dropped") != std::string::npos);
}

TEST_CASE("NVML absent: a missing library or symbol is reported and sampling returns nothing") {
  Nvml missing(std::vector<std::string>{"libnvidia-ml-does-not-exist.so.1"});
  CHECK_FALSE(missing.available());
  CHECK(missing.unavailable_reason().find("NVML unavailable") != std::string::npos);
  CHECK(missing.unavailable_reason().find("libnvidia-ml-does-not-exist.so.1") != std::string::npos);
  CHECK_FALSE(missing.sample(0).has_value());
  CHECK(missing.last_error() == missing.unavailable_reason());

  Nvml wrong(std::vector<std::string>{"libm.so.6"});  // loads, but is not NVML
  CHECK_FALSE(wrong.available());
  CHECK(wrong.unavailable_reason().find("no symbol nvmlInit_v2") != std::string::npos);
  CHECK_FALSE(wrong.sample(0).has_value());

  Nvml system;  // the driver's library where there is one
  if (system.available()) {
    const auto s = system.sample(0);
    REQUIRE(s.has_value());
    CHECK(s->memory_total_bytes > 0);
    CHECK(s->gpu_percent <= 100);
    CHECK_FALSE(system.sample(-1).has_value());
  } else {
    MESSAGE("no NVIDIA driver here: ", system.unavailable_reason());
    CHECK_FALSE(system.unavailable_reason().empty());
  }
}
