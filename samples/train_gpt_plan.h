#pragma once
// train_gpt and the memory planner (plan/plan.h): --plan prints the ranked configurations that fit
// --memory-budget for this run's model and batch (and writes the pick to --write-config); --memory-budget
// alone trains with the pick. The model is planned from its shape (--layers/--heads/--dim/--context/
// --vocab, or --load's), never built for it.
#include <string>
#include <vector>

#include "plan/plan.h"
#include "samples/train_gpt_config.h"

namespace hg::samples {

// The request for this run: the model's shape, the batch (--batch-tokens, or --batch x --context x
// --grad-accum tokens), the world (--world, or the run's), the budgets, the machine of --device (the H200
// figures for cuda, this CPU's calibration for cpu).
plan::PlanRequest plan_request(const TrainGptConfig& c);

// --plan: prints the table, writes --write-config FILE, returns 0. Nothing fits: a usage error (exit 2).
int print_plan(const TrainGptConfig& c);

// The chosen configuration as a JSON object of train_gpt keys ({"precision": "bf16", "zero": 2, ...}).
std::string config_json(const plan::Candidate& chosen);

// --memory-budget without --plan: argv with the recommended configuration's flags appended (later flags
// win), after logging the choice. Nothing fits: a usage error (exit 2).
std::vector<std::string> planned_arguments(const TrainGptConfig& c, int argc, char** argv);

}  // namespace hg::samples
