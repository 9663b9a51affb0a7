// train_gpt's planner glue (samples/train_gpt_plan.h).
#include "samples/train_gpt_plan.h"

#include <omp.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "dist/bootstrap.h"
#include "layers/gpt.h"
#include "plan/search.h"

namespace hg::samples {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The ranked configurations that fit; nothing fits: a usage error saying what would have to change.
std::vector<plan::Candidate> ranked_or_exit(const plan::PlanRequest& request) {
  std::vector<plan::Candidate> ranked = or_usage_error(kProgram, [&] { return plan::plan(request); });
  if (ranked.empty()) exit_with_usage_error(kProgram, plan::nothing_fits_message(request));
  return ranked;
}

// To 0.01 GiB, or two significant digits below that.
std::string gib(double g) {
  char text[32];
  std::snprintf(text, sizeof text, g >= 0.01 || g == 0 ? "%.2f" : "%.2g", g);
  return text;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// Written to a temporary name and renamed, so a reader never sees half a file.
void write_file(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  std::ofstream out(temp, std::ios::trunc);
  out << text;
  out.close();
  if (!out || std::rename(temp.c_str(), path.c_str()) != 0)
    exit_with_usage_error(kProgram, "--write-config \"" + path + "\": cannot write it; expected a writable path");
}

}  // namespace

plan::PlanRequest plan_request(const TrainGptConfig& c) {
  if (c.threads > 0) omp_set_num_threads(int(c.threads));  // calibrate with the run's threads
  check_at_most(kProgram, {{"world", c.plan_world, 1 << 16}});
  for (const auto& [flag, gib] : {std::pair{"memory-budget", c.memory_budget_gib}, {"host-memory", c.host_memory_gib}})
    if (gib > double(1 << 20))
      exit_with_usage_error(kProgram, std::string("--") + flag + " " + std::to_string(gib) +
                                          " GiB is too large; expected at most 1048576 GiB");
  plan::PlanRequest request;
  if (!c.load.empty()) {
    const auto model = or_usage_error(kProgram, "--load " + c.load, [&] { return nn::GPT::load(c.load); });
    request.model = plan::ModelShape::of(model->config);
  } else {
    request.model.vocab = c.vocab;
    request.model.context = c.context;
    request.model.layers = c.layers;
    request.model.heads = c.heads;
    request.model.dim = c.dim;
  }
  request.model.dropout = c.dropout;
  request.model.fused_attention = c.attention != "composed";
  request.world =
      c.plan_world > 0 ? int(c.plan_world) : or_usage_error(kProgram, [] { return dist::detect_process().world_size; });
  request.batch_tokens = c.batch_tokens > 0 ? c.batch_tokens : c.batch * c.context * c.grad_accum;
  request.device_budget_bytes = int64_t(c.memory_budget_gib * kGiB);
  request.host_budget_bytes = int64_t(c.host_memory_gib * kGiB);
  const bool cuda = Device::parse(c.device).is_cuda();  // checked by TrainGptConfig
  request.machine = cuda ? plan::Machine::h200() : plan::Machine::this_cpu();
  return request;
}

std::string config_json(const plan::Candidate& chosen) {
  const plan::TrainingConfig& t = chosen.config;
  nlohmann::ordered_json j;
  j["precision"] = plan::name(t.precision);
  if (t.precision != plan::Precision::fp32) j["master-weights"] = t.master_weights;
  j["batch"] = t.micro_batch * chosen.world;
  j["grad-accum"] = t.grad_accum;
  j["checkpoint-every"] = t.checkpoint_every;
  j["offload-activations"] = plan::name(t.offload_activations);
  j["zero"] = t.zero_stage;
  j["offload-optimizer"] = t.offload_optimizer;
  j["optimizer-state-bits"] = t.state_bits;
  return j.dump(2) + "\n";
}

int print_plan(const TrainGptConfig& c) {
  if (c.memory_budget_gib <= 0)
    exit_with_usage_error(kProgram, "--plan needs --memory-budget GiB (device memory per rank)");
  const plan::PlanRequest request = plan_request(c);
  const std::vector<plan::Candidate> ranked = ranked_or_exit(request);
  std::fputs(plan::format_table(request, ranked, 10).c_str(), stdout);
  if (!c.write_config.empty()) {
    write_file(c.write_config, config_json(ranked.front()));
    std::printf("wrote %s\n", c.write_config.c_str());
  }
  return 0;
}

std::vector<std::string> planned_arguments(const TrainGptConfig& c, int argc, char** argv) {
  const int run_world = or_usage_error(kProgram, [] { return dist::detect_process().world_size; });
  if (c.plan_world > 0 && c.plan_world != run_world)
    exit_with_usage_error(kProgram, "--world " + std::to_string(c.plan_world) +
                                        " plans for another world than this run's " + std::to_string(run_world) +
                                        " process(es); expected --world only with --plan");
  const plan::PlanRequest request = plan_request(c);
  const plan::Candidate chosen = ranked_or_exit(request).front();
  std::printf("plan: %s (predicted %s GiB of %s GiB per rank)\n", joined(chosen.flags()).c_str(),
              gib(double(chosen.memory.device_peak()) / kGiB).c_str(), gib(c.memory_budget_gib).c_str());
  std::vector<std::string> args(argv, argv + argc);
  // Every planned setting, explicitly (flags() leaves train_gpt's defaults out, but the command line may
  // have set them); --batch-tokens 0 so that --grad-accum holds.
  const plan::TrainingConfig& t = chosen.config;
  const auto yes_no = [](bool b) { return std::string(b ? "true" : "false"); };
  for (const std::string& a :
       {std::string("--precision"), std::string(plan::name(t.precision)),
        "--master-weights=" + yes_no(t.master_weights), std::string("--batch"),
        std::to_string(t.micro_batch * chosen.world), std::string("--grad-accum"), std::to_string(t.grad_accum),
        std::string("--batch-tokens"), std::string("0"), std::string("--checkpoint-every"),
        std::to_string(t.checkpoint_every), std::string("--offload-activations"),
        std::string(plan::name(t.offload_activations)), std::string("--zero"), std::to_string(t.zero_stage),
        "--offload-optimizer=" + yes_no(t.offload_optimizer), std::string("--optimizer-state-bits"),
        std::to_string(t.state_bits)})
    args.push_back(a);
  return args;
}

}  // namespace hg::samples
