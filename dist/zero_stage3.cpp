// ZeroOptimizer stage 3 (dist/zero_optimizer.h): the per-unit layout, gathering a unit around its
// forward and backward (with prefetch), releasing it, and reduce-scattering its gradients.
//
// Waiting for a gather: the compute stream waits for the all-gather's event (Work::block), the host
// never does (with a host transport -- CPU, or the emulated device without NCCL -- block() is a host
// wait, as the data is moved by the host). Memory: a unit's gathered storage is written on the
// communication stream and may be released (back to the caching allocator) before the host knows the
// gather completed, and the packed gradients a reduce-scatter reads likewise: both blocks are marked
// with Communicator::record_stream, so the allocator reuses them only after the collective.
#include <functional>
#include <map>

#include "dist/zero_layout.h"
#include "dist/zero_optimizer.h"
#include "engine/autograd.h"
#include "engine/cuda/cuda_context.h"
#include "engine/storage.h"
#include "layers/transformer.h"

namespace hg::dist {
using layout::rebind;
using layout::round_up;

bool transformer_blocks(const nn::Module& module) { return dynamic_cast<const nn::Block*>(&module) != nullptr; }

namespace {
Storage& storage_of(const Tensor& t) { return *t.impl()->storage; }

// Orders the device's compute stream after a collective (NCCL: a stream wait; host transports and
// CPU buffers: the host waits, the data being moved by the host).
void consume_on_compute_stream(Work& work, const Device& device) {
  work.block(device.is_cuda() ? static_cast<void*>(cuda::compute_stream(device.index)) : nullptr);
}
}  // namespace

void ZeroOptimizer::layout_units(nn::Module& model, const ShardUnitPolicy& policy) {
  const int world = comm_.world_size();
  const int rank = comm_.rank();

  // Which unit each parameter joins: the persistent unit when it is small; else the first module on
  // its path from the root that the policy picks; else (and when two units share it) the root unit.
  std::map<const TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < params_.size(); ++i) index_of[params_[i].impl()] = i;
  struct Draft {
    const nn::Module* module;
    std::vector<size_t> params;
    bool persistent;
  };
  std::vector<Draft> drafts{{&model, {}, false}};
  root_module_ = &model;
  std::vector<size_t> owner(params_.size(), 0);
  std::vector<bool> claimed(params_.size(), false);
  std::function<void(const nn::Module&)> visit = [&](const nn::Module& m) {
    for (const auto& [name, child] : m.children()) {
      if (!policy(*child)) {
        visit(*child);
        continue;
      }
      drafts.push_back({child.get(), {}, false});
      for (const Tensor& p : child->parameters()) {
        const size_t i = index_of.at(p.impl());
        owner[i] = claimed[i] ? 0 : drafts.size() - 1;
        claimed[i] = true;
      }
    }
  };
  visit(model);
  drafts.push_back({nullptr, {}, true});
  for (size_t i = 0; i < params_.size(); ++i)
    drafts[params_[i].numel() <= options_.persistence_threshold() ? drafts.size() - 1 : owner[i]].params.push_back(i);
  for (const Draft& d : drafts)  // before any parameter moves: a refused model is left as it was
    HG_CHECK(d.persistent || d.params.empty() || !d.module->has_forward_hooks(),
             "[ZeroOptimizer] stage 3: a module "
             "already has forward hooks (is another stage-3 ZeroOptimizer over this model alive?)");

  // Units back to back in the global flat space, each padded to N equal shards of aligned length.
  offsets_.assign(params_.size(), 0);
  unit_of_.assign(params_.size(), 0);
  bucket_of_.assign(params_.size(), 0);
  int64_t begin = 0, local = 0;
  for (const Draft& d : drafts) {
    if (d.params.empty()) continue;
    Unit u;
    u.module = d.persistent ? nullptr : d.module;
    u.persistent = d.persistent;
    u.params = d.params;
    u.begin = begin;
    int64_t numel = 0;  // (8-bit state: quantised parameters on a block boundary of the unit, and the
    bool any_quantized = false;  // unit's shards whole blocks; zero_layout.h)
    for (size_t i : d.params) {
      numel = layout::place(numel, params_[i].numel(), state_bits());
      any_quantized = any_quantized || layout::quantized_state(params_[i].numel(), state_bits());
      offsets_[i] = begin + numel;
      unit_of_[i] = bucket_of_[i] = units_.size();
      numel += params_[i].numel();
    }
    const int64_t align = any_quantized ? kernels::kAdamW8BitBlock : kAlignElements;
    u.padded = round_up(std::max<int64_t>(numel, 1), int64_t(world) * align);
    u.shard_local = local;
    const int64_t part = u.padded / world;
    owned_.push_back(OwnedRange{u.begin + rank * part, part, local});
    begin += u.padded;
    local += part;
    units_.push_back(std::move(u));
  }
  padded_ = begin;
  opt_begin_ = 0;
  opt_count_ = local;
  param_shard_ = empty({opt_count_}, dtype_, device_);
  grad_shard_ = zeros({opt_count_}, dtype_, device_);

