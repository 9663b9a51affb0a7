// train_gpt's planner glue (samples/train_gpt_plan.h).
#include "samples/train_gpt_plan.h"

#include <omp.h>

#include <algorithm>
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
  std::vector<plan::Candidate> ranked = app::or_usage_error(kProgram, [&] { return plan::plan(request); });
  if (ranked.empty()) app::exit_with_usage_error(kProgram, plan::nothing_fits_message(request));
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
    app::exit_with_usage_error(kProgram, "--write-config \"" + path + "\": cannot write it; expected a writable path");
}

}  // namespace

namespace {

// The flags the planner chooses (and --memory-budget sets): given explicitly besides --memory-budget,
// they would either be overridden by the plan or contradict it. (--batch, --grad-accum and
// --batch-tokens are not among them: they give the batch the plan is for.)
constexpr const char* kPlannedFlags[] = {"precision", "master-weights",    "recompute-every",     "offload-activations",
                                         "zero",      "offload-optimizer", "optimizer-state-bits"};
// Settings the plan does not model that conflict with one it may pick (--stochastic-rounding needs
// a run without --zero; --fp32-grads changes the gradients' bytes the plan counted).
constexpr const char* kUnplannedFlags[] = {"stochastic-rounding", "fp32-grads"};

// The length of the sequences the run trains (what train_gpt divides --batch-tokens by): the
// addition task's problems less one, or the text's window.
int64_t trained_sequence_length(const TrainGptConfig& c, int64_t model_context) {
  if (c.data.empty()) return 3 * c.digits + 3;  // AdditionTask::problem_length() - 1: 2D+2 prompt, D+2 answer
  return std::min(c.context, model_context);
}

}  // namespace

plan::PlanRequest plan_request(const TrainGptConfig& c) {
  if (c.threads > 0) omp_set_num_threads(int(c.threads));  // calibrate with the run's threads
  app::check_at_most(kProgram, {{"world", c.plan_world, 1 << 16}});
  for (const auto& [flag, gib] : {std::pair{"memory-budget", c.memory_budget_gib}, {"host-memory", c.host_memory_gib}})
    if (gib > double(1 << 20))
      app::exit_with_usage_error(kProgram, std::string("--") + flag + " " + std::to_string(gib) +
                                          " GiB is too large; expected at most 1048576 GiB");
  plan::PlanRequest request;
  if (!c.load.empty()) {  // the loaded model's shape and dropout (train_gpt trains it as saved)
    const auto model = app::or_usage_error(kProgram, "--load " + c.load, [&] { return nn::GPT::load(c.load); });
    request.model = plan::ModelShape::of(model->config);
  } else {
    request.model.vocab = model_vocab(c);  // --data: the shards' vocabulary
    request.model.context = c.context;
    request.model.layers = c.layers;
    request.model.heads = c.heads;
    request.model.dim = c.dim;
    request.model.dropout = c.dropout;
  }
  request.model.fused_attention = c.attention != "composed";
  request.world = c.plan_world > 0 ? int(c.plan_world)
                                   : app::or_usage_error(kProgram, [] { return dist::detect_process().world_size; });
  // Sequences per optimizer step as train_gpt counts them (--batch-tokens over the trained sequence
  // length), as tokens of the model's context (the planner's unit).
  const int64_t length = trained_sequence_length(c, request.model.context);
  const int64_t sequences =
      c.batch_tokens > 0 ? std::max<int64_t>(c.batch_tokens / std::max<int64_t>(length, 1), 1) : c.batch * c.grad_accum;
  request.batch_tokens = sequences * request.model.context;
  request.device_budget_bytes = int64_t(c.memory_budget_gib * kGiB);
  request.host_budget_bytes = int64_t(c.host_memory_gib * kGiB);
  const bool cuda = Device::parse(c.device).is_cuda();  // checked by TrainGptConfig
  // More than one rank: fixed figures, so that every rank's plan is the same by construction (each
  // rank calibrating its own would see different noise and could pick another configuration).
  request.machine = cuda                ? plan::Machine::h200()
                    : request.world > 1 ? plan::Machine::cpu_nominal()
                                        : plan::Machine::this_cpu();
  return request;
}

