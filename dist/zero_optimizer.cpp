// ZeroOptimizer (dist/zero_optimizer.h): flat buffers, gradient buckets launched from backward hooks,
// the sharded AdamW update and the parameter all-gather.
#include "dist/zero_optimizer.h"

#include "dist/rank0.h"
#include "dist/zero_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include "engine/autograd.h"
#include "engine/cuda/cuda_context.h"
#include "engine/kernel_dispatch.h"
#include "engine/ops.h"
#include "engine/safetensors.h"
#include "kernels/kernels.h"
#include "kernels/step_kernels.h"

namespace hg::dist {
using layout::overlap;
using layout::rebind;
using layout::round_up;

ZeroOptimizer::ZeroOptimizer(std::vector<Tensor> params, Communicator& comm, ZeroOptions options)
    : comm_(comm), options_(options), lr_(options.adamw().lr()), params_(std::move(params)) {
  HG_CHECK(options_.stage() != 3,
           "[ZeroOptimizer] stage 3 gathers each module's parameters around its forward and "
           "backward, so it needs the model: construct it as ZeroOptimizer(model, comm, options)");
  set_sharded_state(this);
  validate_params();
  adopt_update_rule(std::make_unique<optim::AdamW>(params_, options_.adamw()));
  layout_flat();
  init_state_and_buckets();
}

ZeroOptimizer::ZeroOptimizer(nn::Module& model, Communicator& comm, ZeroOptions options, ShardUnitPolicy units)
    : ZeroOptimizer(nullptr, model, comm, options, std::move(units)) {}

namespace {
std::vector<Tensor> parameters_of(const optim::LocalOptimizer* optimizer) {
  HG_CHECK(optimizer != nullptr, "[ZeroOptimizer] no optimizer to shard (a null pointer)");
  return optimizer->parameters();
}
}  // namespace

ZeroOptimizer::ZeroOptimizer(std::unique_ptr<optim::LocalOptimizer> optimizer, Communicator& comm,
                             ZeroOptions options)
    : comm_(comm), options_(options), lr_(0.0), params_(parameters_of(optimizer.get())) {
  HG_CHECK(options_.stage() != 3,
           "[ZeroOptimizer] stage 3 gathers each module's parameters around its forward and "
           "backward, so it needs the model: construct it as ZeroOptimizer(optimizer, model, comm, options)");
  set_sharded_state(this);
  validate_params();
  adopt_update_rule(std::move(optimizer));
  layout_flat();
  init_state_and_buckets();
}

// (A null optimizer: AdamW with options.adamw(), the constructor above without one.)
ZeroOptimizer::ZeroOptimizer(std::unique_ptr<optim::LocalOptimizer> optimizer, nn::Module& model, Communicator& comm,
                             ZeroOptions options, ShardUnitPolicy units)
    : comm_(comm), options_(options), lr_(0.0), params_(model.parameters()) {
  set_sharded_state(this);
  validate_params();
  adopt_update_rule(optimizer ? std::move(optimizer) : std::make_unique<optim::AdamW>(params_, options_.adamw()));
  if (options_.stage() == 3) {
    HG_CHECK(units != nullptr, "[ZeroOptimizer] stage 3 needs a unit policy (which modules to gather as one)");
    layout_units(model, units);
  } else {
    layout_flat();
  }
  init_state_and_buckets();
}

void ZeroOptimizer::validate_params() {
  const char* who = "[ZeroOptimizer]";
  HG_CHECK(options_.stage() >= 0 && options_.stage() <= 3, who, " stage ", options_.stage(),
           " is not supported: expected 0 (data parallel), 1 (optimizer state sharded), 2 (+ gradients sharded) or "
           "3 (+ parameters sharded)");
  HG_CHECK(options_.bucket_bytes() > 0, who, " bucket_bytes must be > 0, got ", options_.bucket_bytes());
  HG_CHECK(options_.persistence_threshold() >= 0, who, " persistence_threshold must be >= 0, got ",
           options_.persistence_threshold());
  HG_CHECK(!params_.empty(), who, " no parameters to optimize");
  dtype_ = params_[0].dtype();
  device_ = params_[0].device();
  HG_CHECK(dtype_ == DType::f32 || is_half(dtype_), who, " parameters must be f32, f16 or bf16, got ",
           dtype_name(dtype_));
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    HG_CHECK(p.defined() && p.is_leaf() && p.is_contiguous(), who, " parameter ", i,
             " must be a contiguous leaf that requires grad, got ", p.defined() ? p.describe() : std::string("undefined"));
    HG_CHECK(p.requires_grad(), who, " parameter ", i, " (", p.describe(), ") is frozen (requires_grad is off): data "
             "parallelism and ZeRO reduce every parameter's gradient, so they need a model without frozen parameters "
             "(unfreeze it, or keep the frozen part out of the model)");
    HG_CHECK(p.dtype() == dtype_ && p.device() == device_, who, " parameter ", i, " is ", p.describe(),
             " but parameter 0 is ", dtype_name(dtype_), " on ", device_.str(), ": one dtype and device expected");
    HG_CHECK(seen.insert(p.impl()).second, who, " parameter ", i, " appears twice");
    unpadded_offsets_.push_back(total_);
    total_ += p.numel();
  }
}

