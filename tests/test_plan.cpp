// The memory planner's prediction against the CPU allocator's measured peak (issue 18, "validated, not
// guessed"): every configuration of the grid (tests/support/plan_grid.h) runs one measured training
// step as train_gpt runs it, and plan::predict_memory must be within 10% of the peak.
#include <doctest/doctest.h>

#include <cmath>

#include "support/plan_grid.h"

using namespace hg;

TEST_CASE("plan: predicted device peak within 10% of the CPU allocator's, over the grid") {
  const std::vector<test::PlanCase> grid = test::plan_grid();
  REQUIRE(grid.size() >= 20);
  std::vector<test::PlanRow> rows;
  for (const test::PlanCase& c : grid) rows.push_back(test::run_plan_case(c, kCPU));
  MESSAGE("CPU device\n" << test::plan_table(rows));
  for (const test::PlanRow& r : rows) {
    INFO(r.label, ": predicted ", r.predicted, " measured ", r.measured);
    CHECK(std::abs(r.error()) <= 0.10);
    if (r.measured_host > 64 * 1024) CHECK(std::abs(r.host_error()) <= 0.10);  // offloaded state / activations
  }
}
