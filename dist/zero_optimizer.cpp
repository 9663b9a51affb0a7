// ZeroOptimizer (dist/zero_optimizer.h): flat buffers, gradient buckets launched from backward hooks,
// the sharded AdamW update and the parameter all-gather.
#include "dist/zero_optimizer.h"

#include <algorithm>
#include <cmath>
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

namespace hg::dist {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The overlap of [begin, end) with [lo, hi), as a count (0 when disjoint).
int64_t overlap(int64_t begin, int64_t end, int64_t lo, int64_t hi) {
  return std::max<int64_t>(0, std::min(end, hi) - std::max(begin, lo));
}

// Points `param` (same TensorImpl, so every handle sees it) at `view`'s memory.
void rebind(const Tensor& param, const Tensor& view) {
  TensorImpl* impl = param.impl();
  impl->storage = view.impl()->storage;
  impl->offset = view.offset();
  impl->strides = view.strides();
}

}  // namespace

ZeroOptimizer::ZeroOptimizer(std::vector<Tensor> params, Communicator& comm, ZeroOptions options)
    : comm_(comm), options_(options), lr_(options.adamw().lr()), params_(std::move(params)) {
  const char* who = "[ZeroOptimizer]";
  HG_CHECK(options_.stage() >= 0 && options_.stage() <= 2, who, " stage ", options_.stage(),
           " is not supported: expected 0 (data parallel), 1 (optimizer state sharded) or 2 (+ gradients sharded)");
  HG_CHECK(options_.bucket_bytes() > 0, who, " bucket_bytes must be > 0, got ", options_.bucket_bytes());
  HG_CHECK(!params_.empty(), who, " no parameters to optimize");
  { optim::AdamW validate({params_[0]}, options_.adamw()); }  // the AdamW options' own checks
  dtype_ = params_[0].dtype();
  device_ = params_[0].device();
  HG_CHECK(dtype_ == DType::f32 || is_half(dtype_), who, " parameters must be f32, f16 or bf16, got ",
           dtype_name(dtype_));
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    HG_CHECK(p.defined() && p.is_leaf() && p.requires_grad() && p.is_contiguous(), who, " parameter ", i,
             " must be a contiguous leaf that requires grad, got ", p.defined() ? p.describe() : std::string("undefined"));
    HG_CHECK(p.dtype() == dtype_ && p.device() == device_, who, " parameter ", i, " is ", p.describe(),
             " but parameter 0 is ", dtype_name(dtype_), " on ", device_.str(), ": one dtype and device expected");
    HG_CHECK(seen.insert(p.impl()).second, who, " parameter ", i, " appears twice");
    offsets_.push_back(total_);
    total_ += p.numel();
  }
  const int world = comm_.world_size();
  const int rank = comm_.rank();
  padded_ = round_up(std::max<int64_t>(total_, 1), int64_t(world) * kAlignElements);
  const int64_t part = padded_ / world;
  opt_begin_ = options_.stage() == 0 ? 0 : rank * part;
  opt_count_ = options_.stage() == 0 ? padded_ : part;

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
      params_[i].impl()->grad = flat_grads_.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].shape()).impl_ptr();
  } else {
    grad_shard_ = zeros({part}, dtype_, device_);
  }

  // Optimizer state of the partition: fp32 moments, and an fp32 master unless the parameters are
  // f32 and live where the update runs.
  state_device_ = options_.offload_optimizer() ? kCPU : device_;
  exp_avg_ = new_state(opt_count_);
  exp_avg_sq_ = new_state(opt_count_);
  if (dtype_ != DType::f32 || options_.offload_optimizer()) {
    master_ = new_state(opt_count_);
    master_.copy_(flat_params_.narrow(0, opt_begin_, opt_count_));
  }
  allocate_offload_staging();

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
  for (Bucket& b : buckets_) b.pending = int(b.params.size());
  ready_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i)
    register_post_accumulate_grad_hook(params_[i], [this, i] { on_grad_ready(i); });
}

ZeroOptimizer::~ZeroOptimizer() {
  for (const Tensor& p : params_) clear_post_accumulate_grad_hooks(p);
  for (Work& w : in_flight_) {
    try {
      w.wait();
    } catch (...) {
    }
  }
  drain_offload_copies();
}

void ZeroOptimizer::on_grad_ready(size_t index) {
  if (!sync_) return;
  HG_CHECK(!ready_[index], "[ZeroOptimizer] the gradient of parameter ", index, " ", params_[index].describe(),
           " was produced twice with gradient sync on before step(): call set_gradient_sync(false) for the "
           "accumulation micro-steps and on only for the last one");
  ready_[index] = true;
  synced_ = false;
  norm_ = -1.0;
  --buckets_[bucket_of_[index]].pending;
  launch_ready_buckets();
}

