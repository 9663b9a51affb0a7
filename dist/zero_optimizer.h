#pragma once
// ZeroOptimizer: data-parallel training with the ZeRO stages of DeepSpeed (Rajbhandari et al. 2020),
// for N ranks that each run the same model on their own part of the global batch, sharding the state
// of AdamW (fused kernels, 8-bit state, offload) or of any element-wise optim::LocalOptimizer (SGD, ...).
//
//   stage 0  (DDP)           every rank keeps all parameters, gradients and optimizer state; gradients
//                            are averaged with all-reduce.                    bytes/param: 2 + 2 + 12
//   stage 1  (FSDP: none)    the fp32 master weights and Adam moments are sharded: rank r updates only
//                            its partition, then the parameters are all-gathered.    2 + 2 + 12/N
//   stage 2  (SHARD_GRAD_OP) also the gradients: each bucket is reduce-scattered into its owners'
//                            gradient shards and the full-size gradients are freed.  2 + (2 + 12)/N
//   stage 3  (FULL_SHARD)    also the parameters: each rank keeps 1/N of every unit (a module, e.g. a
//                            transformer Block) and the unit is all-gathered before its forward and
//                            again before its backward, and released after each.   (2 + 2 + 12)/N
//   (byte counts for half parameters with an fp32 master; f32 parameters: 4 + 4 + 8, no separate master)
//
// Stage 3 (dist/zero_stage3.cpp) needs the model: ZeroOptimizer(model, comm, options). The modules the
// policy picks (default: every nn::Block) are units; the parameters outside them form the root unit
// (the model's own forward scope), and parameters of at most persistence_threshold elements (LayerNorm
// weights, biases) form a persistent unit that stays whole on every rank (DeepSpeed's
// stage3_param_persistence_threshold). Each unit is one flat buffer padded to N equal shards; this rank
// holds its shard of each, contiguous, and the optimizer state over them. The full buffer is a Storage
// that lends its bytes out (engine/storage.h): a unit's forward hook (nn::Module::set_forward_hooks)
// all-gathers it and starts gathering the next unit of the recorded forward order (prefetch); the end of
// its forward releases it; in backward, the first saved parameter the autograd engine unpacks brings it
// back (and prefetches the unit before it); once every parameter of the unit has its gradient, the
// unit's gradients are reduce-scattered into the owners' shards and the unit is released again (the
// persistent unit's, whose parameters any module may use, once backward is over: step or grad_norm).
// Gradient accumulation micro-steps (sync off) keep full-size gradients until the last one.
//
// Layout. The parameters (one dtype, one device) are copied into one flat buffer, padded so that its
// length is N equal partitions of a multiple of kAlignElements; each parameter tensor becomes a view
// of it (the module's handles stay valid). Stages 0/1 keep a flat gradient buffer the same way (each
// parameter's grad() is a view of it, so backward accumulates into it).
//
// Overlap. Buckets of about bucket_bytes are cut from the last parameter backwards (the order backward
// produces gradients). A hook on each parameter (engine/autograd.h post-accumulate-grad) counts a
// bucket down; when it is complete its collective is launched asynchronously (dist::Communicator),
// in bucket order so every rank issues the same sequence, while backward continues. step() (or
// grad_norm / clip_grad_norm) waits for the rest. With set_gradient_sync(false) — the accumulation
// micro-steps — the hooks do nothing and gradients accumulate locally; the backward of the last
// micro-step (sync on) communicates once.
//
// Any element-wise optimizer (dist/zero_elementwise_update.cpp; optim/optimizer.h
// LocalOptimizer::elementwise): the one the user built is the update rule. Its state buffers become
// flat fp32 tensors over this rank's partition, and each owned slice of a parameter is updated by its
// update_elements with views of them (the slice of the fp32 master copy for half parameters, then
// rounded to nearest even; with offload the same on the host copies). The step is decided on the host
// (decides_on_device false); per-group lr and weight decay are the optimizer's groups'.
//
// AdamW. AdamW with PyTorch's semantics over this rank's partition (stage 0: everything), one
// kernel call per parameter slice (weight decay may differ per parameter): kernels::adamw_step_device on
// the parameters' device with the master copy and a device step count (the step ON THE DEVICE below),
// or, with offload_optimizer (ZeRO-Offload), the master and
// moments in host memory and kernels::cpu::adamw_offload_step (SIMD) writing the rounded parameter.
// ZeRO-Offload from a CUDA device (dist/zero_offload.cpp): that host memory is pinned (the state and a
// host copy of this rank's gradients and parameters); as each bucket's collective completes during
// backward, this rank's part of it is copied to the host on the copy stream, so step() only waits for
// the last copies, runs the CPU update and sends the parameters back in one asynchronous copy before
// the all-gather. From the CPU device the state lives in host_offload_allocator() (kept apart from the
// device allocator's statistics and budget, as activation offload does) and nothing is copied.
// clip_grad_norm with offload folds its factor into the CPU update's gradient scale instead of
// rewriting the gradients, which have already left for the host (the parameters' grad() stay unclipped).
// Gradient norm and the non-finite check are combined across ranks (all-reduce of the sum of squares
// of each partition), so every rank clips by the same factor and skips the same steps.
//
// 8-bit state (AdamWOptions().state_bits(8); dist/zero_quantized_state.cpp): parameters of at least
// kAdamW8BitMinElements elements keep m and v as u8 codes with an fp32 absmax per block of 2048 of the
// PARAMETER's elements, as the single-process AdamW does; the others keep fp32 moments. The layout
// (dist/zero_layout.h) starts each such parameter on a multiple of 2048 and makes partitions whole
// blocks, so no block straddles two ranks: every stage, with or without offload, updates the very
// blocks one process would (bit for bit given the same gradients), and checkpoints re-partition by
// copying whole blocks. Optimizer state per element: 2 bytes + 8 per 2048 (+ the fp32 master).
//
// ON THE DEVICE (dist/zero_device_step.cpp; optim/device_step.h). Stages 0-3 over AdamW without
// offload have the device step and take the loss scaler's and the trainer's decisions in device
// memory: its unscale writes this rank's inf/NaN flag and all-reduces it (MAX) on the device, its
// clip_grad_norm all-reduces the sum of squares (SUM) on the device and clips, and its step(lr,
// found_inf) reads nothing on the host (the update kernels skip; lr read from device memory). Over
// NCCL the collectives are ordered on the streams: an unlogged Trainer step waits for nothing (the
// host transports wait on the host, as for every collective). Plain step() decides on the host from
// the all-reduced norm, as the host protocol (unscale_and_check, clip_grad_norm) always did; both give
// the same bits. The offload variant keeps the host path (device_step() is null).
//
// CONVENTION
//   - Every rank constructs it over the same parameters in the same order; rank 0's values are
//     broadcast at construction.
//   - Between two step() calls, each parameter's gradient is produced by at most one backward with
//     gradient sync on (an error says otherwise).
//   - grad_scale (1 / loss scale of a fp16 LossScaler) multiplies gradients inside the update.
//   - Stage 3: outside a unit's forward and backward a parameter has no memory (reading it is an error
//     that says so) unless a gather_parameters() guard is alive; the model must be converted (to(dtype),
//     to(device)) before, and must not outlive the optimizer if its parameters are to be read again.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "engine/safetensors.h"
#include "layers/module.h"
#include "optim/adamw.h"

