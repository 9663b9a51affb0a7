// bench_kernels --audit (kernel_audit.h). For every case of kernel_cases.h at every dtype: prepare its
// buffers with recording off, record one run of the op (kernels/emu/audit.h), sum its launches
// (audit/gate.h sum_launches), judge them (evaluate_gate) and print the figures with a roofline
// prediction for the H200 at the audited size (audit/h200_roofline.h). Then one training step of a
// small bf16 GPT, recorded whole: its launches, their predicted time and the kernels that dominate it.
#include "kernel_audit.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "audit/gate.h"
#include "audit/h200_roofline.h"
#include "audit/occupancy.h"
#include "audit/resource_usage.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "kernel_cases.h"
#include "kernels/emu/audit.h"
#include "kernels/runtime_counters.h"
#include "layers/nn.h"
#include "optim/optim.h"

namespace hg::bench {

namespace emu = hg::emu::audit;

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

std::string string_array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quote(items[i]);
  return out + "]";
}

std::string dim3_json(const dim3& d) {
  std::ostringstream out;
  out << '[' << d.x << ", " << d.y << ", " << d.z << ']';
  return out.str();
}

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// The kernels an op launched: name, launch count and the first launch's configuration.
// The sm_90 build's resources of each kernel (bench_kernels --resources), or null: not joined.
const std::vector<audit::KernelResources>* g_resources = nullptr;

// What the sm_90 report says of one kernel at its launch configuration: registers, static shared
// memory, spills and the theoretical occupancy. Appends a spill to `spills`.
std::string resources_json(const emu::LaunchAudit& launch, std::vector<std::string>& spills, double& min_occupancy,
                           int& max_registers) {
  if (!g_resources) return "";
  const audit::KernelResources* r = audit::find_kernel(*g_resources, launch.kernel, "sm_90");
  if (!r) return ", \"sm90\": \"not in the sm_90 report\"";
  if (r->spills()) {
    spills.push_back(audit::normalize_kernel_name(launch.kernel) + ": ptxas spills " +
                     std::to_string(r->spill_store_bytes) + " bytes stored / " + std::to_string(r->spill_load_bytes) +
                     " bytes loaded (sm_90, " + std::to_string(r->registers) + " registers)");
  }
  audit::OccupancyInput in;
  in.block_threads = int(launch.block.x * launch.block.y * launch.block.z);
  in.registers_per_thread = r->registers;
  in.static_shared_bytes = r->shared_bytes;
  in.dynamic_shared_bytes = int64_t(launch.dynamic_shared_bytes);
  const audit::Occupancy o = audit::theoretical_occupancy(in);
  std::string limited;
  for (audit::Limiter l : o.limited_by) limited += std::string(limited.empty() ? "" : "+") + audit::limiter_name(l);
  min_occupancy = std::min(min_occupancy, o.fraction);
  max_registers = std::max(max_registers, r->registers);
  return ", \"registers\": " + std::to_string(r->registers) + ", \"static_shared_bytes\": " +
         std::to_string(r->shared_bytes) + ", \"spill_bytes\": " +
         std::to_string(r->spill_store_bytes + r->spill_load_bytes) + ", \"occupancy\": " + number(o.fraction) +
         ", \"occupancy_limited_by\": " + quote(limited);
}

// Per kernel of the op: launches, grid and block of its first launch, and its sm_90 resources.
std::string kernels_json(const std::vector<emu::LaunchAudit>& launches, std::vector<std::string>& spills,
                         double& min_occupancy, int& max_registers) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<int, const emu::LaunchAudit*>> seen;
  for (const emu::LaunchAudit& l : launches) {
    auto [it, inserted] = seen.emplace(l.kernel, std::make_pair(0, &l));
    if (inserted) order.push_back(l.kernel);
    it->second.first += 1;
  }
  std::string out = "[";
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [count, first] = seen.at(order[i]);
    out += std::string(i ? ", " : "") + "{\"name\": " + quote(order[i]) + ", \"launches\": " + std::to_string(count) +
           ", \"grid\": " + dim3_json(first->grid) + ", \"block\": " + dim3_json(first->block) +
           resources_json(*first, spills, min_occupancy, max_registers) + "}";
  }
  return out + "]";
}

