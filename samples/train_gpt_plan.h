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
int print_plan(const TrainGptConfig& c, int argc, char** argv);

// The planned settings as train_gpt flags ("--precision", "bf16", ..., "--batch-tokens", "0", ...).
std::vector<std::string> planned_flags(const plan::Candidate& chosen);

// The run config of this command line under the chosen configuration: every train_gpt key (the
// model's shape, the batch with "batch-tokens": 0, the device, the planned keys) but the planner's
// own, so that `train_gpt --config FILE` trains as planned.
std::string config_json(int argc, char** argv, const plan::Candidate& chosen);

// --memory-budget without --plan: a planned flag given too (--zero, --precision, ...) or a setting the
// plan does not model (--stochastic-rounding, --fp32-grads) is a usage error; otherwise argv with the recommended
// configuration's flags appended (later flags win), after logging the choice. Nothing fits: a usage error (exit 2).
std::vector<std::string> planned_arguments(const TrainGptConfig& c, int argc, char** argv);

}  // namespace hg::samples