namespace hg::cuda {
class Event;
}

namespace hg::dist {

struct ZeroOptions {
  HG_OPTION(ZeroOptions, int, stage, 0);
  HG_OPTION(ZeroOptions, bool, offload_optimizer, false);
  HG_OPTION(ZeroOptions, int64_t, bucket_bytes, int64_t(25) << 20);
  HG_OPTION(ZeroOptions, optim::AdamWOptions, adamw, optim::AdamWOptions());
  // Stage 3: parameters with at most this many elements stay whole on every rank.
  HG_OPTION(ZeroOptions, int64_t, persistence_threshold, 0);
  // Stage 3: start gathering the next unit while the current one computes.
  HG_OPTION(ZeroOptions, bool, prefetch, true);
};

// Which modules stage 3 gathers and releases as one unit.
using ShardUnitPolicy = std::function<bool(const nn::Module&)>;
// The default policy: every transformer block (layers/transformer.h nn::Block).
bool transformer_blocks(const nn::Module& module);

// Bytes of model state this rank holds (what ZeRO divides).
struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;  // fp32 master (when separate) + exp_avg + exp_avg_sq
  int64_t total() const { return params + grads + optimizer; }
};

class ZeroOptimizer final : public optim::Optimizer, public optim::ShardedState {
 public:
  static constexpr int64_t kAlignElements = 32;

