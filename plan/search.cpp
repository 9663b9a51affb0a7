// The planner's search (plan/plan.h, plan/search.h): enumerate the configurations, predict each one's
// memory (plan/memory_model.cpp) and step time (plan/step_time.cpp), keep what fits, rank.
//
// The space, for S sequences per rank per step (sequences_per_rank):
//   precision            fp32, bf16, fp16
//   master weights       half precision: with or without (without: only at ZeRO -1, as ZeRO keeps an
//                        fp32 master of what it shards)
//   micro-batch          every power of two b dividing S, and S itself; grad_accum = S / b
//   recompute_every     0, and K = 1, 2, 4, ... up to L / 2, and L / 2 itself
//   offload activations  off, all; inputs with checkpointing
//   ZeRO stage           -1 and 0 at world 1 (stages 1-3 would shard over one rank: stage 0's
//                        memory, more work); 0, 1, 2, 3 at world > 1
//   optimizer offload    off; on with a ZeRO stage
//   On the CPU device the host is the device: offloading (activations or optimizer) moves bytes
//   between two pools of the same memory, so a CPU plan leaves both out.
//   optimizer state      32-bit, 8-bit
//
// Ranking rule (rank): fastest first by ranking_seconds -- the predicted step time, charged 5% per unit
// of numerics_cost (8-bit state 1, fp16's loss scaling 2, master-less half weights 3), since each
// changes what training computes: a technique that changes the numerics ranks first only when it buys
// memory that is needed (nothing standard fits) or a speed-up worth its cost (8-bit state: over 5%;
// dropping the fp32 master copy: over 15%). At the model's resolution of 1% -- the machine constants
// are not known better than that -- the candidates form groups: a group starts at the first candidate
// not yet placed and holds every one within 1% of it. Within a group: the standard numerics first, then
// less device memory, then less host memory (to two significant digits), then fewer flags (train_gpt's
// defaults where nothing else differs). So the ranking is monotone in ranking_seconds to 1%, and a
// larger budget never recommends a configuration more than 1% slower by that measure.
#include "plan/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/error.h"

namespace hg::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<int64_t> checkpoint_choices(int64_t layers) {
  std::vector<int64_t> k{0};
  for (int64_t every = 1; every <= layers / 2; every *= 2) k.push_back(every);
  if (layers / 2 >= 1 && std::find(k.begin(), k.end(), layers / 2) == k.end()) k.push_back(layers / 2);
  return k;
}

// The model's resolution: step times within 1% of each other are a tie; memory is compared to two
// significant digits (61.44 and 61.46 GiB are a tie; 0.0021 and 0.0022 GiB are not).
constexpr double kTimeResolution = 0.01;
double displayed(int64_t bytes) {
  if (bytes <= 0) return 0;
  const double scale = std::pow(10.0, std::floor(std::log10(double(bytes))) - 1);
  return std::round(double(bytes) / scale) * scale;
}

// GiB to 0.1, or to two significant digits below that.
std::string gib(double bytes) {
  char text[32];
  const double g = bytes / kGiB;
  std::snprintf(text, sizeof text, g >= 0.1 ? "%.1f" : "%.2g", g);
  return text;
}

std::string joined(const std::vector<std::string>& flags) {
  std::string out;
  for (const std::string& f : flags) out += (out.empty() ? "" : " ") + f;
  return out;
}

// Host bytes are per rank; a node holds min(world, 8) ranks (8 GPUs per node), and the host budget is
// the node's.
int64_t ranks_per_node(const PlanRequest& request) { return std::min(request.world, 8); }
bool fits_host(const PlanRequest& request, const Candidate& c) {
  return request.host_budget_bytes == 0 || c.memory.host * ranks_per_node(request) <= request.host_budget_bytes;
}

}  // namespace

int64_t sequences_per_rank(const PlanRequest& request) {
  HG_CHECK(request.world >= 1, "[plan] world ", request.world, " must be >= 1");
  HG_CHECK(request.model.context >= 1, "[plan] context ", request.model.context, " must be >= 1");
  HG_CHECK(request.batch_tokens >= 0, "[plan] batch_tokens ", request.batch_tokens, " must be >= 0");
  if (request.batch_tokens == 0) return 1;
  const double per_rank = double(request.batch_tokens) / double(request.world * request.model.context);
  return std::max<int64_t>(1, std::llround(per_rank));
}