void ZeroOptimizer::launch_ready_buckets() {
  // In bucket order only, so that every rank issues the same collectives in the same sequence.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) launch(next_bucket_++);
  stream_gradients_to_host(/*wait_for_collectives=*/false);
  release_reduced_buckets();
}

void ZeroOptimizer::release_reduced_buckets() {
  // Stage 2: a bucket's packed full-size gradients are needed only until its reduce-scatter has
  // completed; freed then (not at the end of backward), they never all exist at once. Host transports
  // (the CPU and emulated devices) also bound them: past kMaxPackedBuckets in flight, backward waits for
  // the oldest, so that the memory stage 2 saves does not depend on how fast the collectives keep up.
  // (On a GPU, NCCL completes them in stream order; there only completed ones are freed here.)
  if (options_.stage() != 2) return;
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
  in_flight_.push_back(
      comm_.reduce_scatter(packed.data_ptr(), recv, counts, dtype_, ReduceOp::avg, device_));
  in_flight_buffers_.push_back(packed);
}

void ZeroOptimizer::finish_gradient_sync() {
  if (synced_) return;
  HG_CHECK(sync_, "[ZeroOptimizer] the gradients have not been communicated: the last backward ran with "
           "set_gradient_sync(false); turn sync on for the last accumulation micro-step");
  // Buckets whose parameters received no gradient (unused in this step) still take part.
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  stream_gradients_to_host(/*wait_for_collectives=*/true);
  for (Work& w : in_flight_) w.wait();
  in_flight_.clear();
  in_flight_buffers_.clear();
  next_bucket_ = 0;
  for (Bucket& b : buckets_) b.pending = int(b.params.size());
  ready_.assign(params_.size(), false);
  clip_coef_ = 1.0;
  synced_ = true;
}

Tensor ZeroOptimizer::grad_range(int64_t global_begin, int64_t count) const {
  if (options_.stage() < 2) return flat_grads_.narrow(0, global_begin, count);
  return grad_shard_.narrow(0, global_begin - opt_begin_, count);
}

double ZeroOptimizer::local_sum_of_squares() {
  // Each element counted once over the ranks: this rank's partition (stage 0 has every gradient on
  // every rank, and counts its shard_of share).
  const int64_t part = partition_numel();
  const Tensor g = grad_range(comm_.rank() * part, part);
  return HG_KERNEL(device_, sum_of_squares, g.data_ptr(), part, dtype_);
}

double ZeroOptimizer::grad_norm() {
  finish_gradient_sync();
  if (norm_ >= 0.0 || std::isnan(norm_)) return norm_;
  double sum = local_sum_of_squares();
  comm_.all_reduce(&sum, 1, DType::f64, ReduceOp::sum).wait();
  norm_ = std::sqrt(sum) * std::abs(grad_scale_);
  return norm_;
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  HG_CHECK(std::isfinite(max_norm) && max_norm > 0, "[ZeroOptimizer] clip_grad_norm: max_norm must be finite and > 0, "
           "got ", max_norm);
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
  if (!std::isfinite(grad_norm())) {
    norm_ = -1.0;
    return false;
  }
  ++step_;
  const optim::AdamWOptions& o = options_.adamw();
  const int64_t opt_end = opt_begin_ + opt_count_;
  // Offload: this rank's gradients and updated parameters cross to and from host memory once.
  Tensor grads_host, params_host;
  if (options_.offload_optimizer()) {
    std::tie(grads_host, params_host) = offload_buffers();
  } else if (grad_scale_ != 1.0) {
    const Tensor g = grad_range(opt_begin_, opt_count_);
    g.copy_(g * grad_scale_);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t begin = std::max(offsets_[i], opt_begin_);
    const int64_t count = overlap(offsets_[i], offsets_[i] + params_[i].numel(), opt_begin_, opt_end);
    if (count == 0) continue;
    const double weight_decay = o.decay_only_matrices() && params_[i].dim() < 2 ? 0.0 : o.weight_decay();
    const int64_t local = begin - opt_begin_;
    auto* m = exp_avg_.data<float>() + local;
    auto* v = exp_avg_sq_.data<float>() + local;
    float* master = master_.defined() ? master_.data<float>() + local : nullptr;
    if (options_.offload_optimizer()) {
      const size_t element = dtype_size(dtype_);
      kernels::cpu::adamw_offload_step(master, static_cast<const char*>(grads_host.data_ptr()) + local * element, dtype_,
                                       m, v, static_cast<char*>(params_host.data_ptr()) + local * element, dtype_,
                                       count, lr_, o.beta1(), o.beta2(), o.eps(), weight_decay, step_,
                                       grad_scale_ * clip_coef_);
    } else {
      HG_KERNEL(device_, adamw_step, flat_params_.narrow(0, begin, count).data_ptr(), master,
                grad_range(begin, count).data_ptr(), m, v, count, lr_, o.beta1(), o.beta2(), o.eps(), weight_decay,
                step_, dtype_);
    }
  }
  if (options_.offload_optimizer()) upload_offloaded_params();
  if (options_.stage() >= 1) {
    const int64_t part = partition_numel();
    const std::vector<int64_t> counts(size_t(comm_.world_size()), part);
    comm_.all_gather(flat_params_.narrow(0, opt_begin_, part).data_ptr(), flat_params_.data_ptr(), counts, dtype_,
                     device_).wait();
  }
  norm_ = -1.0;
  return true;
}