  // Stages 0-2 over `params`, AdamW with options.adamw().
  ZeroOptimizer(std::vector<Tensor> params, Communicator& comm, ZeroOptions options = {});
  // Any stage over model.parameters(); stage 3 installs forward hooks on the units' modules.
  ZeroOptimizer(nn::Module& model, Communicator& comm, ZeroOptions options = {},
                ShardUnitPolicy units = transformer_blocks);
  // The same sharding the state of `optimizer` (built over the same parameters, not stepped yet):
  // AdamW (its options replace options.adamw()) or any element-wise LocalOptimizer. Its groups' lr and
  // weight decay apply per parameter (AdamW: one lr for every group); half parameters keep an fp32
  // master (its mixed precision must be master_weights without stochastic rounding).
  ZeroOptimizer(std::unique_ptr<optim::LocalOptimizer> optimizer, Communicator& comm, ZeroOptions options = {});
  ZeroOptimizer(std::unique_ptr<optim::LocalOptimizer> optimizer, nn::Module& model, Communicator& comm,
                ZeroOptions options = {}, ShardUnitPolicy units = transformer_blocks);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // The optim::Optimizer protocol (optim/optimizer.h), with the meaning each method has here:
  const std::string& name() const override;
  std::vector<Tensor> parameters() const override { return params_; }
  // Off for gradient-accumulation micro-steps, on (the default) for the last one.
  void set_gradient_sync(bool sync) override { sync_ = sync; }
  bool gradient_sync() const { return sync_; }

  // The global L2 norm of the averaged gradients (waits for the gradient collectives).
  double grad_norm() override;
  // grad_norm(), then scales every gradient by max_norm / (norm + 1e-6) when that is < 1 (a
  // non-finite norm leaves them as they are; step() then skips). Returns the norm before clipping.
  double clip_grad_norm(double max_norm) override;
  // Sets grad_scale = 1 / scale (applied inside the update) and returns whether the global gradient
  // norm is non-finite: an inf/NaN on any rank is found on every rank.
  bool unscale_and_check(double scale) override;
  // One AdamW update of this rank's partition and the parameter exchange of the stage. Returns false,
  // on every rank alike, when a gradient is inf or NaN (the step is skipped, the state unchanged).
  bool step() override;
  // Clears the gradients (stages 0/1: zeros in the flat buffer; stage 2: the shard and any leftovers).
  // After a backward whose step did not run (it threw midway on every rank, or the step is dropped)
  // it first waits for that backward's collectives, so the next backward starts afresh.
  void zero_grad(bool set_to_none = true) override;

  // The device-resident step (optim/device_step.h; dist/zero_device_step.cpp): stages 0-3 with AdamW
  // have it; the optimizer-offload variant (whose update runs on the CPU) and the element-wise
  // optimizers (engine ops, which cannot skip) keep the host path above. Its unscale waits for the
  // gradient collectives (stream order: no host wait over NCCL), unscales this rank's gradients (stage
  // 0: all of them) and all-reduces found_inf with MAX on the device, so every rank skips the same
  // steps; its clip_grad_norm all-reduces this rank's share of the sum of squares (SUM) on the device,
  // then clips this rank's gradients (stages 0/1: the flat buffer); its step reads lr[0] and makes no
  // host read: it updates unless found_inf[0] != 0 (then parameters and state stay bit for bit, and
  // the step is not counted).

  void set_lr(double lr) override;
  double lr() const { return lr_; }
  void set_grad_scale(double scale) { grad_scale_ = scale; }

  // ZeRO-Offload: this rank's gradients over [state_offset(), state_offset() + state numel) where the
  // CPU update reads them — from a CUDA device the pinned host copy streamed during backward (waits for
  // the collectives and the copies), from the CPU device the gradients themselves. Unscaled, unclipped.
  Tensor host_gradients();