std::string main_sites_json(const emu::LaunchAudit& summed) {
  const double total = double(summed.global_load.requested_bytes + summed.global_store.requested_bytes +
                              summed.global_atomic.requested_bytes);
  std::string out = "[";
  bool first = true;
  for (const emu::SiteTotals* s : audit::main_sites(summed)) {
    out += std::string(first ? "" : ", ") + "{\"site\": " + quote(s->location) + ", \"kind\": " +
           quote(emu::kind_name(s->kind)) + ", \"efficiency\": " + number(s->totals.efficiency()) +
           ", \"share\": " + number(double(s->totals.requested_bytes) / total) +
           ", \"vector_share\": " + number(s->totals.vector_share()) + "}";
    first = false;
  }
  return out + "]";
}

struct GateTally {
  int ops = 0, violations = 0, exempted = 0;
  std::vector<std::string> all;
};

void audit_case(const KernelCase& c, DType dtype, bool has_dtype, const CaseSize& size, CUstream_st* stream,
                GateTally& tally) {
  DeviceArena arena(stream);
  const PreparedCase p = c.prepare(size, dtype, arena);
  cuda::synchronize(stream);
  (void)emu::take_launches();  // nothing of the preparation
  emu::set_enabled(true);
  p.run();
  cuda::synchronize(stream);
  emu::set_enabled(false);
  const std::vector<emu::LaunchAudit> launches = emu::take_launches();

  const std::string dtype_label = has_dtype ? dtype_name(dtype) : "none";
  const emu::LaunchAudit summed = audit::sum_launches(launches, c.name);
  audit::OpClaims claims;
  claims.op = c.name;
  claims.dtype = dtype_label;
  claims.min_dram_bytes = p.min_bytes;
  claims.claims_no_bank_conflicts = p.claims_no_bank_conflicts;
  audit::GateResult gate = audit::evaluate_gate(summed, claims);
  if (launches.empty()) gate.violations.push_back(c.name + " " + dtype_label + ": the op launched no kernel");
  std::vector<std::string> spills;
  double min_occupancy = 1.0;
  int max_registers = 0;
  const std::string kernels = kernels_json(launches, spills, min_occupancy, max_registers);
  for (const std::string& spill : spills) gate.violations.push_back(c.name + " " + dtype_label + ": " + spill);

  const double dram = double(summed.dram_bytes());
  JsonLine("kernel_audit")
      .add("kernel", c.name)
      .add("dtype", dtype_label)
      .add("shape", p.shape)
      .add("launches", (long long)launches.size())
      .add_raw("kernels", kernels)
      .add("requested_load_bytes", (long long)summed.global_load.requested_bytes)
      .add("requested_store_bytes", (long long)summed.global_store.requested_bytes)
      .add("requested_atomic_bytes", (long long)summed.global_atomic.requested_bytes)
      .add("load_efficiency", summed.global_load.efficiency())
      .add("store_efficiency", summed.global_store.efficiency())
      .add_raw("main_sites", main_sites_json(summed))
      .add("dram_read_bytes", (long long)summed.dram_read_bytes)
      .add("dram_write_bytes", (long long)summed.dram_write_bytes)
      .add("dram_bytes", (long long)summed.dram_bytes())
      .add("min_bytes", (long long)p.min_bytes)
      .add("dram_ratio", p.min_bytes ? dram / double(p.min_bytes) : 0.0)
      .add("shared_requested_bytes",
           (long long)(summed.shared_load.requested_bytes + summed.shared_store.requested_bytes))
      .add("bank_conflicts", (long long)summed.bank_conflicts())
      .add("vector_share_load", summed.global_load.vector_share())
      .add("vector_share_store", summed.global_store.vector_share())
      .add("races", (long long)summed.races.size())
      .add_raw("max_registers", g_resources ? std::to_string(max_registers) : "null")
      .add_raw("min_occupancy", g_resources ? number(min_occupancy) : "null")
      .add("flops", p.flops)
      .add("flop_kind", audit::flop_kind_name(p.flop_kind))
      .add("predicted_memory_us", audit::memory_us(dram))
      .add("predicted_compute_us", audit::compute_us(p.flops, p.flop_kind))
      .add("predicted_us", audit::predicted_us(dram, p.flops, p.flop_kind, int64_t(launches.size())))
      .add_raw("violations", string_array(gate.violations))
      .add_raw("exempted", string_array(gate.exempted))
      .print();
  tally.ops += 1;
  tally.violations += int(gate.violations.size());
  tally.exempted += int(gate.exempted.size());
  tally.all.insert(tally.all.end(), gate.violations.begin(), gate.violations.end());
}

