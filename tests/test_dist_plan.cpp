// The memory planner's per-rank prediction under ZeRO at the world size of the launch (ctest runs it
// as a world of 1, over TCP with 2 processes and under mpirun -np 2 / -np 4): each rank measures one
// training step of ZeRO 0-3 configurations, with and without gradient accumulation
// (plan::measure_memory over the shared communicator, CPU device), and plan::predict_memory(..., world)
// must be within 10% of its own peak -- the flat buffers padded to N partitions, the sharded optimizer
// state, gradients and parameters, the packed reduce-scatter buffers and the gathered stage-3 units.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>

#include "dist/communicator.h"
#include "support/plan_grid.h"

using namespace hg;

TEST_CASE("plan: per-rank prediction within 10% under ZeRO at the launch's world size") {
  static dist::Communicator comm(dist::CommunicatorOptions().timeout(std::chrono::seconds(60)));
  const int world = comm.world_size();
  std::vector<test::PlanCase> grid;
  auto add = [&](int stage, plan::Precision precision, bool offload, int64_t recompute_every, int64_t accum = 1) {
    test::PlanCase c{test::plan_grid_model(), plan::TrainingConfig()};
    c.config.micro_batch = 4;
    c.config.zero_stage = stage;
    c.config.precision = precision;
    c.config.offload_optimizer = offload;
    c.config.recompute_every = recompute_every;
    c.config.grad_accum = accum;
    grid.push_back(c);
  };
  for (int stage = 0; stage <= 3; ++stage) add(stage, plan::Precision::fp32, false, 0);
  add(2, plan::Precision::bf16, false, 0);
  add(3, plan::Precision::bf16, false, 1);
  add(2, plan::Precision::fp32, true, 0);
  add(3, plan::Precision::fp32, false, 2);
  // Accumulation under ZeRO: gradients (stage 2: the reduced shards; stage 3: the shards of every
  // unit) carried across micro-batches.
  add(2, plan::Precision::fp32, false, 0, 2);
  add(3, plan::Precision::bf16, false, 0, 2);
  std::vector<test::PlanRow> rows;
  for (const test::PlanCase& c : grid) {
    const plan::MemoryPrediction p = plan::predict_memory(c.model, c.config, world, plan::DeviceKind::cpu);
    const plan::MeasuredMemory m = plan::measure_memory(c.model, c.config, kCPU, &comm);
    rows.push_back(test::PlanRow{test::plan_case_label(c), p.device_peak(), m.device_peak, p.host, m.host_peak});
  }
  if (comm.rank() == 0) MESSAGE("CPU device, world " << world << ", rank 0\n" << test::plan_table(rows));
  for (const test::PlanRow& r : rows) {
    INFO("rank ", comm.rank(), " of ", world, ": ", r.label, ": predicted ", r.predicted, " measured ", r.measured);
    CHECK(std::abs(r.error()) <= 0.10);
    if (r.measured_host > 64 * 1024) CHECK(std::abs(r.host_error()) <= 0.10);
  }
}