  int stage() const { return options_.stage(); }
  // The optimizer whose update this one applies to its shards (its own state is never used).
  const optim::LocalOptimizer& update_rule() const { return *rule_; }
  // 8 (block-wise quantised moments for parameters of >= kAdamW8BitMinElements elements) or 32.
  int state_bits() const { return options_.adamw().state_bits(); }
  // Updates applied so far (a read of the device count, except under offload).
  int64_t step_count() const;
  int64_t numel() const { return total_; }          // parameters (unpadded)
  int64_t padded_numel() const { return padded_; }  // flat buffer length
  int64_t partition_numel() const { return padded_ / comm_.world_size(); }
  ModelStateBytes model_state_bytes() const;
  const std::vector<Tensor>& params() const { return params_; }

  // Stage 3: every parameter is whole on every rank while the returned guard lives (saving the model,
  // reading weights); collective — every rank takes it. Stages 0-2: parameters are always whole.
  // Writing the parameters in its scope (loading weights) takes effect with write_back(), also
  // collective: each rank's shard (stage 3) and its fp32 master copy (when kept) take the new values.
  class GatheredParameters final : public optim::Optimizer::WholeParameters {
   public:
    explicit GatheredParameters(ZeroOptimizer* owner) : owner_(owner) {}
    GatheredParameters(GatheredParameters&& other) noexcept : owner_(other.owner_) { other.owner_ = nullptr; }
    GatheredParameters(const GatheredParameters&) = delete;
    GatheredParameters& operator=(const GatheredParameters&) = delete;
    GatheredParameters& operator=(GatheredParameters&&) = delete;
    ~GatheredParameters() override;
    void write_back();
    void commit() override { write_back(); }

   private:
    ZeroOptimizer* owner_;
  };
  [[nodiscard]] GatheredParameters gather_parameters();
  // The same behind the protocol's guard type.
  [[nodiscard]] std::unique_ptr<WholeParameters> whole_parameters() override;
  // Stage 3 introspection (tests, benchmarks): units, and how many are whole right now.
  int64_t unit_count() const { return int64_t(units_.size()); }
  int64_t gathered_unit_count() const;
  int64_t prefetching_unit_count() const;  // all-gathers started ahead of use, not yet waited for

  // This rank's optimizer state (checkpoints): "master" (when separate), "exp_avg", "exp_avg_sq" (an
  // element-wise optimizer: its own buffers' names, "momentum_buffer", ...) — flat fp32 tensors over
  // the elements this rank owns (stages 0-2: [state_offset(), + numel) of the flat parameter buffer;
  // stage 3: its shard of every unit, in unit order). 8-bit state: "exp_avg", "exp_avg_sq" are the u8
  // codes of the quantised slices, "exp_avg_absmax", "exp_avg_sq_absmax" their block scales,
  // "exp_avg_fp32", "exp_avg_sq_fp32" the other parameters' moments.
  // Names are rank-qualified: "rank<r>-of-<N>.exp_avg", ...
  std::vector<std::pair<std::string, Tensor>> state_tensors() const override;
  // Refused with a message that names load_state: a shard alone cannot be re-partitioned.
  void load_state_tensors(const std::vector<std::pair<std::string, Tensor>>& entries) override;
  // "zero <stage> x<N>: state <MiB> MiB/rank": this rank's model-state bytes.
  std::string state_summary() const override;
  int64_t state_offset() const { return opt_begin_; }