// Random token windows on the device: ids and next-token targets [batch, context].
std::pair<Tensor, Tensor> token_batch(int64_t batch, int64_t context, int64_t vocab) {
  const Tensor tokens = randint(0, vocab, {batch, context + 1}, DType::i64);
  std::vector<int64_t> all = tokens.to_vector<int64_t>(), x, y;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < context; ++t) {
      x.push_back(all[size_t(b * (context + 1) + t)]);
      y.push_back(all[size_t(b * (context + 1) + t + 1)]);
    }
  }
  const Device device = Device::cuda(0);
  return {from_vector(x, {batch, context}).to(device), from_vector(y, {batch, context}).to(device)};
}

// One recorded bf16 training step (forward, backward, AdamW) of a small GPT: its launches, their
// summed prediction, the kernels that take most of it, and the GEMMs (cuBLASLt, not recorded), whose
// FLOPs are counted from the model's shapes and predicted at the tensor-core peak (a lower bound).
// Head dimension 64 (2 heads of n_embd 128), one the fused attention kernels take, so the step runs
// them (attention_forward / attention_backward, recorded like every other kernel) as a GPT on a GPU does.
void audit_gpt_step(GateTally& tally) {
  constexpr int64_t kBatch = 8, kContext = 64, kVocab = 256, kLayers = 2, kHeads = 2, kEmbd = 128;
  manual_seed(5);
  auto model = std::make_shared<nn::GPT>(
      nn::GPTConfig().vocab_size(kVocab).context(kContext).n_layer(kLayers).n_head(kHeads).n_embd(kEmbd).dropout(0.0));
  model->to(DType::bf16);
  model->to(Device::cuda(0));
  optim::AdamW optimizer(model->parameters(), optim::AdamWOptions().lr(1e-3));
  const auto [x, y] = token_batch(kBatch, kContext, kVocab);
  auto step = [&] {
    optimizer.zero_grad();
    model->loss(x, y).backward();
    optimizer.step();
  };
  step();  // warm-up: allocations, plans
  cuda::synchronize(0);
  (void)emu::take_launches();
  const RuntimeCounters before = runtime_counters();
  emu::set_enabled(true);
  step();
  cuda::synchronize(0);
  emu::set_enabled(false);
  const RuntimeCounters counted = runtime_counters() - before;
  const std::vector<emu::LaunchAudit> launches = emu::take_launches();

  struct PerKernel {
    int launches = 0;
    double predicted_us = 0, dram_bytes = 0;
  };
  std::map<std::string, PerKernel> per_kernel;
  double total_us = 0, total_dram = 0;
  int64_t races = 0;
  for (const emu::LaunchAudit& l : launches) {
    const double us = audit::predicted_us(double(l.dram_bytes()), 0.0, audit::FlopKind::none);
    PerKernel& k = per_kernel[l.kernel];
    k.launches += 1;
    k.predicted_us += us;
    k.dram_bytes += double(l.dram_bytes());
    total_us += us;
    total_dram += double(l.dram_bytes());
    races += int64_t(l.races.size());
    for (const emu::Race& r : l.races) {  // never exempt: the step's own launch shapes count too
      tally.violations += 1;
      tally.all.push_back("gpt_step: " + l.kernel + ": " + r.hazard + " on " + emu::space_name(r.space) +
                          " memory between thread (" + std::to_string(r.first_thread.x) + ", " +
                          std::to_string(r.first_thread.y) + ", " + std::to_string(r.first_thread.z) + ") at " +
                          r.first_location + " and thread (" + std::to_string(r.second_thread.x) + ", " +
                          std::to_string(r.second_thread.y) + ", " + std::to_string(r.second_thread.z) + ") at " +
                          r.second_location);
    }
  }
  // The step is meant to audit the fused attention; a refusal (the composed path) would go unnoticed.
  int64_t attention_launches = 0;
  for (const auto& [name, k] : per_kernel) {
    if (name.find("attention_forward_kernel") != std::string::npos || name.find("key_tile_kernel") != std::string::npos ||
        name.find("query_tile_kernel") != std::string::npos || name.find("delta_kernel") != std::string::npos) {
      attention_launches += k.launches;
    }
  }
  if (attention_launches == 0) {
    tally.violations += 1;
    tally.all.push_back("gpt_step: no fused attention kernel ran (the step took the composed attention path)");
  }
  std::vector<std::pair<std::string, PerKernel>> ranked(per_kernel.begin(), per_kernel.end());
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.second.predicted_us > b.second.predicted_us; });
  std::string top = "[";
  for (size_t i = 0; i < ranked.size() && i < 8; ++i) {
    top += std::string(i ? ", " : "") + "{\"name\": " + quote(ranked[i].first) +
           ", \"launches\": " + std::to_string(ranked[i].second.launches) +
           ", \"predicted_us\": " + number(ranked[i].second.predicted_us) +
           ", \"dram_bytes\": " + number(ranked[i].second.dram_bytes) + "}";
  }
  top += "]";

  // GEMM FLOPs of the step: forward per layer qkv 6Td^2 + projection 2Td^2 + MLP 16Td^2, the tied LM
  // head 2TdV; the backward twice the forward. Attention's products (scores and values) run in the
  // fused kernels, not in cuBLASLt: their launches are recorded above (at this size their tensor-core
  // time, ~0.01 us per launch, is far below the launch overhead the prediction already counts).
  const double T = double(kBatch * kContext), d = double(kEmbd);
  const double forward = double(kLayers) * 24.0 * T * d * d + 2.0 * T * d * double(kVocab);
  const double gemm_flops = 3.0 * forward;
  const int64_t blas_calls = counted[RuntimeCounter::blas_calls];
  const double gemm_us = audit::compute_us(gemm_flops, audit::FlopKind::bf16_tensor) +
                         double(blas_calls) * audit::H200::launch_overhead_us;
  JsonLine("kernel_audit_gpt_step")
      .add("model", "GPT bf16, " + std::to_string(kLayers) + " layers, " + std::to_string(kHeads) + " heads, n_embd " +
                        std::to_string(kEmbd) + ", vocab " + std::to_string(kVocab) + ", batch " +
                        std::to_string(kBatch) + " x " + std::to_string(kContext) + " tokens; AdamW")
      .add("launches", (long long)launches.size())
      .add("distinct_kernels", (long long)per_kernel.size())
      .add("attention_launches", (long long)attention_launches)
      .add("dram_bytes", total_dram)
      .add("races", (long long)races)
      .add("predicted_us", total_us)
      .add_raw("top_kernels", top)
      .add("blas_calls", (long long)blas_calls)
      .add("gemm_flops", gemm_flops)
      .add("gemm_predicted_us_lower_bound", gemm_us)
      .add("step_predicted_us", total_us + gemm_us)
      .print();
}

}  // namespace