std::vector<std::string> planned_flags(const plan::Candidate& chosen) {
  // Every planned setting, explicitly (flags() leaves train_gpt's defaults out, but the command line may
  // have set them); --batch-tokens 0 so that --grad-accum holds.
  const plan::TrainingConfig& t = chosen.config;
  const auto yes_no = [](bool b) { return std::string(b ? "true" : "false"); };
  return {std::string("--precision"),
          std::string(plan::name(t.precision)),
          "--master-weights=" + yes_no(t.master_weights),
          std::string("--batch"),
          std::to_string(t.micro_batch * chosen.world),
          std::string("--grad-accum"),
          std::to_string(t.grad_accum),
          std::string("--batch-tokens"),
          std::string("0"),
          std::string("--recompute-every"),
          std::to_string(t.recompute_every),
          std::string("--offload-activations"),
          std::string(offload_mode_name(t.offload_activations)),
          std::string("--zero"),
          std::to_string(t.zero_stage),
          "--offload-optimizer=" + yes_no(t.offload_optimizer),
          std::string("--optimizer-state-bits"),
          std::to_string(t.state_bits)};
}

std::string config_json(int argc, char** argv, const plan::Candidate& chosen) {
  // The whole run config of this command line with the plan's settings after it (they win): the
  // model's shape, the batch with --batch-tokens 0, the device, ... -- a file that trains as planned
  // with `train_gpt --config FILE` alone. Parsed as --plan (so that a cuda plan parses without a GPU);
  // the planner's own keys are left out.
  std::vector<std::string> args(argv, argv + argc);
  for (const std::string& f : planned_flags(chosen)) args.push_back(f);
  std::vector<char*> planned_argv;
  for (std::string& a : args) planned_argv.push_back(a.data());
  const TrainGptConfig planned(int(planned_argv.size()), planned_argv.data());
  return planned.flags.to_json({"plan", "memory-budget", "host-memory", "world", "write-config"});
}

int print_plan(const TrainGptConfig& c, int argc, char** argv) {
  if (c.memory_budget_gib <= 0)
    app::exit_with_usage_error(kProgram, "--plan needs --memory-budget GiB (device memory per rank)");
  const plan::PlanRequest request = plan_request(c);
  const std::vector<plan::Candidate> ranked = ranked_or_exit(request);
  std::fputs(plan::format_table(request, ranked, 10).c_str(), stdout);
  if (!c.write_config.empty()) {
    write_file(c.write_config, config_json(argc, argv, ranked.front()));
    std::printf("wrote %s\n", c.write_config.c_str());
  }
  return 0;
}

std::vector<std::string> planned_arguments(const TrainGptConfig& c, int argc, char** argv) {
  const int run_world = app::or_usage_error(kProgram, [] { return dist::detect_process().world_size; });
  if (c.plan_world > 0 && c.plan_world != run_world)
    app::exit_with_usage_error(kProgram, "--world " + std::to_string(c.plan_world) +
                                        " plans for another world than this run's " + std::to_string(run_world) +
                                        " process(es); expected --world only with --plan");
  for (const char* flag : kPlannedFlags)
    if (c.flags.given(flag))
      app::exit_with_usage_error(kProgram,
                            std::string("--") + flag +
                                " is chosen by --memory-budget's plan; expected "
                                "--memory-budget without it, or --plan --memory-budget to see the choices and "
                                "the flags without --memory-budget");
  for (const char* flag : kUnplannedFlags)
    if (c.flags.given(flag))
      app::exit_with_usage_error(kProgram,
                                 std::string("--") + flag + " is not part of --memory-budget's plan (it may " +
                                     "pick --zero, or count other gradient bytes); expected --memory-budget " +
                                     "without it, or the plan's flags (--plan) with it");
  const plan::PlanRequest request = plan_request(c);
  const plan::Candidate chosen = ranked_or_exit(request).front();
  std::printf("plan: %s (predicted %s GiB of %s GiB per rank)\n", joined(chosen.flags()).c_str(),
              gib(double(chosen.memory.device_peak()) / kGiB).c_str(), gib(c.memory_budget_gib).c_str());
  std::vector<std::string> args(argv, argv + argc);
  for (const std::string& f : planned_flags(chosen)) args.push_back(f);
  return args;
}

}  // namespace hg::samples