void ZeroOptimizer::layout_flat() {
  const int world = comm_.world_size();
  const int rank = comm_.rank();
  // One segment: the parameters back to back, the padding at the end (8-bit state: quantised
  // parameters start on a multiple of the block and partitions are whole blocks; zero_layout.h).
  offsets_.assign(params_.size(), 0);
  int64_t at = 0;
  bool any_quantized = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    offsets_[i] = layout::place(at, params_[i].numel(), state_bits());
    any_quantized = any_quantized || layout::quantized_state(params_[i].numel(), state_bits());
    at = offsets_[i] + params_[i].numel();
  }
  const int64_t align = any_quantized ? kernels::kAdamW8BitBlock : kAlignElements;
  padded_ = round_up(std::max<int64_t>(at, 1), int64_t(world) * align);
  const int64_t part = padded_ / world;
  opt_begin_ = options_.stage() == 0 ? 0 : rank * part;
  opt_count_ = options_.stage() == 0 ? padded_ : part;
  owned_ = {OwnedRange{opt_begin_, opt_count_, 0}};

  // Flat parameters (rank 0's values everywhere); the parameters become views of them.
  flat_params_ = zeros({padded_}, dtype_, device_);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor view = flat_params_.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].shape());
    view.copy_(params_[i]);
    rebind(params_[i], view);
    params_[i].impl()->grad = nullptr;
  }
  comm_.broadcast(flat_params_, 0).wait();

  // Gradients: a flat buffer with per-parameter views (stages 0/1), or this rank's shard (stage 2).
  if (options_.stage() < 2) {
    flat_grads_ = zeros({padded_}, dtype_, device_);
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].impl()->grad =
          flat_grads_.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].shape()).impl_ptr();
  } else {
    grad_shard_ = zeros({part}, dtype_, device_);
  }

  // Buckets from the last parameter backwards; bucket 0 also covers the padding at the end.
  const int64_t bucket_elements = std::max<int64_t>(1, options_.bucket_bytes() / int64_t(dtype_size(dtype_)));
  bucket_of_.resize(params_.size());
  for (size_t k = params_.size(); k-- > 0;) {
    if (buckets_.empty() || buckets_.back().end - offsets_[k] > bucket_elements) {
      Bucket b;
      b.end = buckets_.empty() ? padded_ : buckets_.back().begin;
      buckets_.push_back(b);
    }
    Bucket& b = buckets_.back();
    b.begin = offsets_[k];
    b.params.push_back(k);
    bucket_of_[k] = buckets_.size() - 1;
  }
}

void ZeroOptimizer::init_state_and_buckets() {
  // Optimizer state of the owned elements: fp32 moments, and an fp32 master unless the parameters
  // are f32 and live where the update runs.
  state_device_ = options_.offload_optimizer() ? kCPU : device_;
  init_moments();
  if (dtype_ != DType::f32 || options_.offload_optimizer()) {
    master_ = new_state(opt_count_);
    master_.copy_(owned_params());
  }
  // AdamW's device step keeps its count on the device; the others (and offload) count in step_.
  if (fused_adamw() && !options_.offload_optimizer()) step_count_ = zeros({2}, DType::i64, device_);
  allocate_offload_staging();
  for (Bucket& b : buckets_) b.pending = int(b.params.size());
  ready_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i)
    grad_hooks_.push_back(register_post_accumulate_grad_hook(params_[i], [this, i] { on_grad_ready(i); }));
}

Tensor ZeroOptimizer::owned_params() const {
  return options_.stage() == 3 ? param_shard_ : flat_params_.narrow(0, opt_begin_, opt_count_);
}

Tensor ZeroOptimizer::owned_grads() const {
  return options_.stage() < 2 ? flat_grads_.narrow(0, opt_begin_, opt_count_) : grad_shard_;
}

