// The memory planner's prediction against the CUDA caching allocator's measured peak (issue 18,
// "validated, not guessed"): the grid of tests/support/plan_grid.h on cuda:0 -- the SIMT emulator in
// the emulated build, a GPU where there is one -- each configuration one measured training step as
// train_gpt runs it, plan::predict_memory(..., DeviceKind::cuda) within 10% of the peak; the host
// column is pinned memory (optimizer offload's state and copies, offloaded activations). Without a
// device every case prints SKIPPED.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "engine/cuda/cuda_context.h"
#include "support/plan_grid.h"

using namespace hg;

namespace {

bool skip_without_cuda() {
  if (cuda::is_available()) return false;
  std::printf("SKIPPED (CUDA plan tests): no CUDA device: %s\n", cuda::unavailable_reason().c_str());
  MESSAGE("skipped: no CUDA device: ", cuda::unavailable_reason());
  return true;
}

}  // namespace

TEST_CASE("plan: predicted device peak within 10% of the CUDA allocator's, over the grid") {
  if (skip_without_cuda()) return;
  const std::vector<test::PlanCase> grid =
      test::plan_grid(test::plan_grid_model(/*heads=*/1, /*layers=*/2), /*scale=*/2);
  REQUIRE(grid.size() >= 20);
  std::vector<test::PlanRow> rows;
  for (const test::PlanCase& c : grid) rows.push_back(test::run_plan_case(c, Device::cuda(0)));
  MESSAGE("CUDA device\n" << test::plan_table(rows));
  for (const test::PlanRow& r : rows) {
    INFO(r.label, ": predicted ", r.predicted, " measured ", r.measured);
    CHECK(std::abs(r.error()) <= 0.10);
    if (r.measured_host > 64 * 1024) CHECK(std::abs(r.host_error()) <= 0.10);  // offloaded state / activations
  }
}
