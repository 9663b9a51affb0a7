// The step-time model of the planner (plan/plan.h): the machine's constants in one place, their
// calibration by short runs (medians), and predict_step_time.
//
// Work of one optimizer step on one rank, for a GPT of L blocks, width C, context T, vocabulary V,
// with b sequences per micro-batch and a micro-batches per step (n = b * a * T tokens per rank):
//   matmul parameters   M = 12 L C^2 + V C        (qkv 3C^2, projection C^2, MLP 8C^2; the tied head VC)
//   compute FLOPs       F = (6 M + 14 L T C) n     (forward 2M + 4LTC per token -- QK^T and AV at 2TC
//                                                  each over the full T x T scores, not the causal
//                                                  half, as PaLM's MFU counts; the GEMMs' backward
//                                                  twice their forward, FlashAttention-2's backward
//                                                  ~2.5x its forward (it recomputes the scores):
//                                                  10 L T C; composed attention: 12 L T C in all)
//   recompute FLOPs     R = (24 L C^2 + 4 L T C) n when recompute_every > 0 (GPT checkpoints every
//                                                  block in segments of K, so backward reruns the
//                                                  forward of all L blocks; the head is not rerun)
//   time                each GEMM's FLOPs at flops x its wave-quantisation efficiency for the
//                       micro-batch's M = b T rows (gemm_efficiency below; 1 on the CPU); a micro-batch
//                       takes at least the host's time to issue its ops ((L + 1) x block_seconds)
//   collective bytes    P parameters, g / p bytes per gradient / parameter element, N ranks; a ring
//                       collective moves (N-1)/N of its buffer per rank for reduce-scatter and
//                       all-gather, 2(N-1)/N for all-reduce, at interconnect_bandwidth (bus bandwidth):
//                         stage 0    all-reduce of the gradients (P g)           once per step
//                         stage 1-2  reduce-scatter of the gradients (P g)       once per step
//                                    + all-gather of the updated parameters (P p) after the optimizer
//                         stage 3    reduce-scatter of the gradients (P g)       once per step
//                                    + all-gather of every unit's parameters in its forward and again
//                                    in its backward (2 P p; 3 P p with checkpointing, whose
//                                    backward reruns the forward)                every micro-batch
//   link bytes          at host_link_bandwidth, each way:
//                         activation offload: what the forward saves goes down and comes back up
//                         (inputs: the checkpoint inputs, about ceil(L/K) x b T C x p; all: every
//                         saved activation), per micro-batch, as the memory model counts them
//                         (detail::offloaded_activation_bytes)
//                         optimizer offload: this rank's gradients down (P_r g), parameters up (P_r p)
//   optimizer           AdamW reads theta, the gradient and both moments and writes theta, the moments
//                       and (with a master copy) the rounded parameter: 4 + g + 2s + 4 + 2s (+ p) bytes
//                       per element of this rank's partition P_r (s = 4 for 32-bit state, 1 + 8/2048
//                       for 8-bit state with one fp32 absmax per 2048-element block, on tensors of
//                       at least 4096 elements -- smaller ones stay 32-bit; a half model
//                       without master weights has theta in p bytes), at device_bandwidth, or at
//                       host_adam_bandwidth / min(N, 8) when offloaded (a node's CPU AdamW shared by
//                       its 8 GPUs' ranks; measured over the same bytes); quantised
//                       moments updated on a CPU at cpu_adam8_bandwidth (measured apart: the CPU kernel
//                       searches the code map, so its fewer bytes do not move at the 32-bit rate).
//                       P_r = P at stages -1 and 0, P / N at stages 1-3. fp16 adds the loss
//                       scaler's pass over the gradients (read and write, 2 P_r g bytes).
//
// Overlap model (what the code of halfgrad overlaps, no more):
//   - one micro-batch runs its compute c = max((F + R) / (a flops), the issue floor) on the compute
//     stream (F and R at each GEMM's efficiency, as above) -- on a GPU the host issues kernels ahead of
//     the device; on the CPU device the same cores issue the ops and run them, so there the two add:
//     c = (F + R) / (a flops) + the issue floor, and small micro-batches pay it once each; its activation
//     offload copies o (copy stream, one group ahead) and stage 3's parameter gathers g3 (prefetched one
//     unit ahead) overlap it: a micro-batch takes max(c, o, g3);
//   - the last micro-batch's backward also carries the gradient collectives (bucketed, launched from
//     backward hooks) on the interconnect and, with optimizer offload, the gradients' copies to the host
//     on the link: it takes max(c, o + grads down, g3 + gradient collective);
//   - then, serially: the optimizer (device or CPU), the parameters' copy back to the device (offload),
//     and stages 1-2's all-gather of the updated parameters.
//   total = (a - 1) max(c, o, g3) + max(c, o + grads_down, g3 + grad_collective)
//           + optimizer + params_up + parameter_all_gather
// StepTime's fields hold each kind of work in full (compute, recompute, offload = all link time,
// collectives = all interconnect time, optimizer); total is what does not overlap.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/adamw8bit_math.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"
#include "layers/gpt.h"
#include "plan/memory_internal.h"
#include "plan/plan.h"