std::vector<TrainingConfig> enumerate(const PlanRequest& request) {
  const int64_t sequences = sequences_per_rank(request);
  std::vector<int64_t> micro_batches;
  for (int64_t b = 1; b <= sequences && sequences % b == 0; b *= 2) micro_batches.push_back(b);
  if (micro_batches.back() != sequences) micro_batches.push_back(sequences);  // the whole batch at once
  const bool host_is_device = request.machine.kind == DeviceKind::cpu;
  std::vector<TrainingConfig> configs;
  for (Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16})
    for (bool master : {true, false})
      for (int64_t micro : micro_batches)
        for (int64_t every : checkpoint_choices(request.model.layers))
          for (OffloadMode offload : {OffloadMode::off, OffloadMode::recompute_inputs, OffloadMode::all})
            for (int zero = -1; zero <= 3; ++zero)
              for (bool offload_optimizer : {false, true})
                for (int bits : {32, 8}) {
                  if (!master && (precision == Precision::fp32 || zero >= 0)) continue;
                  if (offload == OffloadMode::recompute_inputs && every == 0) continue;
                  if (zero < 0 && (request.world > 1 || offload_optimizer)) continue;
                  if (zero >= 1 && request.world == 1) continue;
                  if (host_is_device && (offload != OffloadMode::off || offload_optimizer)) continue;
                  TrainingConfig c;
                  c.precision = precision;
                  c.master_weights = master;
                  c.micro_batch = micro;
                  c.grad_accum = sequences / micro;
                  c.recompute_every = every;
                  c.offload_activations = offload;
                  c.zero_stage = zero;
                  c.offload_optimizer = offload_optimizer;
                  c.state_bits = bits;
                  configs.push_back(c);
                }
  return configs;
}

Candidate evaluate(const PlanRequest& request, const TrainingConfig& config) {
  Candidate c;
  c.config = config;
  c.world = request.world;
  c.memory = predict_memory(request.model, config, request.world, request.machine.kind);
  c.time = predict_step_time(request.model, config, request.world, request.batch_tokens, request.machine);
  return c;
}

int numerics_cost(const TrainingConfig& config) {
  const bool half = config.precision != Precision::fp32;
  return (config.state_bits == 8 ? 1 : 0) + (config.precision == Precision::fp16 ? 2 : 0) +
         (half && !config.master_weights ? 3 : 0);
}

double ranking_seconds(const Candidate& candidate) {
  return candidate.time.total * (1.0 + kNumericsPenalty * numerics_cost(candidate.config));
}

void rank(std::vector<Candidate>& candidates) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return ranking_seconds(a) < ranking_seconds(b); });
  const auto preferred = [](const Candidate& a, const Candidate& b) {
    const int na = numerics_cost(a.config), nb = numerics_cost(b.config);
    if (na != nb) return na < nb;
    const double ma = displayed(a.memory.device_peak()), mb = displayed(b.memory.device_peak());
    if (ma != mb) return ma < mb;
    const double ha = displayed(a.memory.host), hb = displayed(b.memory.host);
    if (ha != hb) return ha < hb;
    return a.flags().size() < b.flags().size();
  };
  for (auto group = candidates.begin(); group != candidates.end();) {
    const double limit = ranking_seconds(*group) * (1 + kTimeResolution);
    const auto end =
        std::find_if(group, candidates.end(), [&](const Candidate& c) { return ranking_seconds(c) > limit; });
    std::stable_sort(group, end, preferred);
    group = end;
  }
}

// The per-rank headroom of a CUDA plan. The prediction is the caching allocator's peak_allocated_bytes;
// what else occupies the device, each with its source:
//   kCudaContextBytes     the CUDA context and the loaded kernels' modules: ~500 MiB on an H200 with
//                         CUDA 12/13 (nvidia-smi of an idle process after cudaFree(0), plus cuBLASLt's
//                         and cuDNN's modules loading lazily)
//   kCublasLtWorkspace    kernels/cuda/gemm.cpp's kWorkspaceBytes, one cudaMalloc per device outside
//                         the allocator
//   kNcclBuffersBytes     NCCL's channel buffers when world > 1: NCCL_BUFFSIZE 4 MiB per protocol
//                         buffer, for each channel (up to 32 on NVLink) and peer in a ring, ~600 MiB
//                         in all, rounded up
//   kFragmentationMargin  5% of the budget: blocks the caching allocator holds but cannot reuse for
//                         a request of another size (reserved - allocated)
constexpr int64_t kCudaContextBytes = int64_t(500) << 20;
constexpr int64_t kCublasLtWorkspace = int64_t(32) << 20;
constexpr int64_t kNcclBuffersBytes = int64_t(640) << 20;
constexpr double kFragmentationMargin = 0.05;