std::vector<ZeroOptimizer::Piece> ZeroOptimizer::pieces_of(const std::vector<OwnedRange>& ranges) const {
  std::vector<Piece> pieces;
  for (const OwnedRange& r : ranges)
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t begin = std::max(offsets_[i], r.begin);
      const int64_t count = overlap(offsets_[i], offsets_[i] + params_[i].numel(), r.begin, r.begin + r.count);
      if (count == 0) continue;
      pieces.push_back(Piece{unpadded_offsets_[i] + begin - offsets_[i], count, r.local + begin - r.begin});
    }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.local < b.local; });
  std::vector<Piece> merged;  // runs contiguous both in the parameters and in the state
  for (const Piece& piece : pieces) {
    if (!merged.empty() && merged.back().unpadded + merged.back().count == piece.unpadded &&
        merged.back().local + merged.back().count == piece.local)
      merged.back().count += piece.count;
    else
      merged.push_back(piece);
  }
  return merged;
}

ZeroOptimizer::~ZeroOptimizer() {
  for (size_t i = 0; i < grad_hooks_.size(); ++i) remove_post_accumulate_grad_hook(params_[i], grad_hooks_[i]);
  for (nn::Module* m : hooked_modules_) m->clear_forward_hooks();
  auto quietly_wait = [](Work& w) {
    try {
      if (w.defined()) w.wait();
    } catch (...) {
    }
  };
  for (Work& w : in_flight_) quietly_wait(w);
  for (Unit& u : units_) {
    quietly_wait(u.gather);
    u.full.impl()->storage->set_on_demand(nullptr);
  }
  drain_offload_copies();
}

void ZeroOptimizer::on_grad_ready(size_t index) {
  if (options_.stage() == 3) return on_unit_grad_ready(index);
  if (!sync_) return;
  mark_ready(index);
  --buckets_[bucket_of_[index]].pending;
  launch_ready_buckets();
}

void ZeroOptimizer::mark_ready(size_t index) {
  HG_CHECK(!ready_[index], "[ZeroOptimizer] the gradient of parameter ", index, " ", params_[index].describe(),
           " was produced twice with gradient sync on before step(): call set_gradient_sync(false) for the "
           "accumulation micro-steps and on only for the last one");
  ready_[index] = true;
  synced_ = false;
  norm_ = -1.0;
}

void ZeroOptimizer::launch_ready_buckets() {
  // In bucket order only, so that every rank issues the same collectives in the same sequence.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) launch(next_bucket_++);
  stream_gradients_to_host(/*wait_for_collectives=*/false);
  release_reduced_buckets();
}

void ZeroOptimizer::release_reduced_buckets() {
  // Stages 2 and 3: a bucket's packed full-size gradients are needed only until its reduce-scatter has
  // completed; freed then (not at the end of backward), they never all exist at once. Host transports
  // (the CPU and emulated devices) also bound them: past kMaxPackedBuckets in flight, backward waits for
  // the oldest, so that the memory stage 2 saves does not depend on how fast the collectives keep up.
  // (On a GPU, NCCL completes them in stream order; there only completed ones are freed here.)
  if (options_.stage() < 2) return;  // (stage 3: the packed gradients of each unit alike)
  constexpr size_t kMaxPackedBuckets = 2;
  const bool host_collectives = !device_.is_cuda() || cuda::is_emulated();
  size_t live = 0;
  for (size_t k = 0; k < in_flight_buffers_.size(); ++k) {  // in_flight_buffers_[k] goes with in_flight_[k]
    if (in_flight_buffers_[k].defined() && in_flight_[k].completed()) in_flight_buffers_[k] = Tensor();
    live += in_flight_buffers_[k].defined();
  }
  for (size_t k = 0; host_collectives && live > kMaxPackedBuckets && k < in_flight_buffers_.size(); ++k) {
    if (!in_flight_buffers_[k].defined()) continue;
    in_flight_[k].wait();
    in_flight_buffers_[k] = Tensor();
    --live;
  }
}

void ZeroOptimizer::launch(size_t index) {
  const Bucket& b = buckets_[index];
  const int64_t count = b.end - b.begin;
  {  // the part of this bucket this rank updates (streamed to the host under offload)
    const int64_t lo = std::max(b.begin, opt_begin_), hi = std::min(b.end, opt_begin_ + opt_count_);
    in_flight_parts_.push_back(OwnedPart{lo - opt_begin_, std::max<int64_t>(0, hi - lo)});
  }
  if (options_.stage() < 2) {
    in_flight_.push_back(comm_.all_reduce(flat_grads_.narrow(0, b.begin, count), ReduceOp::avg));
    return;
  }
  // Stage 2: the bucket's gradients packed in flat order, reduce-scattered into the owners' shards,
  // and the full-size gradients freed.
  Tensor packed = zeros({count}, dtype_, device_);
  for (size_t k : b.params) {
    Tensor g = params_[k].grad();
    if (g.defined()) packed.narrow(0, offsets_[k] - b.begin, params_[k].numel()).copy_(g.reshape({-1}));
    params_[k].impl()->grad = nullptr;
  }
  const int world = comm_.world_size();
  const int64_t part = partition_numel();
  std::vector<int64_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[size_t(r)] = overlap(b.begin, b.end, r * part, (r + 1) * part);
  const int64_t mine_begin = std::max(b.begin, opt_begin_);
  void* recv = counts[size_t(comm_.rank())] > 0 ? grad_shard_.narrow(0, mine_begin - opt_begin_, 1).data_ptr()
                                                : grad_shard_.data_ptr();
  in_flight_.push_back(comm_.reduce_scatter(packed.data_ptr(), recv, counts, dtype_, ReduceOp::avg, device_));
  in_flight_buffers_.push_back(packed);
}