namespace hg::plan {

namespace {

// ---- H200 SXM constants: published peaks, derated to what a training step sustains -------------
// Source: NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16/FP16 Tensor Core 1,979 TFLOP/s with
// sparsity = 989.4 dense; FP32 (CUDA cores, halfgrad's f32 GEMM: no TF32 unless HALFGRAD_TF32=1)
// 67 TFLOP/s; HBM3e 4.8 TB/s; NVLink 900 GB/s total per GPU (450 GB/s each way); PCIe Gen5 x16
// 128 GB/s total (64 GB/s each way).
constexpr double kH200Bf16Peak = 989.4e12;
constexpr double kH200Fp32Peak = 67e12;
constexpr double kH200HbmPeak = 4.8e12;
constexpr double kH200NvlinkPeakEachWay = 450e9;
constexpr double kH200PcieEachWay = 64e9;
// Derating (sustained fraction of the peak):
//   GEMM 0.60: large transformer GEMMs reach 70-80% of peak in cuBLASLt, and the step's other kernels
//              (LayerNorm, GELU, attention softmax, the classifier) add time the FLOP count omits;
//              0.6 of peak is a whole-step MFU well-tuned training reaches on Hopper.
//   HBM 0.80: streaming kernels (AdamW) reach 80-90% of the HBM peak.
//   NVLink 0.80: NCCL's all-reduce bus bandwidth on an 8-GPU H100/H200 node is ~360-370 GB/s of the
//              450 GB/s each way.
//   PCIe 0.80: pinned cudaMemcpyAsync reaches ~50-55 GB/s of 64 GB/s each way.
constexpr double kGemmSustained = 0.60;
constexpr double kHbmSustained = 0.80;
constexpr double kNvlinkSustained = 0.80;
constexpr double kPcieSustained = 0.80;
// The host's CPU AdamW (kernels/cpu/adamw_offload.cpp, AVX-512 over all cores of a dual-socket
// server) streams its state at about 40 GB/s: ~1/4 of the host's DRAM bandwidth, as DeepSpeed's
// CPU-Adam reports (~6-7x faster than PyTorch's, 1B parameters updated in ~0.4 s).
constexpr double kHostAdamBytesPerSecond = 40e9;
// The CPU 8-bit AdamW (kernels/cpu/adamw8bit.cpp, AVX-512) updates ~3.5x fewer elements per second than
// the 32-bit one on the development machine (calibrate(cpu) measures both); over its 16 bytes per
// element that is 40e9 / 28 / 3.5 x 16 bytes/s.
// GPUs per node sharing one host's CPU AdamW (an 8-GPU HGX H200 node).
constexpr int kRanksPerNode = 8;
constexpr double kHostAdam8BytesPerSecond = kHostAdamBytesPerSecond / 28 / 3.5 * 16;

// Wave quantisation of a GEMM on the GPU: cuBLASLt covers the [M, N] output with 128 x 128 tiles, one
// per SM at a time, so ceil(tiles / SMs) waves run and the last one may be partly idle:
//   efficiency = tiles / (waves x SMs)        (H200: 132 SMs)
// The CPU's GEMM (cache-blocked, all cores) has no such step: efficiency 1.
constexpr double kH200Sms = 132;
constexpr double kGemmTile = 128;
double gemm_efficiency(const Machine& machine, double m, double n) {
  if (machine.kind == DeviceKind::cpu) return 1.0;
  const double tiles = std::ceil(m / kGemmTile) * std::ceil(n / kGemmTile);
  return tiles / (std::ceil(tiles / kH200Sms) * kH200Sms);
}
// A micro-batch cannot run faster than the host issues its ops (eager dispatch): block_seconds per
// block (~14 ops with their backward: LayerNorm x2, four GEMMs with bias epilogues, attention, GELU,
// residual adds, views), about as much again for the embeddings, the final LayerNorm and the fused
// classifier with its loss, and 1/3 more per checkpointed block (its forward again).
// H200: ~5 us per kernel through halfgrad's dispatch and the CUDA launch, ~42 kernels per block with
// its backward (an assumption until calibrate(cuda) runs on a GPU).
constexpr double kH200BlockSeconds = 42 * 5e-6;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs `work` (which does `units` of something) at least 5 times and until `budget` seconds have
// passed; returns the median rate in units per second (the first run warms caches and allocators and
// is not counted). The median, not the best: what a run on this machine sees, other processes
// included, and robust to the odd run they disturb or leave alone.
template <class Work>
double median_rate(double units, double budget, Work&& work) {
  std::vector<double> rates;
  const auto begin = std::chrono::steady_clock::now();
  for (int run = 0; run < 6 || (seconds_since(begin) < budget && run < 256); ++run) {
    const auto start = std::chrono::steady_clock::now();
    work();
    const double seconds = seconds_since(start);
    if (run > 0) rates.push_back(units / std::max(seconds, 1e-9));
  }
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates[rates.size() / 2];
}

// Bytes AdamW moves per element of its partition (the header's formula) for moments of `state` bytes.
double optimizer_bytes_per_element(const TrainingConfig& config, double state) {
  const bool half = config.precision != Precision::fp32;
  const double param = half ? 2.0 : 4.0;
  const double grad = (half && !config.fp32_grads) ? 2.0 : 4.0;
  const bool master = half && config.master_weights;
  const double theta = (half && !master) ? param : 4.0;
  return theta + grad + 2 * state + theta + 2 * state + (master ? param : 0.0);
}

// The optimizer's time over P_rank parameters. With 8-bit state, tensors of fewer than
// kAdamW8BitMinElements keep 32-bit moments (as bitsandbytes does); the quantised ones move fewer bytes
// at their kernel's rate: the GPU's fused kernel is bandwidth-bound (device_bandwidth), the CPU's
// (the CPU device, or optimizer offload) finds each code by a search over the map and is measured
// apart (cpu_adam8_bandwidth).
// The host's AdamW rates are per node: the ranks of one node (min(world, 8) on 8-GPU nodes) share it.
double optimizer_seconds(const ModelShape& model, const TrainingConfig& config, double P_rank, const Machine& machine,
                         int world) {
  double quantised = 0, total = 0;
  for (const detail::ParamTensor& p : detail::parameter_tensors(model)) {
    total += double(p.numel);
    if (config.state_bits == 8 && p.numel >= kernels::kAdamW8BitMinElements) quantised += double(p.numel);
  }
  const double f8 = total > 0 ? quantised / total : 0.0;
  const double bytes8 = optimizer_bytes_per_element(config, 1.0 + 8.0 / double(kernels::kAdamW8BitBlock));
  const double bytes32 = optimizer_bytes_per_element(config, 4.0);
  const bool on_cpu = machine.kind == DeviceKind::cpu || config.offload_optimizer;
  const double ranks_per_node = machine.kind == DeviceKind::cuda ? double(std::min(world, kRanksPerNode)) : 1.0;
  const double rate32 =
      config.offload_optimizer ? machine.host_adam_bandwidth / ranks_per_node : machine.device_bandwidth;
  const double rate8 = on_cpu ? machine.cpu_adam8_bandwidth / ranks_per_node : machine.device_bandwidth;
  return P_rank * ((1 - f8) * bytes32 / rate32 + (f8 > 0 ? f8 * bytes8 / rate8 : 0.0));
}

// The host's time to issue one block's forward and backward: one-sequence steps of a tiny GPT (T 16,
// C 32) with 1 and with 5 blocks, run in pairs; the median of the pairs' differences over four blocks.
// At the process's thread count and the median, not the best, of the pairs: what a run on this machine
// sees, OpenMP's fork and join included (on a busy machine a descheduled worker holds a parallel
// region's barrier for a scheduler quantum, and small micro-batches then pay that per op). `wait`
// drains the device. The models' initialisation leaves the default generator's state as it was.
template <class Wait>
double block_seconds(const Device& device, double budget, Wait&& wait) {
  const GeneratorState saved = default_generator().state();
  const auto model = [&](int64_t layers) {
    auto gpt =
        std::make_unique<nn::GPT>(nn::GPTConfig().vocab_size(256).context(16).n_layer(layers).n_head(2).n_embd(32));
    gpt->to(device);
    return gpt;
  };
  const std::unique_ptr<nn::GPT> one = model(1), five = model(5);
  default_generator().set_state(saved);
  const Tensor ids = zeros({1, 16}, DType::i64, device);
  const auto step_seconds = [&](nn::GPT& gpt) {
    const auto start = std::chrono::steady_clock::now();
    gpt.loss(ids, ids).backward();
    wait();
    return seconds_since(start);
  };
  step_seconds(*one), step_seconds(*five);  // warm-up: allocator, kernels' first calls
  std::vector<double> differences;
  const auto begin = std::chrono::steady_clock::now();
  while (differences.size() < 5 || (seconds_since(begin) < budget && differences.size() < 1000)) {
    const double a = step_seconds(*one);
    differences.push_back((step_seconds(*five) - a) / 4);
  }
  std::nth_element(differences.begin(), differences.begin() + differences.size() / 2, differences.end());
  return std::max(differences[differences.size() / 2], 0.0);
}

// The CPU's constants measured on the CPU kernels (the CPU device runs them).
Machine calibrate_cpu(double budget) {
  Machine m;
  m.name = "this CPU (calibrated)";
  m.kind = DeviceKind::cpu;
  const double share = budget / 5;
  // GEMM in f32 and in bf16 (which the CPU converts to f32, multiplies and rounds back).
  const int64_t n = 512;
  std::vector<float> a(size_t(n * n), 1.0f), b(size_t(n * n), 0.5f), c(size_t(n * n));
  m.device_flops_fp32 = median_rate(2.0 * n * n * n, share / 2, [&] {
    kernels::cpu::gemm(false, false, n, n, n, 1.0, a.data(), n, b.data(), n, 0.0, c.data(), n, DType::f32);
  });
  std::vector<uint16_t> a16(size_t(n * n), 0x3f80), b16(size_t(n * n), 0x3f00), c16(size_t(n * n));  // bf16 1, 0.5
  m.device_flops = median_rate(2.0 * n * n * n, share / 2, [&] {
    kernels::cpu::gemm(false, false, n, n, n, 1.0, a16.data(), n, b16.data(), n, 0.0, c16.data(), n, DType::bf16);
  });
  // Copy: a 64 MiB memcpy reads and writes each byte (device bandwidth counts both); the "host link"
  // of the CPU device is the same memcpy into host_offload_allocator()'s pool (one way: its size).
  const size_t bytes = size_t(64) << 20;
  std::vector<char> src(bytes, 1), dst(bytes);
  const double copies = median_rate(double(bytes), share, [&] { std::memcpy(dst.data(), src.data(), bytes); });
  m.device_bandwidth = 2 * copies;
  m.host_link_bandwidth = copies;
  // Ranks of one host exchange through shared memory (MPI): each byte is copied in and out.
  m.interconnect_bandwidth = copies / 2;
  // The CPU AdamW over 4M elements: 28 bytes each (master, m, v read and written; f32 gradient read).
  const int64_t elements = int64_t(1) << 22;
  std::vector<float> master(size_t(elements), 0.1f), grad(size_t(elements), 0.01f);
  std::vector<float> m1(size_t(elements), 0.0f), v1(size_t(elements), 0.0f);
  int64_t step = 0;
  m.host_adam_bandwidth = median_rate(28.0 * double(elements), share, [&] {
    kernels::cpu::adamw_offload_step(master.data(), grad.data(), DType::f32, m1.data(), v1.data(), nullptr, DType::f32,
                                     elements, 1e-4, 0.9, 0.999, 1e-8, 0.0, ++step);
  });
  // The 8-bit AdamW over the same elements: 16 bytes each (master read and written, f32 gradient, one
  // code of each moment read and written) and the block scales.
  std::vector<uint8_t> m_codes(size_t(elements), uint8_t(kernels::kAdamW8BitSignedZeroCode)),
      v_codes(size_t(elements), uint8_t(kernels::kAdamW8BitUnsignedZeroCode));
  std::vector<float> m_absmax(size_t(kernels::adamw8bit_blocks(elements)), 0.0f), v_absmax(m_absmax);
  const kernels::QuantizedMoments moments{m_codes.data(), v_codes.data(), m_absmax.data(), v_absmax.data()};
  m.cpu_adam8_bandwidth = median_rate(16.0 * double(elements), share, [&] {
    kernels::cpu::adamw8bit_offload_step(master.data(), grad.data(), DType::f32, moments, nullptr, DType::f32, elements,
                                         1e-4, 0.9, 0.999, 1e-8, 0.0, ++step);
  });
  m.block_seconds = block_seconds(Device::cpu(), share, [] {});
  return m;
}

// A CUDA device's constants: GEMM and copies measured on device 0, the interconnect taken from the
// H200 figures (one process cannot measure a collective).
Machine calibrate_cuda(double budget) {
  HG_CHECK(cuda::is_available(), "[plan] calibrate(cuda): no CUDA device answers (", cuda::unavailable_reason(),
           "); expected a CUDA device, or calibrate(DeviceKind::cpu)");
  Machine m = Machine::h200();
  m.name = cuda::device_name(0) + " (calibrated)";
  const double share = budget / 6;
  const Device device = Device::cuda(0);
  const int64_t n = cuda::is_emulated() ? 128 : 4096;
  const auto gemm_rate = [&](DType dtype) {
    const Tensor a = full({n, n}, 0.5, dtype, device), b = full({n, n}, 0.25, dtype, device);
    return median_rate(2.0 * n * n * n, share, [&] {
      const Tensor c = matmul(a, b);
      cuda::synchronize(0);
    });
  };
  m.device_flops = gemm_rate(DType::bf16);
  m.device_flops_fp32 = gemm_rate(DType::f32);
  const int64_t elements = cuda::is_emulated() ? (int64_t(1) << 20) : (int64_t(1) << 28);
  const Tensor src = full({elements}, 1.0, DType::f32, device), dst = empty({elements}, DType::f32, device);
  const size_t bytes = size_t(elements) * 4;
  m.device_bandwidth = median_rate(2.0 * double(bytes), share, [&] {
    cuda::copy_device_to_device(dst.data_ptr(), src.data_ptr(), bytes, 0);
    cuda::synchronize(0);
  });
  std::vector<char> host(bytes);
  m.host_link_bandwidth =
      median_rate(double(bytes), share, [&] { cuda::copy_to_host(host.data(), src.data_ptr(), bytes, 0); });
  const Machine cpu_side = calibrate_cpu(share);
  m.host_adam_bandwidth = cpu_side.host_adam_bandwidth;
  m.cpu_adam8_bandwidth = cpu_side.cpu_adam8_bandwidth;
  m.block_seconds = block_seconds(device, share, [] { cuda::synchronize(0); });
  return m;
}

}  // namespace

Machine Machine::h200() {
  Machine m;
  m.name = "H200 SXM (published figures, derated)";
  m.kind = DeviceKind::cuda;
  m.device_flops = kH200Bf16Peak * kGemmSustained;
  m.device_flops_fp32 = kH200Fp32Peak * kGemmSustained;
  m.device_bandwidth = kH200HbmPeak * kHbmSustained;
  m.host_link_bandwidth = kH200PcieEachWay * kPcieSustained;
  m.interconnect_bandwidth = kH200NvlinkPeakEachWay * kNvlinkSustained;
  m.host_adam_bandwidth = kHostAdamBytesPerSecond;
  m.cpu_adam8_bandwidth = kHostAdam8BytesPerSecond;
  m.block_seconds = kH200BlockSeconds;
  return m;
}

// Round figures of one core's share of a current x86 server (the order of what calibrate_cpu measures
// here with one thread), fixed so that they are the same in every process: ranks of one run that each
// calibrated would see different noise, and a flip inside the ranking's 1% tie window would make them
// pick different --zero / --grad-accum and hang in their first collective.
Machine Machine::cpu_nominal() {
  Machine m;
  m.name = "CPU (nominal figures, not calibrated)";
  m.kind = DeviceKind::cpu;
  m.device_flops_fp32 = 50e9;                    // 512^3 f32 GEMM
  m.device_flops = 25e9;                         // bf16 GEMM: converted to f32 and back
  m.device_bandwidth = 20e9;                     // memcpy, read + write
  m.host_link_bandwidth = 10e9;                  // memcpy into the host offload pool, one way
  m.interconnect_bandwidth = 5e9;                // ranks of one host through shared memory: copied in and out
  m.host_adam_bandwidth = 10e9;                  // CPU AdamW over its 28 bytes per element
  m.cpu_adam8_bandwidth = 10e9 / 28 / 3.5 * 16;  // 3.5x fewer elements per second, 16 bytes each
  m.block_seconds = 100e-6;                      // issue time per block (eager dispatch)
  return m;
}

Machine Machine::this_cpu() {
  static const Machine cpu = calibrate(DeviceKind::cpu, 1.0);
  return cpu;
}

Machine calibrate(DeviceKind kind, double seconds_budget) {
  HG_CHECK(seconds_budget > 0 && seconds_budget <= 600, "[plan] calibrate: seconds_budget ", seconds_budget,
           " is out of range; expected (0, 600] seconds");
  return kind == DeviceKind::cpu ? calibrate_cpu(seconds_budget) : calibrate_cuda(seconds_budget);
}

StepTime predict_step_time(const ModelShape& model, const TrainingConfig& config, int world, int64_t batch_tokens,
                           const Machine& machine) {
  HG_CHECK(world >= 1, "[plan] predict_step_time: world ", world, " must be >= 1");
  HG_CHECK(config.micro_batch >= 1 && config.grad_accum >= 1, "[plan] predict_step_time: micro_batch ",
           config.micro_batch, " and grad_accum ", config.grad_accum, " must be >= 1");
  HG_CHECK(machine.device_flops > 0 && machine.device_flops_fp32 > 0 && machine.device_bandwidth > 0 &&
               machine.host_link_bandwidth > 0 && machine.interconnect_bandwidth > 0 &&
               machine.host_adam_bandwidth > 0 && machine.cpu_adam8_bandwidth > 0 && machine.block_seconds >= 0,
           "[plan] predict_step_time: machine \"", machine.name,
           "\" has a constant <= 0; expected every rate > 0 (Machine::h200(), this_cpu() or calibrate())");
  (void)batch_tokens;  // the configuration's micro_batch x grad_accum x context are the tokens this rank trains
  const double L = double(model.layers), C = double(model.dim), T = double(model.context), V = double(model.vocab);
  const double a = double(config.grad_accum), b = double(config.micro_batch);
  const double tokens = b * a * T;  // per rank per step
  const bool half = config.precision != Precision::fp32;
  const double param_bytes = half ? 2.0 : 4.0;
  const double grad_bytes = (half && !config.fp32_grads) ? 2.0 : 4.0;
  const double P = double(model.parameters());
  const double N = double(world);
  const int stage = config.zero_stage;
  const double P_rank = (stage >= 1) ? P / N : P;

  StepTime t;
  const double flops = half ? machine.device_flops : machine.device_flops_fp32;
  // Each GEMM's FLOPs at the rate its wave quantisation allows (rows M = b T of one micro-batch).
  const double rows = b * T;
  const double block_gemm_flops = 2 * C * (3 * C) / gemm_efficiency(machine, rows, 3 * C) +  // qkv
                                  2 * C * C / gemm_efficiency(machine, rows, C) +            // projection
                                  2 * C * (4 * C) / gemm_efficiency(machine, rows, 4 * C) +  // MLP up
                                  2 * (4 * C) * C / gemm_efficiency(machine, rows, C);       // MLP down
  const double head_flops = 2 * V * C / gemm_efficiency(machine, rows, V);
  const double attention_flops = 4 * T * C;  // per token per block, forward
  // Backward: GEMMs twice their forward; FlashAttention-2's backward ~2.5x its forward (it recomputes
  // the scores: 14 L T C per token in all), the composed attention's twice (12 L T C).
  const double attention_backward = model.fused_attention ? 2.5 : 2.0;
  t.compute =
      (3 * (L * block_gemm_flops + head_flops) + (1 + attention_backward) * L * attention_flops) * tokens / flops;
  if (config.recompute_every > 0) t.recompute = L * (block_gemm_flops + attention_flops) * tokens / flops;
  // A micro-batch takes at least the host's time to issue its ops (eager dispatch).
  const double launch_floor = (L * (config.recompute_every > 0 ? 4.0 / 3.0 : 1.0) + 1) * machine.block_seconds;

  // Host link, per micro-batch (activations) and per step (optimizer offload).
  // What one micro-batch's forward offloads (one way): the memory model's host bytes of the offloaded
  // activations at the end of the forward.
  const double activation_bytes = config.offload_activations == OffloadMode::off
                                      ? 0.0
                                      : double(detail::offloaded_activation_bytes(model, config));
  const double offload_per_micro = 2 * activation_bytes / machine.host_link_bandwidth;
  const double grads_down = config.offload_optimizer ? P_rank * grad_bytes / machine.host_link_bandwidth : 0;
  const double params_up = config.offload_optimizer ? P_rank * param_bytes / machine.host_link_bandwidth : 0;
  // The CPU device's optimizer state sits in host memory already: nothing crosses a link.
  const bool link = machine.kind == DeviceKind::cuda;
  t.offload = a * offload_per_micro + (link ? grads_down + params_up : 0);

  // Interconnect (ring collectives at bus bandwidth).
  double grad_collective = 0, param_gather = 0, stage3_gathers_per_micro = 0;
  if (world > 1 && stage >= 0) {
    const double ring = (N - 1) / N / machine.interconnect_bandwidth;
    grad_collective = (stage == 0 ? 2.0 : 1.0) * P * grad_bytes * ring;
    if (stage == 1 || stage == 2) param_gather = P * param_bytes * ring;
    // Stage 3 gathers each unit's parameters in its forward and in its backward; with checkpointing
    // also in the backward's rerun of the forward: 3 gathers per micro-batch.
    if (stage == 3) stage3_gathers_per_micro = (config.recompute_every > 0 ? 3 : 2) * P * param_bytes * ring;
  }
  t.collectives = grad_collective + param_gather + a * stage3_gathers_per_micro;

  t.optimizer = optimizer_seconds(model, config, P_rank, machine, world);
  // fp16's loss scaler reads and rewrites this rank's gradients once more (unscale and the inf/NaN
  // check, kernels unscale_and_check) before the update; offloaded, the CPU update folds it in.
  if (config.precision == Precision::fp16 && !config.offload_optimizer)
    t.optimizer += 2 * P_rank * grad_bytes / machine.device_bandwidth;

  const double per_micro_compute = (t.compute + t.recompute) / a;
  const double c = machine.kind == DeviceKind::cpu ? per_micro_compute + launch_floor
                                                   : std::max(per_micro_compute, launch_floor);
  const double down = link ? grads_down : 0, up = link ? params_up : 0;
  t.total = (a - 1) * std::max({c, offload_per_micro, stage3_gathers_per_micro}) +
            std::max({c, offload_per_micro + down, stage3_gathers_per_micro + grad_collective}) + t.optimizer + up +
            param_gather;
  return t;
}

}  // namespace hg::plan