  // The sharding capability (optim::ShardedState; sharded_state() is this optimizer). Checkpoints of
  // the optimizer state, one file per rank: `prefix`.rank{r}-of-{N}.safetensors holds
  // flat fp32 "exp_avg", "exp_avg_sq" (and "master" when kept) over the elements rank r owns, as
  // ranges of the parameters concatenated in order without padding (so any stage reads any other's),
  // with metadata {ranges "offset:count,...", numel, step, world, optimizer} (8-bit state: state_bits 8,
  // block 2048, and the tensors of dist/zero_quantized_state.cpp). The parameters themselves are saved
  // whole by the model (stage 3: inside gather_parameters()).
  // save_state is collective: it returns on every rank once every file is written.
  void save_state(const std::string& prefix) override;
  // Loads files written by save_state at any world size and stage: every rank reads the pieces of
  // all the saved ranks' files that overlap its own partition (so the state is re-partitioned when
  // the world size changed). Load the parameters first; a master the files lack is their copy.
  void load_state(const std::string& prefix) override;
  // The world size of the shards saved under `prefix` (0: none).
  static int saved_world_size(const std::string& prefix);
  bool has_saved_state(const std::string& prefix) const override { return saved_world_size(prefix) > 0; }
  // Reads and checks every shard under `prefix` as load_state would, changing nothing.
  void check_saved_state(const std::string& prefix) const override;
  void forget_checked_state() const override { checked_.reset(); }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  // range of the flat buffer
    std::vector<size_t> params;
    int pending = 0;
  };
  struct Unit {
    int64_t begin = 0, padded = 0;  // range of the global flat space (padded to N equal shards)
    int64_t shard_local = 0;        // where this rank's shard starts in param_shard_ / grad_shard_ / state
    std::vector<size_t> params;
    Tensor full;  // the whole unit; its storage lends its bytes out while released
    bool persistent = false;
    const nn::Module* module = nullptr;  // whose forward hooks gather it (none: persistent)
    int depth = 0;                       // open forward scopes of the module
    int holds = 0;                       // live gather_parameters() guards
    bool gathering = false;              // an all-gather into `full` is in flight
    bool launched = false;               // its gradients were reduce-scattered this step
    Work gather;
  };
  // A range of the global flat space this rank owns, and where it starts in the local state.
  struct OwnedRange {
    int64_t begin = 0, count = 0, local = 0;
  };
  // A run of elements owned here, as [unpadded, unpadded + count) of the parameters concatenated
  // without padding, starting at `local` in the state (checkpoint files are written in these terms).
  // What one in-flight gradient collective delivers to this rank: [local, local + count) of its
  // owned gradients (streamed to the host under offload).
  struct OwnedPart {
    int64_t local = 0, count = 0;
  };
  struct Piece {
    int64_t unpadded = 0, count = 0, local = 0;
  };
  // The part of one parameter this rank updates: elements [first, first + count) of parameter
  // `param`, at `local` in the owned parameters / gradients / master, and at `state` in the moments:
  // 32-bit state: state == local in exp_avg_ / exp_avg_sq_; 8-bit state: a quantised parameter's codes
  // at `state` in q8_ and its absmax from `block`, the others' fp32 moments at `state` in the compact
  // exp_avg_ / exp_avg_sq_ (dist/zero_quantized_state.cpp).
  struct StateSlice {
    size_t param = 0;
    int64_t first = 0, count = 0, local = 0, state = 0, block = 0;
    bool quantized = false;
  };
  // 8-bit moments of this rank's quantised slices: codes (u8) and per-block absmax (f32).
  struct QuantizedState {
    Tensor exp_avg, exp_avg_sq, exp_avg_absmax, exp_avg_sq_absmax;
  };
  // One file written by save_state, read and checked (numel, ranges, tensor sizes).
  struct SavedShard {
    std::string path;
    safetensors::File file;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, count) of the unpadded parameters
  };
  std::vector<SavedShard> read_shards(const std::string& prefix, int64_t* step) const;
  // What check_saved_state read (its prefix, step and shards, the mappings kept): load_state of the
  // same prefix uses them instead of reading and verifying every shard a second time.
  struct CheckedShards {
    std::string prefix;
    int64_t step = 0;
    std::vector<SavedShard> shards;
  };
  mutable std::optional<CheckedShards> checked_;
  void validate_params();
  // ---- the update rule (dist/zero_elementwise_update.cpp) ----
  // Takes `rule` as this optimizer's update: checks it (its parameters, its state, its precision)
  // and copies its groups' lr and weight decay.
  void adopt_update_rule(std::unique_ptr<optim::LocalOptimizer> rule);
  bool fused_adamw() const { return fused_adamw_; }
  // The weight decay of parameter `param` (AdamW's decay_only_matrices applied).
  double weight_decay_of(size_t param) const;
  // AdamW's options for parameter `param`: its group's betas and eps (fused_adamw() only).
  optim::AdamWOptions adamw_options_of(size_t param) const;
  // An element-wise optimizer's flat state buffers, and each slice's ParamState viewing them.
  void init_rule_state();
  void bind_slice_states();
  // One update of every owned slice with the rule's update_elements: `params` and `grads` are this
  // rank's (on the device, or the host copies under offload), grads multiplied by `grad_multiplier`.
  void update_elementwise(const Tensor& params, const Tensor& grads, double grad_multiplier);
  // "master" (when separate), "exp_avg", "exp_avg_sq": this rank's flat fp32 state (8-bit state:
  // "master", "exp_avg" and "exp_avg_sq" as u8 codes, "exp_avg_absmax", "exp_avg_sq_absmax", and the
  // small parameters' fp32 "exp_avg_fp32", "exp_avg_sq_fp32").
  std::vector<std::pair<std::string, Tensor>> shard_buffers() const;
  // ---- 8-bit state (dist/zero_quantized_state.cpp) ----
  // slices_ and the moment buffers (both widths).
  void init_moments();
  // The slice of parameter `param` holding its element `element` (nullptr: not owned here).
  const StateSlice* slice_of(size_t param, int64_t element) const;
  // The 8-bit checkpoint: this rank's share `pieces` as the file's tensors, and loading them back.
  safetensors::NamedTensors quantized_file_tensors(const std::vector<Piece>& pieces) const;
  void check_quantized_shard(const safetensors::File& file, const std::string& path,
                             const std::vector<std::pair<int64_t, int64_t>>& ranges) const;
  void load_quantized_shard(const safetensors::File& file, const std::vector<std::pair<int64_t, int64_t>>& ranges);
  // Calls fn(param, first element, count) for each parameter's run of `ranges` (offset, count of the
  // parameters concatenated without padding), in order.
  void for_each_saved_run(const std::vector<std::pair<int64_t, int64_t>>& ranges,
                          const std::function<void(size_t, int64_t, int64_t)>& fn) const;
  void layout_flat();
  void init_state_and_buckets();
  std::vector<Piece> pieces_of(const std::vector<OwnedRange>& ranges) const;
  Tensor owned_params() const;
  Tensor owned_grads() const;
  // stage 3 (dist/zero_stage3.cpp)
  void layout_units(nn::Module& model, const ShardUnitPolicy& policy);
  void before_forward(size_t unit);
  void after_forward(size_t unit);
  void ensure_gathered(size_t unit);
  void start_gather(size_t unit);
  void prefetch_after(size_t unit, int direction);
  void release(size_t unit);
  void on_unit_grad_ready(size_t index);
  void launch_unit(size_t unit);
  void refresh_units_after_step();

  void on_grad_ready(size_t index);
  void mark_ready(size_t index);
  void launch_ready_buckets();
  void launch(size_t bucket);
  void finish_gradient_sync();
  // A parameter frozen after construction is an error naming it (it would still be updated).
  void check_none_frozen() const;
  void end_gradient_sync();  // waits for the collectives in flight and resets the per-step counts
  void release_reduced_buckets();
  // The gradient of flat element `global` (stage 0/1: the flat buffer; stage 2: the shard).
  Tensor grad_range(int64_t global_begin, int64_t count) const;
  double local_sum_of_squares();
  double global_sum_of_squares();  // over the ranks; on CUDA the same reduction as the device decision's
  // sum_sq (an f64 scalar on the device) = the sum over the ranks, without a host read: one reduction,
  // shared by the device step's clip_grad_norm and grad_norm, so the two agree bit for bit.
  void sum_of_squares_on_device(const Tensor& sum_sq);
  // The device step's three calls (dist/zero_device_step.cpp; the capability forwards to them).
  class ZeroDeviceStep;
  void unscale_on_device(const Tensor& scale, const Tensor& found_inf);
  void clip_grad_norm_on_device(double max_norm, const Tensor& sum_sq);
  bool step_on_device(const Tensor& lr, const Tensor& found_inf);
  // Hands the capability over when the update rule has it (AdamW, not offload); from adopt_update_rule.
  void enable_device_step();
  // The gradients this rank adds to the global sum of squares (stage 0: its 1/N share of the flat
  // buffer), and the ones its clip pass scales (stages 0/1: the whole flat buffer, as clip_grad_norm).
  Tensor norm_share() const;
  Tensor clipped_grads() const;
  // AdamW over this rank's owned ranges (not offload) through adamw_step_device: lr from device_lr_
  // or lr_, skip from skip_flag_ (may be undefined), t from step_count_.
  void update_on_device();
  // ZeRO-Offload's update: the CPU AdamW over the host state, then the parameters back (host step_).
  void offload_update();
  // ZeRO-Offload (dist/zero_offload.cpp).
  bool streams_gradients() const { return options_.offload_optimizer() && device_.is_cuda(); }
  // Zeros (fp32 unless said): on the device, or in (pinned) host memory.
  Tensor new_state(int64_t count, DType dtype = DType::f32) const;
  void allocate_offload_staging();
  void stream_gradients_to_host(bool wait_for_collectives);
  std::pair<Tensor, Tensor> offload_buffers();  // {gradients, parameters} of the CPU update
  void upload_offloaded_params();
  void drain_offload_copies() noexcept;

  Communicator& comm_;
  ZeroOptions options_;
  std::unique_ptr<optim::LocalOptimizer> rule_;
  bool fused_adamw_ = false;
  std::vector<optim::ParamGroup> groups_;  // the rule's lr and weight decay (params empty)
  std::vector<size_t> group_of_;           // parameter -> its group
  std::vector<std::pair<std::string, Tensor>> rule_state_;  // element-wise: flat buffers over the owned elements
  std::vector<optim::ParamState> slice_states_;              // element-wise: one per slices_ entry
  double lr_;
  double grad_scale_ = 1.0;
  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;
  DType dtype_;
  Device device_;
  Device state_device_;
  int64_t total_ = 0, padded_ = 0, opt_begin_ = 0, opt_count_ = 0;
  std::vector<int64_t> unpadded_offsets_;  // param i's first element without padding
  std::vector<OwnedRange> owned_;
  Tensor flat_params_, flat_grads_, grad_shard_, master_, exp_avg_, exp_avg_sq_;
  std::vector<StateSlice> slices_;  // what the update runs over, in owned order
  QuantizedState q8_;               // 8-bit state (undefined tensors with 32-bit state)
  Tensor param_shard_;  // stage 3: this rank's shard of every unit
  std::vector<Unit> units_;
  std::vector<size_t> unit_of_;
  std::vector<size_t> forward_order_;  // units by first forward use (recorded once)
  std::vector<nn::Module*> hooked_modules_;
  std::vector<uint64_t> grad_hooks_;         // its post-accumulate-grad hooks, one per parameter (others' stay)
  const nn::Module* root_module_ = nullptr;  // stage 3: the model the optimizer was built over
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  size_t next_bucket_ = 0;
  std::vector<Work> in_flight_;
  std::vector<Tensor> in_flight_buffers_;
  std::vector<OwnedPart> in_flight_parts_;  // parallel to in_flight_
  bool sync_ = true;
  bool synced_ = false;  // gradients of this step are reduced
  double norm_ = -1.0;   // global norm of this step, once computed
  int64_t step_ = 0;  // offload: updates applied (otherwise step_count_ counts them)
  // The device step (not offload): updates applied, i64[2] on the parameters' device (slot 0 current;
  // adamw_step_device writes slot 1, copied back in stream order), and the lr and skip flag of the
  // device step running now (undefined: lr_ / the host decision).
  Tensor step_count_, device_lr_, skip_flag_;
  std::unique_ptr<optim::DeviceStep> device_step_impl_;
  // ZeRO-Offload from a CUDA device: pinned host copies of this rank's gradients and parameters, the
  // next in-flight bucket to stream, and the copy-stream events of the last gradient and parameter copies.
  double clip_coef_ = 1.0;  // clip_grad_norm's factor with offload, applied by the CPU update
  Tensor grads_host_, params_host_;
  size_t next_streamed_ = 0;
  std::unique_ptr<cuda::Event> grads_on_host_, params_on_device_;
};

}  // namespace hg::dist