void ZeroOptimizer::finish_gradient_sync() {
  if (synced_) return;
  check_none_frozen();
  HG_CHECK(sync_,
           "[ZeroOptimizer] the gradients have not been communicated: the last backward ran with "
           "set_gradient_sync(false); turn sync on for the last accumulation micro-step");
  // Buckets (stage 3: units) whose parameters received no gradient (unused in this step) still take part.
  if (options_.stage() == 3) {
    for (size_t u = 0; u < units_.size(); ++u)
      if (!units_[u].launched) launch_unit(u);
  } else {
    while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  }
  end_gradient_sync();
  clip_coef_ = 1.0;
  synced_ = true;
}

void ZeroOptimizer::check_none_frozen() const {
  for (size_t i = 0; i < params_.size(); ++i)
    HG_CHECK(params_[i].requires_grad(), "[ZeroOptimizer] parameter ", i, " (", params_[i].describe(),
             ") was frozen after the ZeroOptimizer was built: it reduces and updates every parameter it holds, and "
             "a frozen one would still move (weight decay, momentum); build a new ZeroOptimizer over a model "
             "without the frozen part, or unfreeze it");
}

void ZeroOptimizer::end_gradient_sync() {
  stream_gradients_to_host(/*wait_for_collectives=*/true);
  for (Work& w : in_flight_) w.wait();
  in_flight_.clear();
  in_flight_buffers_.clear();
  in_flight_parts_.clear();
  next_bucket_ = 0;
  for (Bucket& b : buckets_) b.pending = int(b.params.size());
  ready_.assign(params_.size(), false);
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].launched = false;
    release(u);  // one whose parameters did not all receive a gradient is still whole
  }
}

Tensor ZeroOptimizer::grad_range(int64_t global_begin, int64_t count) const {
  if (options_.stage() < 2) return flat_grads_.narrow(0, global_begin, count);
  for (const OwnedRange& r : owned_)
    if (global_begin >= r.begin && global_begin + count <= r.begin + r.count)
      return grad_shard_.narrow(0, r.local + global_begin - r.begin, count);
  HG_CHECK(false, "[ZeroOptimizer] internal: gradient range [", global_begin, ", ", global_begin + count,
           ") is not owned by rank ", comm_.rank());
  return {};
}

double ZeroOptimizer::local_sum_of_squares() {
  // Each element counted once over the ranks: the elements this rank owns (stage 0 has every
  // gradient on every rank, and counts its 1/N share of the flat buffer).
  if (options_.stage() == 0) {
    const int64_t part = partition_numel();
    const Tensor g = grad_range(comm_.rank() * part, part);
    return HG_KERNEL(device_, sum_of_squares, g.data_ptr(), part, dtype_);
  }
  const Tensor g = owned_grads();
  return HG_KERNEL(device_, sum_of_squares, g.data_ptr(), g.numel(), dtype_);
}

double ZeroOptimizer::grad_norm() {
  finish_gradient_sync();
  if (norm_ >= 0.0 || std::isnan(norm_)) return norm_;
  norm_ = std::sqrt(global_sum_of_squares()) * std::abs(grad_scale_);
  return norm_;
}


double ZeroOptimizer::clip_grad_norm(double max_norm) {
  HG_CHECK(std::isfinite(max_norm) && max_norm > 0,
           "[ZeroOptimizer] clip_grad_norm: max_norm must be finite and > 0, "
           "got ",
           max_norm);
  const double norm = grad_norm();
  const double coef = max_norm / (norm + 1e-6);
  if (std::isfinite(norm) && coef < 1.0) {
    if (options_.offload_optimizer()) {
      clip_coef_ *= coef;  // applied by the CPU update: the gradients have left for the host already
    } else {
      NoGradGuard no_grad;
      const Tensor g = options_.stage() < 2 ? flat_grads_ : grad_shard_;
      g.copy_(g * coef);
    }
    norm_ = norm * coef;
  }
  return norm;
}

