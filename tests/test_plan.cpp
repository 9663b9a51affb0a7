// The memory planner's prediction against the CPU allocator's measured peak (issue 18, "validated, not
// guessed"): every configuration of the grid (tests/support/plan_grid.h) runs one measured training
// step as train_gpt runs it, and plan::predict_memory must be within 10% of the peak.
#include <doctest/doctest.h>

#include <cmath>

#include "layers/gpt.h"
#include "support/check_error.h"
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

TEST_CASE("plan: ModelShape is nn::GPT's shape and parameter count") {
  for (const auto& config : {nn::GPTConfig().vocab_size(256).context(32).n_layer(4).n_head(4).n_embd(64),
                             nn::GPTConfig()
                                 .vocab_size(1000)
                                 .context(77)
                                 .n_layer(3)
                                 .n_head(6)
                                 .n_embd(96)
                                 .dropout(0.1)
                                 .attention(AttentionImpl::Composed)
                                 .fused_classifier(false)}) {
    const nn::GPT model(config);
    const plan::ModelShape shape = plan::ModelShape::of(config);
    CHECK(shape.parameters() == model.parameter_count());
    CHECK(shape.vocab == config.vocab_size());
    CHECK(shape.layers == config.n_layer());
    CHECK(shape.fused_attention == (config.attention() != AttentionImpl::Composed));
    CHECK(shape.fused_classifier == config.fused_classifier());
    CHECK(shape.dropout == config.dropout());
  }
  CHECK(std::string(plan::name(plan::Precision::bf16)) == "bf16");
  CHECK(std::string(offload_mode_name(OffloadMode::recompute_inputs)) == "inputs");
}

TEST_CASE("plan: what each technique changes, and bad requests named") {
  const plan::ModelShape m = test::plan_grid_model();
  plan::TrainingConfig base;
  base.micro_batch = 4;
  const plan::MemoryPrediction p = plan::predict_memory(m, base, 1, plan::DeviceKind::cpu);
  // fp32 local AdamW: parameters n e, exp_avg + exp_avg_sq 8 n (+ step counts); activations dominate.
  CHECK(p.parameters == 4 * m.parameters());
  CHECK(p.optimizer_state == 8 * m.parameters() + 24 * int64_t(4 + 12 * m.layers));
  CHECK(p.activations > p.parameters);
  auto with = [&](auto&& edit, int world = 1) {
    plan::TrainingConfig c = base;
    edit(c);
    return plan::predict_memory(m, c, world, plan::DeviceKind::cpu);
  };
  CHECK(with([](plan::TrainingConfig& c) { c.recompute_every = 1; }).activations < p.activations);
  CHECK(with([](plan::TrainingConfig& c) { c.precision = plan::Precision::bf16; }).device_peak() < p.device_peak());
  CHECK(with([](plan::TrainingConfig& c) { c.state_bits = 8; }).optimizer_state < p.optimizer_state / 2);
  const auto offloaded = with([](plan::TrainingConfig& c) { c.zero_stage = 2, c.offload_optimizer = true; });
  CHECK(offloaded.optimizer_state == 0);
  CHECK(offloaded.host >= 12 * m.parameters());
  // ZeRO 1 at world 4: the optimizer state of a quarter of the (padded) parameters.
  const auto sharded = with([](plan::TrainingConfig& c) { c.zero_stage = 1; }, 4);
  CHECK(sharded.optimizer_state < p.optimizer_state / 3);
  // ZeRO 3's fitted term (the fused classifier's dW, V C fp32, held through the backward) is workspace,
  // not parameters: at world 4 the parameters are the shards and the gathered units only.
  const auto stage3 = with([](plan::TrainingConfig& c) { c.zero_stage = 3; }, 4);
  const auto stage2 = with([](plan::TrainingConfig& c) { c.zero_stage = 2; }, 4);
  CHECK(stage3.parameters < stage2.parameters);  // shards and gathered units, below stage 2's whole copy
  // the peaks' op scratch is alike (stage 3's peak phase is a neighbour of stage 2's); the dW comes on top
  const double dw = double(m.vocab * m.dim * 4);
  CHECK(double(stage3.workspace - stage2.workspace) == doctest::Approx(dw).epsilon(0.05));
  CHECK_ERROR(plan::predict_memory(m, base, 0, plan::DeviceKind::cpu), "world >= 1", "got 0");
  CHECK_ERROR(with([](plan::TrainingConfig& c) { c.micro_batch = 0; }), "micro_batch >= 1");
  CHECK_ERROR(with([](plan::TrainingConfig& c) { c.state_bits = 4; }), "state_bits 32 or 8", "got 4");
}

TEST_CASE("plan: ZeRO 2 and 3 with several gradient buckets (a 12.6M-parameter model, 25 MiB buckets)") {
  // 50 MB of fp32 gradients: two buckets, each packed and freed when complete, the wte bucket last.
  plan::ModelShape m = test::plan_grid_model();
  m.dim = 512, m.heads = 8;
  std::vector<test::PlanRow> rows;
  for (int stage : {-1, 2, 3}) {
    test::PlanCase c{m, plan::TrainingConfig()};
    c.config.micro_batch = 2;
    c.config.zero_stage = stage;
    rows.push_back(test::run_plan_case(c, kCPU));
  }
  MESSAGE("CPU device, several buckets\n" << test::plan_table(rows));
  for (const test::PlanRow& r : rows) {
    INFO(r.label, ": predicted ", r.predicted, " measured ", r.measured);
    CHECK(std::abs(r.error()) <= 0.10);
  }
}