  // Each unit whole once (rank 0's values everywhere), this rank's shard kept; then released.
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = units_[k];
    u.full = zeros({u.padded}, dtype_, device_);
    for (size_t i : u.params) {
      Tensor view = u.full.narrow(0, offsets_[i] - u.begin, params_[i].numel()).view(params_[i].shape());
      view.copy_(params_[i]);
      rebind(params_[i], view);
      params_[i].impl()->grad = nullptr;
    }
    comm_.broadcast(u.full, 0).wait();
    const int64_t part = u.padded / world;
    param_shard_.narrow(0, u.shard_local, part).copy_(u.full.narrow(0, rank * part, part));
    Bucket b;
    b.begin = u.begin;
    b.end = u.begin + u.padded;
    b.params = u.params;
    buckets_.push_back(b);
    if (u.persistent) continue;
    storage_of(u.full).set_on_demand([this, k] {
      // A backward unpacked one of the unit's saved parameters: bring it back, gather the one before.
      ensure_gathered(k);
      prefetch_after(k, -1);
    });
    storage_of(u.full).release_bytes();
    nn::Module* module = const_cast<nn::Module*>(u.module);
    module->set_forward_hooks([this, k] { before_forward(k); }, [this, k] { after_forward(k); });
    hooked_modules_.push_back(module);
  }
}

void ZeroOptimizer::before_forward(size_t unit) {
  Unit& u = units_[unit];
  if (u.depth > 0) {  // a nested scope of the same module (GPT::loss calling GPT::forward)
    ++u.depth;
    return;
  }
  const bool backward = backward_in_progress();  // a checkpointed region recomputing its forward
  if (!backward) {
    buckets_[unit].pending = int(u.params.size());
    if (std::find(forward_order_.begin(), forward_order_.end(), unit) == forward_order_.end())
      forward_order_.push_back(unit);
  }
  ensure_gathered(unit);
  u.depth = 1;
  prefetch_after(unit, backward ? -1 : +1);
}

void ZeroOptimizer::after_forward(size_t unit) {
  Unit& u = units_[unit];
  // Inside backward the recomputed forward's graph is about to need the parameters: they are
  // released once the unit's gradients are complete instead.
  if (--u.depth == 0 && !backward_in_progress()) release(unit);
}

void ZeroOptimizer::start_gather(size_t unit) {
  Unit& u = units_[unit];
  Storage& storage = storage_of(u.full);
  storage.acquire_bytes();
  const int64_t part = u.padded / comm_.world_size();
  u.gather = comm_.all_gather(param_shard_.narrow(0, u.shard_local, part).data_ptr(), storage.data(),
                              std::vector<int64_t>(size_t(comm_.world_size()), part), dtype_, device_);
  comm_.record_stream(storage.data(), device_);  // released before the gather completed: reused after it
  u.gathering = true;
}

void ZeroOptimizer::ensure_gathered(size_t unit) {
  Unit& u = units_[unit];
  Storage& storage = storage_of(u.full);
  if (storage.ready()) return;
  if (!u.gathering) start_gather(unit);
  u.gathering = false;
  consume_on_compute_stream(u.gather, device_);  // no host wait: compute reading the unit is ordered after it
  storage.set_ready(true);
}

void ZeroOptimizer::prefetch_after(size_t unit, int direction) {
  // The next unit of the recorded forward order (direction +1), or the one before it (-1, backward).
  // Only the root unit, whose forward encloses all the others, wraps around: the backward begins
  // with it (GPT's lm_head) and goes on with the last block. Past the last unit of a forward nothing
  // is gathered (it would stay whole, unused, through the backward).
  const size_t n = forward_order_.size();
  if (!options_.prefetch() || n < 2) return;
  const auto at = std::find(forward_order_.begin(), forward_order_.end(), unit);
  if (at == forward_order_.end()) return;
  const size_t position = size_t(at - forward_order_.begin());
  size_t next_position = 0;
  if (direction > 0) {
    if (position + 1 == n) return;
    next_position = position + 1;
  } else if (position == 0) {
    if (units_[unit].module != root_module_) return;
    next_position = n - 1;
  } else {
    next_position = position - 1;
  }
  const size_t next = forward_order_[next_position];
  const Unit& u = units_[next];
  if (u.gathering || storage_of(u.full).ready()) return;
  start_gather(next);
}

void ZeroOptimizer::release(size_t unit) {
  Unit& u = units_[unit];
  if (u.persistent || u.holds > 0 || u.depth > 0 || u.gathering) return;
  Storage& storage = storage_of(u.full);
  if (!storage.released()) storage.release_bytes();
}