bool ZeroOptimizer::step() {
  NoGradGuard no_grad;
  if (skip_flag_.defined()) {  // decided on the device (dist/zero_device_step.cpp): no host read
    finish_gradient_sync();
  } else if (!std::isfinite(grad_norm())) {
    norm_ = -1.0;
    return false;
  }
  if (!options_.offload_optimizer()) {
    if (grad_scale_ != 1.0) {
      const Tensor g = owned_grads();
      g.copy_(g * grad_scale_);
    }
    if (fused_adamw())
      update_on_device();
    else
      update_elementwise(owned_params(), owned_grads(), 1.0);
  } else {
    offload_update();
  }
  if (options_.stage() == 3) {
    refresh_units_after_step();
  } else if (options_.stage() >= 1) {
    const int64_t part = partition_numel();
    const std::vector<int64_t> counts(size_t(comm_.world_size()), part);
    // The compute stream waits for the gather (no host wait with NCCL; host transports wait on the host).
    comm_
        .all_gather(flat_params_.narrow(0, opt_begin_, part).data_ptr(), flat_params_.data_ptr(), counts, dtype_,
                    device_)
        .block(device_.is_cuda() ? static_cast<void*>(cuda::compute_stream(device_.index)) : nullptr);
  }
  norm_ = -1.0;
  return true;
}

void ZeroOptimizer::offload_update() {
  // This rank's gradients and updated parameters cross to and from host memory once.
  Tensor grads_host, params_host;
  std::tie(grads_host, params_host) = offload_buffers();
  if (!fused_adamw()) {
    update_elementwise(params_host, grads_host, grad_scale_ * clip_coef_);
    upload_offloaded_params();
    return;
  }
  ++step_;
  const size_t element = dtype_size(dtype_);
  for (const StateSlice& slice : slices_) {
    const double weight_decay = weight_decay_of(slice.param);
    const optim::AdamWOptions o = adamw_options_of(slice.param);
    float* master = master_.data<float>() + slice.local;
    const char* grad = static_cast<const char*>(grads_host.data_ptr()) + slice.local * element;
    char* param = static_cast<char*>(params_host.data_ptr()) + slice.local * element;
    if (slice.quantized) {
      const kernels::QuantizedMoments moments{q8_.exp_avg.data<uint8_t>() + slice.state,
                                              q8_.exp_avg_sq.data<uint8_t>() + slice.state,
                                              q8_.exp_avg_absmax.data<float>() + slice.block,
                                              q8_.exp_avg_sq_absmax.data<float>() + slice.block};
      kernels::cpu::adamw8bit_offload_step(master, grad, dtype_, moments, param, dtype_, slice.count, lr_, o.beta1(),
                                           o.beta2(), o.eps(), weight_decay, step_, grad_scale_ * clip_coef_);
    } else {
      kernels::cpu::adamw_offload_step(master, grad, dtype_, exp_avg_.data<float>() + slice.state,
                                       exp_avg_sq_.data<float>() + slice.state, param, dtype_, slice.count, lr_,
                                       o.beta1(), o.beta2(), o.eps(), weight_decay, step_, grad_scale_ * clip_coef_);
    }
  }
  upload_offloaded_params();
}

void ZeroOptimizer::zero_grad(bool /*set_to_none: the flat buffers stay*/) {
  // A backward whose step never ran (it threw midway, or the step was dropped) left its collectives
  // in flight and its gradients marked as produced: wait for them (every rank launched the same) and
  // start the next backward afresh. After step() there is nothing left to wait for.
  end_gradient_sync();
  if (options_.stage() < 2) {
    flat_grads_.zero_();
  } else {  // stages 2 and 3
    grad_shard_.zero_();
    for (const Tensor& p : params_) p.impl()->grad = nullptr;
  }
  synced_ = false;
  norm_ = -1.0;
}

ModelStateBytes ZeroOptimizer::model_state_bytes() const {
  auto bytes = [](const Tensor& t) { return t.defined() ? t.numel() * int64_t(dtype_size(t.dtype())) : 0; };
  ModelStateBytes b;
  b.params = bytes(flat_params_) + bytes(param_shard_);  // stage 3: + the units that stay whole
  for (const Unit& u : units_)
    if (u.persistent) b.params += bytes(u.full);
  b.grads = bytes(flat_grads_) + bytes(grad_shard_);
  b.optimizer = bytes(master_) + bytes(exp_avg_) + bytes(exp_avg_sq_) + bytes(q8_.exp_avg) + bytes(q8_.exp_avg_sq) +
                bytes(q8_.exp_avg_absmax) + bytes(q8_.exp_avg_sq_absmax);
  for (const auto& [name, buffer] : rule_state_) b.optimizer += bytes(buffer);
  return b;
}