void ZeroOptimizer::zero_grad() {
  if (options_.stage() < 2) {
    flat_grads_.zero_();
  } else {
    grad_shard_.zero_();
    for (const Tensor& p : params_) p.impl()->grad = nullptr;
  }
  synced_ = false;
  norm_ = -1.0;
}


ModelStateBytes ZeroOptimizer::model_state_bytes() const {
  auto bytes = [](const Tensor& t) { return t.defined() ? t.numel() * int64_t(dtype_size(t.dtype())) : 0; };
  ModelStateBytes b;
  b.params = bytes(flat_params_);
  b.grads = bytes(flat_grads_) + bytes(grad_shard_);
  b.optimizer = bytes(master_) + bytes(exp_avg_) + bytes(exp_avg_sq_);
  return b;
}

std::vector<std::pair<std::string, Tensor>> ZeroOptimizer::state_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  if (master_.defined()) out.emplace_back("master", master_);
  out.emplace_back("exp_avg", exp_avg_);
  out.emplace_back("exp_avg_sq", exp_avg_sq_);
  return out;
}

namespace {
std::string shard_path(const std::string& prefix, int rank, int world) {
  return prefix + ".rank" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}
int64_t metadata_int(const safetensors::File& file, const std::string& key, const std::string& path) {
  auto it = file.metadata.find(key);
  HG_CHECK(it != file.metadata.end(), "[ZeroOptimizer] load_state: ", path, " has no '", key,
           "' metadata (not a file written by save_state)");
  return std::stoll(it->second);
}
}  // namespace

void ZeroOptimizer::save_state(const std::string& prefix) {
  const int world = comm_.world_size();
  const int rank = comm_.rank();
  const int64_t part = partition_numel();
  const int64_t begin = std::min(rank * part, total_);
  const int64_t count = std::min((rank + 1) * part, total_) - begin;
  safetensors::NamedTensors tensors;
  for (const auto& [name, t] : state_tensors())
    tensors.emplace_back(name, t.narrow(0, begin - opt_begin_, count).to(kCPU));
  safetensors::save(shard_path(prefix, rank, world), tensors,
                    {{"offset", std::to_string(begin)}, {"count", std::to_string(count)},
                     {"numel", std::to_string(total_)}, {"step", std::to_string(step_)},
                     {"world", std::to_string(world)}});
  comm_.barrier().wait();
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

void ZeroOptimizer::load_state(const std::string& prefix) {
  const int saved_world = saved_world_size(prefix);
  HG_CHECK(saved_world > 0, "[ZeroOptimizer] load_state: no optimizer shards ", prefix, ".rank0-of-N.safetensors");
  const int64_t my_end = std::min(opt_begin_ + opt_count_, total_);
  for (int r = 0; r < saved_world; ++r) {
    const std::string path = shard_path(prefix, r, saved_world);
    const safetensors::File file = safetensors::load(path);
    HG_CHECK(metadata_int(file, "numel", path) == total_, "[ZeroOptimizer] load_state: ", path, " holds the state of ",
             metadata_int(file, "numel", path), " parameters but this optimizer has ", total_);
    const int64_t offset = metadata_int(file, "offset", path);
    const int64_t count = metadata_int(file, "count", path);
    step_ = metadata_int(file, "step", path);
    const int64_t lo = std::max(offset, opt_begin_), hi = std::min(offset + count, my_end);
    if (hi <= lo) continue;
    for (const auto& [name, t] : state_tensors()) {
      const Tensor* saved = file.find(name);
      if (!saved) {
        HG_CHECK(name == "master", "[ZeroOptimizer] load_state: ", path, " has no '", name, "'");
        continue;  // keeps the copy of the loaded parameters
      }
      t.narrow(0, lo - opt_begin_, hi - lo).copy_(saved->narrow(0, lo - offset, hi - lo));
    }
  }
  comm_.barrier().wait();
}

}  // namespace hg::dist