void ZeroOptimizer::on_unit_grad_ready(size_t index) {
  if (sync_) mark_ready(index);
  const size_t unit = unit_of_[index];
  // The persistent unit is never released, and no forward of its own restarts its count (its
  // parameters belong to any module; one unused in a micro-step would leave the count short and a
  // later backward would launch it before its other parameters' gradients arrived): it is
  // reduce-scattered by finish_gradient_sync(), with any other unit that is not complete.
  if (units_[unit].persistent) return;
  Bucket& b = buckets_[unit];
  if (--b.pending > 0) return;
  // Every parameter of the unit has its gradient of this backward: no node needs the unit anymore.
  b.pending = int(b.params.size());
  if (sync_) {
    launch_unit(unit);
    stream_gradients_to_host(false);
    release_reduced_buckets();
  }
  release(unit);
}

void ZeroOptimizer::launch_unit(size_t unit) {
  // The unit's gradients packed in flat order, reduce-scattered (average) into each rank's shard,
  // and the full-size gradients freed.
  Unit& u = units_[unit];
  HG_CHECK(!u.launched, "[ZeroOptimizer] internal: the gradients of unit ", unit, " were reduced twice in one step");
  u.launched = true;
  Tensor packed = zeros({u.padded}, dtype_, device_);
  for (size_t k : u.params) {
    const Tensor g = params_[k].grad();
    if (g.defined()) packed.narrow(0, offsets_[k] - u.begin, params_[k].numel()).copy_(g.reshape({-1}));
    params_[k].impl()->grad = nullptr;
  }
  const int world = comm_.world_size();
  const int64_t part = u.padded / world;
  in_flight_.push_back(comm_.reduce_scatter(packed.data_ptr(), grad_shard_.narrow(0, u.shard_local, part).data_ptr(),
                                            std::vector<int64_t>(size_t(world), part), dtype_, ReduceOp::avg, device_));
  comm_.record_stream(packed.data_ptr(), device_);  // read on the communication stream until it completes
  in_flight_buffers_.push_back(packed);
  in_flight_parts_.push_back(OwnedPart{u.shard_local, part});
}

void ZeroOptimizer::refresh_units_after_step() {
  // The shards hold the new values. A unit that is whole now (persistent, held by a guard, inside a
  // forward) is gathered again; a released one is gathered before its next use anyway.
  const int world = comm_.world_size();
  for (size_t k = 0; k < units_.size(); ++k) {
    Unit& u = units_[k];
    Storage& storage = storage_of(u.full);
    if (u.gathering) {  // a prefetch of the old values
      u.gathering = false;
      consume_on_compute_stream(u.gather, device_);
      storage.set_ready(true);
    }
    if (storage.released()) continue;
    const int64_t part = u.padded / world;
    Work gather = comm_.all_gather(param_shard_.narrow(0, u.shard_local, part).data_ptr(), storage.data(),
                                   std::vector<int64_t>(size_t(world), part), dtype_, device_);
    comm_.record_stream(storage.data(), device_);
    consume_on_compute_stream(gather, device_);
    storage.set_ready(true);
    release(k);  // a stale prefetch that nobody holds
  }
}

std::unique_ptr<optim::Optimizer::WholeParameters> ZeroOptimizer::whole_parameters() {
  return std::make_unique<GatheredParameters>(gather_parameters());
}

ZeroOptimizer::GatheredParameters ZeroOptimizer::gather_parameters() {
  GatheredParameters guard(this);
  for (Unit& u : units_) ++u.holds;
  for (size_t k = 0; k < units_.size(); ++k)  // all in flight at once, then waited for
    if (!units_[k].gathering && !storage_of(units_[k].full).ready()) start_gather(k);
  for (size_t k = 0; k < units_.size(); ++k) ensure_gathered(k);
  return guard;
}

void ZeroOptimizer::GatheredParameters::write_back() {
  HG_CHECK(owner_ != nullptr, "[ZeroOptimizer] write_back on a moved-from GatheredParameters");
  ZeroOptimizer& z = *owner_;
  NoGradGuard no_grad;
  const int world = z.comm_.world_size(), rank = z.comm_.rank();
  for (const Unit& u : z.units_) {  // stage 3: this rank's part of each whole unit is its shard
    const int64_t part = u.padded / world;
    z.param_shard_.narrow(0, u.shard_local, part).copy_(u.full.narrow(0, rank * part, part));
  }
  if (z.master_.defined()) z.master_.copy_(z.owned_params().to(z.master_.device()).to(DType::f32));
  if (z.params_host_.defined()) z.params_host_.copy_(z.owned_params().to(kCPU));
}

ZeroOptimizer::GatheredParameters::~GatheredParameters() {
  if (!owner_) return;
  for (size_t k = 0; k < owner_->units_.size(); ++k) {
    --owner_->units_[k].holds;
    owner_->release(k);
  }
}

int64_t ZeroOptimizer::gathered_unit_count() const {
  int64_t n = 0;
  for (const Unit& u : units_) n += storage_of(u.full).ready() ? 1 : 0;
  return n;
}

int64_t ZeroOptimizer::prefetching_unit_count() const {
  int64_t n = 0;
  for (const Unit& u : units_) n += u.gathering ? 1 : 0;
  return n;
}

}  // namespace hg::dist