std::vector<std::pair<std::string, Tensor>> ZeroOptimizer::shard_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (master_.defined()) out.emplace_back("master", master_);
  if (!fused_adamw()) {
    out.insert(out.end(), rule_state_.begin(), rule_state_.end());
    return out;
  }
  if (state_bits() == 8) {
    out.emplace_back("exp_avg", q8_.exp_avg);
    out.emplace_back("exp_avg_sq", q8_.exp_avg_sq);
    out.emplace_back("exp_avg_absmax", q8_.exp_avg_absmax);
    out.emplace_back("exp_avg_sq_absmax", q8_.exp_avg_sq_absmax);
    out.emplace_back("exp_avg_fp32", exp_avg_);
    out.emplace_back("exp_avg_sq_fp32", exp_avg_sq_);
    return out;
  }
  out.emplace_back("exp_avg", exp_avg_);
  out.emplace_back("exp_avg_sq", exp_avg_sq_);
  return out;
}

std::vector<std::pair<std::string, Tensor>> ZeroOptimizer::state_tensors() const {
  const std::string shard = "rank" + std::to_string(comm_.rank()) + "-of-" + std::to_string(comm_.world_size()) + ".";
  std::vector<std::pair<std::string, Tensor>> out = shard_buffers();
  for (auto& [name, t] : out) name = shard + name;
  return out;
}

void ZeroOptimizer::load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) {
  HG_CHECK(false, "[ZeroOptimizer] load_state_tensors: got ", entries.size(),
           " entries, but this rank's state is "
           "one shard of a state partitioned over ",
           comm_.world_size(),
           " ranks; restore it with load_state(prefix) "
           "from the files save_state(prefix) wrote, which re-partitions them for any world size and stage");
}

const std::string& ZeroOptimizer::name() const {
  static const std::string kName = "ZeroOptimizer";
  return kName;
}

void ZeroOptimizer::set_lr(double lr) {
  HG_CHECK(std::isfinite(lr) && lr >= 0.0, "[ZeroOptimizer] invalid learning rate ", lr, ": expected lr >= 0");
  lr_ = lr;
  for (optim::ParamGroup& group : groups_) group.lr = lr;
}

bool ZeroOptimizer::unscale_and_check(double scale) {
  HG_CHECK(std::isfinite(scale) && scale > 0.0, "[ZeroOptimizer] unscale_and_check: loss scale ", scale,
           "; expected a finite value > 0");
  set_grad_scale(1.0 / scale);
  return !std::isfinite(grad_norm());
}

std::string ZeroOptimizer::state_summary() const {
  char text[96];
  std::snprintf(text, sizeof text, "zero %d x%d: state %.1f MiB/rank", stage(), comm_.world_size(),
                double(model_state_bytes().total()) / (1024.0 * 1024.0));
  return text;
}

namespace {
std::string shard_path(const std::string& prefix, int rank, int world) {
  return prefix + ".rank" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}
int64_t metadata_int(const safetensors::File& file, const std::string& key, const std::string& path) {
  auto it = file.metadata.find(key);
  HG_CHECK(it != file.metadata.end(), "[ZeroOptimizer] load_state: ", path, " has no '", key,
           "' metadata (not a file written by save_state)");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    HG_CHECK(false, "[ZeroOptimizer] load_state: ", path, " metadata '", key, "' is \"", it->second,
             "\", expected an integer");
  }
  return 0;
}

// The element ranges a shard file holds: "ranges" = "offset:count,..." (or, from older files, one
// "offset" and "count"), each inside [0, numel).
std::vector<std::pair<int64_t, int64_t>> saved_ranges(const safetensors::File& file, const std::string& path,
                                                      int64_t numel) {
  std::vector<std::pair<int64_t, int64_t>> out;
  auto it = file.metadata.find("ranges");
  if (it == file.metadata.end()) {
    out.emplace_back(metadata_int(file, "offset", path), metadata_int(file, "count", path));
  } else {
    const std::string& text = it->second;
    size_t at = 0;
    while (at < text.size()) {
      const size_t comma = std::min(text.find(',', at), text.size());
      const std::string item = text.substr(at, comma - at);
      const size_t colon = item.find(':');
      long long offset = -1, count = -1;
      char extra = 0;
      HG_CHECK(colon != std::string::npos && std::sscanf(item.c_str(), "%lld:%lld%c", &offset, &count, &extra) == 2,
               "[ZeroOptimizer] load_state: ", path, " has a malformed range \"", item,
               "\" in its 'ranges' metadata, "
               "expected offset:count");
      out.emplace_back(offset, count);
      at = comma + 1;
    }
  }
  for (const auto& [offset, count] : out)
    HG_CHECK(offset >= 0 && count >= 0 && offset <= numel && count <= numel - offset,
             "[ZeroOptimizer] load_state: ", path, " holds ", count, " elements from ", offset, ", outside the ", numel,
             " parameters");
  return out;
}
}  // namespace