int run_audit(const AuditOptions& options) {
  if (!emu::available()) {
    JsonLine("kernel_audit")
        .add("error", "recording needs the audit build: cmake -S . -B build-audit -DHALFGRAD_CUDA=EMULATED "
                      "-DHALFGRAD_EMU_AUDIT=ON (make test-audit)")
        .print();
    return 2;
  }
  std::vector<audit::KernelResources> resources;
  if (options.resources) {
    try {
      resources = audit::load_kernel_resources(options.resources);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_kernels: --resources %s: %s\n", options.resources, e.what());
      return 2;
    }
    g_resources = &resources;
  }
  // The convolution cases audit the im2col path (cuDNN's kernels are not ours); read once, set first.
  setenv("HALFGRAD_CUDNN", "0", 1);
  CUstream_st* const stream = cuda::compute_stream(0);
  const CaseSize size{options.rows, options.cols};
  const double scale = double(options.rows) * double(options.cols) / (double(kTimedRows) * double(kTimedCols));
  const uint64_t l2 = options.l2_bytes > 0 ? uint64_t(options.l2_bytes)
                                           : std::max<uint64_t>(32, uint64_t(double(emu::kH200L2Bytes) * std::min(scale, 1.0)));
  emu::set_l2_bytes(l2);
  GateTally tally;
  for (const KernelCase& c : kernel_cases()) {
    if (options.only && c.name.find(options.only) == std::string::npos) continue;
    if (c.dtypes.empty()) {
      audit_case(c, DType::f32, false, size, stream, tally);
    } else {
      for (DType dtype : c.dtypes) audit_case(c, dtype, true, size, stream, tally);
    }
  }
  // The GPT step is audited at its own size, not a scale model: the whole L2.
  emu::set_l2_bytes(emu::kH200L2Bytes);
  if (options.gpt_step) audit_gpt_step(tally);
  JsonLine("kernel_audit_gate")
      .add("ops", tally.ops)
      .add("violations", tally.violations)
      .add("exempted", tally.exempted)
      .add("rows", (long long)options.rows)
      .add("cols", (long long)options.cols)
      .add("l2_bytes", (long long)l2)
      .add("resources", options.resources ? options.resources : "none (no sm_90 report given: --resources)")
      .print();
  g_resources = nullptr;
  for (const std::string& v : tally.all) std::fprintf(stderr, "GATE: %s\n", v.c_str());
  return options.gate && tally.violations > 0 ? 1 : 0;
}

}  // namespace hg::bench
