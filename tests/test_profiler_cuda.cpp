// The profiler's CUDA event path: per-op ranges on a CUDA tensor are timed with events on the compute
// stream and appear on the device track of the trace (on the SIMT emulator in the emulated build).
#include <doctest/doctest.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "engine/profiler/profiler.h"

using namespace hg;
using namespace hg::profiler;

TEST_CASE("profiler times CUDA ops with events and places them on the device track") {
  if (!cuda::is_available()) {
    std::printf("SKIPPED (profiler CUDA events): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
    return;
  }
  const Device gpu = Device::cuda(0);
  Tensor a = randn({32, 48}).to(gpu).requires_grad_();
  Tensor b = randn({48, 16}).to(gpu).requires_grad_();
  const auto options = Options().op_ranges(true);
  start(options);
  {
    ScopedRange step("step", Category::step, gpu);
    Tensor loss = sum(gelu(matmul(a, b)));
    loss.backward();
  }
  const Profile profile = stop();
  int timed_ops = 0;
  const RangeRecord* step = nullptr;
  for (const RangeRecord& r : profile.ranges) {
    if (r.name == "step") step = &r;
    if (r.category == Category::op && r.name.find(" backward") == std::string::npos) {
      CAPTURE(r.name);
      CHECK(r.device == 0);
      CHECK(r.device_ms >= 0);
      CHECK(r.device_start_us >= 0);
      timed_ops += 1;
    }
  }
  CHECK(timed_ops >= 5);
  REQUIRE(step != nullptr);
  CHECK(step->device == 0);
  CHECK(step->device_ms >= 0);
  // Device time lies within the step's device interval (event resolution: allow 5 us).
  for (const RangeRecord& r : profile.ranges)
    if (r.device >= 0 && &r != step) {
      CHECK(r.device_start_us >= step->device_start_us - 5);
      CHECK(r.device_start_us + 1e3 * r.device_ms <= step->device_start_us + 1e3 * step->device_ms + 5);
    }
  const auto trace = nlohmann::json::parse(chrome_trace_json(profile));
  int device_events = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == 2) device_events += 1;
  CHECK(device_events == timed_ops + 1);
  double summary_device_ms = 0;
  for (const SummaryRow& row : summary(profile))
    if (row.device_total_ms > 0) summary_device_ms += row.device_total_ms;
  double recorded_device_ms = 0;
  for (const RangeRecord& r : profile.ranges)
    if (r.device_ms >= 0) recorded_device_ms += r.device_ms;
  CHECK(summary_device_ms == doctest::Approx(recorded_device_ms));
}