void ZeroOptimizer::save_state(const std::string& prefix) {
  checked_.reset();  // files about to be (re)written: what check_saved_state read of them is stale
  const int world = comm_.world_size();
  const int rank = comm_.rank();
  // Stage 0 holds everything on every rank; each writes its 1/N share.
  const int64_t part = partition_numel();
  const std::vector<Piece> pieces =
      pieces_of(options_.stage() == 0 ? std::vector<OwnedRange>{{rank * part, part, rank * part}} : owned_);
  std::string ranges;
  for (const Piece& p : pieces) {
    if (!ranges.empty()) ranges += ',';
    ranges += std::to_string(p.unpadded);
    ranges += ':';
    ranges += std::to_string(p.count);
  }
  // A rank that cannot build (memory for the host copies) or write its shard (a full disk, a
  // read-only path) fails every rank alike, with its message: the others would otherwise wait for it
  // at the next collective until the timeout. Nothing in the try is collective.
  std::string error;
  try {
    safetensors::NamedTensors tensors;
    safetensors::Metadata metadata = {{"ranges", ranges},
                                      {"numel", std::to_string(total_)},
                                      {"step", std::to_string(step_count())},
                                      {"world", std::to_string(world)},
                                      {"optimizer", rule_->name()},
                                      {"shard_version", "2"}};  // 2: checksummed (read_shards requires it)
    if (state_bits() == 8) {  // dist/zero_quantized_state.cpp
      tensors = quantized_file_tensors(pieces);
      metadata["state_bits"] = "8";
      metadata["block"] = std::to_string(kernels::kAdamW8BitBlock);
    } else {
      for (const auto& [name, t] : shard_buffers()) {
        std::vector<Tensor> parts;
        for (const Piece& p : pieces) parts.push_back(t.narrow(0, p.local, p.count).to(kCPU));
        tensors.emplace_back(name, parts.empty() ? zeros({0}, DType::f32, kCPU) : cat(parts, 0));
      }
    }
    safetensors::save(shard_path(prefix, rank, world), tensors, metadata);
  } catch (const std::exception& e) {
    error = e.what();
  }
  throw_if_any_failed(&comm_, error);
  // Shards an earlier save at a larger world size left under this prefix would be what load_state
  // finds (it takes the largest N): once every new shard is written, rank 0 removes them.
  int32_t found = world;  // what load_state will read (rank 0's view, broadcast: every rank fails alike)
  if (rank == 0) {
    for (int stale = saved_world_size(prefix); stale > world; stale = saved_world_size(prefix)) {
      for (int r = 0; r < stale; ++r) {
        std::error_code ignored;
        std::filesystem::remove(shard_path(prefix, r, stale), ignored);
      }
      if (saved_world_size(prefix) == stale) break;  // could not remove them: the error below says so
    }
    found = saved_world_size(prefix);
  }
  comm_.broadcast(&found, 1, DType::i32, 0).wait();
  HG_CHECK(found == world, "[ZeroOptimizer] save_state: shards of another world size (", found, ") under ", prefix,
           " could not be removed; load_state would read them instead of these ", world);
}

int ZeroOptimizer::saved_world_size(const std::string& prefix) {
  namespace fs = std::filesystem;
  const fs::path base(prefix);
  const fs::path dir = base.has_parent_path() ? base.parent_path() : fs::path(".");
  const std::string start = base.filename().string() + ".rank0-of-";
  int saved_world = 0;
  std::error_code error;
  if (fs::is_directory(dir, error))
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(start, 0) == 0) saved_world = std::max(saved_world, std::atoi(name.c_str() + start.size()));
    }
  return saved_world;
}

