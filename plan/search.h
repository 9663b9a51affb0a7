#pragma once
// The planner's search (plan/search.cpp), beyond plan/plan.h's plan(): the space it enumerates, one
// configuration's prediction, the ranking key, and what to say when nothing fits.
#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"

namespace hg::plan {

// Sequences each rank trains per optimizer step: batch_tokens / (world x context), rounded to the
// nearest whole sequence (at least 1; batch_tokens 0: one sequence per rank).
int64_t sequences_per_rank(const PlanRequest& request);

// Every configuration the planner considers for the request (valid ones only: no master-less half
// model under ZeRO, offload-activations inputs only with checkpointing, optimizer offload only with a
// ZeRO stage, ZeRO -1 only and stages 1-3 never at world 1, no offload on the CPU device), in a fixed
// order.
std::vector<TrainingConfig> enumerate(const PlanRequest& request);

// The prediction of one configuration (memory and step time), whether it fits or not.
Candidate evaluate(const PlanRequest& request, const TrainingConfig& config);

// How far a configuration departs from the standard mixed-precision recipe's numerics: 0 fp32, or
// bf16 with fp32 master weights and 32-bit state; 1 adds 8-bit state; 2 fp16 (loss scaling); 3 a
// half model without master weights (updates below half's resolution are lost). The sum of what applies.
int numerics_cost(const TrainingConfig& config);
// Each unit of numerics_cost must buy this share of step time to rank ahead of the standard numerics.
inline constexpr double kNumericsPenalty = 0.05;
// The step time the ranking compares: the predicted step x (1 + kNumericsPenalty x numerics_cost).
double ranking_seconds(const Candidate& candidate);

// Sorts candidates into the planner's ranking, best first (plan/search.cpp states the rule).
void rank(std::vector<Candidate>& candidates);

// The answer when plan() is empty: the smallest predicted peak, its flags and what would have to change.
std::string nothing_fits_message(const PlanRequest& request);

}  // namespace hg::plan