int64_t device_headroom_bytes(const PlanRequest& request) {
  if (request.machine.kind != DeviceKind::cuda) return 0;
  return kCudaContextBytes + kCublasLtWorkspace + (request.world > 1 ? kNcclBuffersBytes : 0) +
         int64_t(kFragmentationMargin * double(request.device_budget_bytes));
}

std::vector<Candidate> plan(const PlanRequest& request) {
  HG_CHECK(request.device_budget_bytes > 0, "[plan] device_budget_bytes ", request.device_budget_bytes,
           " must be > 0 (the memory of one rank)");
  HG_CHECK(request.host_budget_bytes >= 0, "[plan] host_budget_bytes ", request.host_budget_bytes,
           " must be >= 0 (0: unlimited)");
  const int64_t usable = request.device_budget_bytes - device_headroom_bytes(request);
  std::vector<Candidate> fits;
  for (const TrainingConfig& config : enumerate(request)) {
    Candidate c = evaluate(request, config);
    if (c.memory.device_peak() <= usable && fits_host(request, c)) fits.push_back(std::move(c));
  }
  rank(fits);
  return fits;
}

std::vector<std::string> Candidate::flags() const {
  const TrainingConfig& c = config;
  std::vector<std::string> f;
  auto add = [&](const std::string& flag, const std::string& value) {
    f.push_back(flag);
    if (!value.empty()) f.push_back(value);
  };
  // train_gpt's defaults are left out: fp32, master weights on, 1 micro-batch, no checkpointing, no
  // offload, no ZeRO, 32-bit state. --batch is always given (it is the global micro-batch).
  if (c.precision != Precision::fp32) add("--precision", name(c.precision));
  if (c.precision != Precision::fp32 && !c.master_weights) add("--no-master-weights", "");
  add("--batch", std::to_string(c.micro_batch * world));
  if (c.grad_accum != 1) add("--grad-accum", std::to_string(c.grad_accum));
  if (c.recompute_every != 0) add("--recompute-every", std::to_string(c.recompute_every));
  if (c.offload_activations != OffloadMode::off) add("--offload-activations", offload_mode_name(c.offload_activations));
  if (c.zero_stage != -1) add("--zero", std::to_string(c.zero_stage));
  if (c.offload_optimizer) add("--offload-optimizer", "");
  if (c.state_bits != 32) add("--optimizer-state-bits", std::to_string(c.state_bits));
  if (c.fp32_grads) add("--fp32-grads", "");
  return f;
}

std::string nothing_fits_message(const PlanRequest& request) {
  // The smallest device peak among the configurations within the host budget (or, when none is, the
  // smallest of all, and the host memory it needs).
  std::vector<Candidate> all;
  for (const TrainingConfig& config : enumerate(request)) all.push_back(evaluate(request, config));
  HG_CHECK(!all.empty(), "[plan] no configuration enumerated");
  const auto host_fits = [&](const Candidate& c) { return fits_host(request, c); };
  const bool any_host_fit = std::any_of(all.begin(), all.end(), host_fits);
  const Candidate* smallest = nullptr;
  for (const Candidate& c : all)
    if ((!any_host_fit || host_fits(c)) &&
        (smallest == nullptr || c.memory.device_peak() < smallest->memory.device_peak()))
      smallest = &c;
  const double peak = double(smallest->memory.device_peak());
  const int64_t headroom = device_headroom_bytes(request);
  std::string message = "nothing fits in " + gib(double(request.device_budget_bytes)) + " GiB per rank";
  if (headroom > 0) message += " less the headroom " + gib(double(headroom)) + " GiB";
  if (request.host_budget_bytes > 0)
    message += " and " + gib(double(request.host_budget_bytes)) + " GiB of host memory";
  message += ": the smallest predicted peak is " + gib(peak) + " GiB (" + joined(smallest->flags()) + ")";
  if (!any_host_fit)
    return message + ", and it needs " + gib(double(smallest->memory.host * ranks_per_node(request))) +
           " GiB of host memory; expected a larger --host-memory";
  // The budget to ask for: the peak and the headroom (its 5% margin of the budget asked for) rounded up
  // in the message's own precision.
  const double fixed = double(headroom) - kFragmentationMargin * double(request.device_budget_bytes);
  const double g = (peak + fixed) / (1 - (headroom > 0 ? kFragmentationMargin : 0.0)) / kGiB,
               step = g >= 0.1 ? 0.1 : std::pow(10.0, std::floor(std::log10(g)) - 1);
  return message + "; expected --memory-budget " + gib(std::ceil(g / step) * step * kGiB) +
         " or more, more ranks (--world), a shorter --context or a smaller model";
}

}  // namespace hg::plan