std::vector<ZeroOptimizer::SavedShard> ZeroOptimizer::read_shards(const std::string& prefix, int64_t* step) const {
  const int saved_world = saved_world_size(prefix);
  HG_CHECK(saved_world > 0, "[ZeroOptimizer] load_state: no optimizer shards ", prefix, ".rank0-of-N.safetensors");
  std::vector<SavedShard> shards;
  for (int r = 0; r < saved_world; ++r) {
    SavedShard shard{shard_path(prefix, r, saved_world), {}, {}};
    shard.file = safetensors::load(shard.path);
    const std::string& path = shard.path;
    // Shards of version 2 carry checksums (the tensors' and the header's: a flipped digit in a range is
    // refused by load); one without them has lost them to damage. Older shards (no version) load unverified.
    const auto version = shard.file.metadata.find("shard_version");
    if (version != shard.file.metadata.end()) {
      HG_CHECK(version->second == "2", "[ZeroOptimizer] load_state: ", path, " has shard_version '", version->second,
               "'; this build reads 2 (and shards without a version)");
      HG_CHECK(!safetensors::lacks_promised_checksums(shard.file, "shard_version", "2"),
               "[ZeroOptimizer] load_state: ", path,
               " is a version-2 shard without its checksums (the 'halfgrad.crc32c.' keys are missing or "
               "misspelt); the header is damaged");
    }
    HG_CHECK(metadata_int(shard.file, "numel", path) == total_, "[ZeroOptimizer] load_state: ", path,
             " holds the state of ", metadata_int(shard.file, "numel", path), " parameters but this optimizer has ",
             total_);
    *step = metadata_int(shard.file, "step", path);
    const auto saved_optimizer = shard.file.metadata.find("optimizer");  // none: written before ZeRO took others
    const std::string optimizer = saved_optimizer == shard.file.metadata.end() ? "AdamW" : saved_optimizer->second;
    HG_CHECK(optimizer == rule_->name(), "[ZeroOptimizer] load_state: ", path, " holds the state of ", optimizer,
             " but this optimizer shards ", rule_->name(), "'s: resume with the optimizer the run was saved with");
    shard.ranges = saved_ranges(shard.file, path, total_);
    const int64_t saved_bits = shard.file.metadata.count("state_bits") ? metadata_int(shard.file, "state_bits", path) : 32;
    HG_CHECK(saved_bits == state_bits(), "[ZeroOptimizer] load_state: ", path, " holds ", saved_bits,
             "-bit AdamW moments but this optimizer keeps ", state_bits(),
             "-bit ones (AdamWOptions().state_bits): resume with the state width the run was saved with");
    if (state_bits() == 8) {
      check_quantized_shard(shard.file, path, shard.ranges);
      shards.push_back(std::move(shard));
      continue;
    }
    int64_t needed = 0;
    for (const auto& range : shard.ranges) needed += range.second;
    for (const auto& [name, t] : shard_buffers()) {
      const Tensor* tensor = shard.file.find(name);
      HG_CHECK(tensor || name == "master", "[ZeroOptimizer] load_state: ", path, " has no '", name, "'");
      HG_CHECK(!tensor || (tensor->dim() == 1 && tensor->numel() >= needed), "[ZeroOptimizer] load_state: ", path, " '",
               name, "' is ", tensor ? tensor->describe() : std::string(), " but its ranges need ", needed,
               " elements");
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

void ZeroOptimizer::check_saved_state(const std::string& prefix) const {
  CheckedShards checked{prefix, 0, {}};
  checked.shards = read_shards(prefix, &checked.step);
  checked_ = std::move(checked);
}

void ZeroOptimizer::load_state(const std::string& prefix) {
  // Every file is read and checked before any state changes: a missing or malformed shard leaves the
  // optimizer as it was (every rank reads every file, so every rank refuses alike).
  int64_t step = 0;
  std::vector<SavedShard> shards;
  if (checked_ && checked_->prefix == prefix) {  // just read and verified by check_saved_state
    step = checked_->step;
    shards = std::move(checked_->shards);
  } else {
    shards = read_shards(prefix, &step);
  }
  checked_.reset();
  const std::vector<Piece> mine = pieces_of(owned_);
  for (const SavedShard& shard : shards) {
    if (state_bits() == 8) {  // dist/zero_quantized_state.cpp
      load_quantized_shard(shard.file, shard.ranges);
      continue;
    }
    int64_t at = 0;  // where the saved range starts in the file's tensors
    for (const auto& [offset, count] : shard.ranges) {
      for (const Piece& p : mine) {
        const int64_t lo = std::max(offset, p.unpadded), hi = std::min(offset + count, p.unpadded + p.count);
        if (hi <= lo) continue;
        for (const auto& [name, t] : shard_buffers()) {
          // A master the files lack keeps the copy of the loaded parameters.
          if (const Tensor* tensor = shard.file.find(name))
            t.narrow(0, p.local + lo - p.unpadded, hi - lo).copy_(tensor->narrow(0, at + lo - offset, hi - lo));
        }
      }
      at += count;
    }
  }
  step_ = step;
  if (!fused_adamw()) bind_slice_states();  // the loaded buffers, from the next update on
  if (step_count_.defined()) {  // both slots: whichever the next update reads
    Tensor count = zeros({2}, DType::i64, kCPU);
    count.data<int64_t>()[0] = count.data<int64_t>()[1] = step;
    step_count_.copy_(count.to(device_));
  }
  comm_.barrier().wait();
}

}  // namespace hg::dist
