// The training loop (train/trainer.h): micro-batches, the optimizer protocol, reports, checkpoints.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "dist/rank0.h"
#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/profiler/profiler.h"
#include "engine/random.h"
#include "engine/host_reads.h"
#include "engine/safetensors.h"
#include "optim/clip_value.h"
#include "train/checkpoint_directory.h"
#include "train/progress.h"

namespace hg::train {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kWho = "[Trainer]";

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string megabytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", double(bytes) / (1024.0 * 1024.0));
  return text;
}

// FILE.json -> FILE.rank<r>.json (FILE -> FILE.rank<r>.json): one trace per rank.
std::string rank_path(const std::string& path, int rank) {
  const size_t dot = path.rfind('.');
  const bool has_extension = dot != std::string::npos && path.find('/', dot) == std::string::npos;
  return (has_extension ? path.substr(0, dot) : path) + ".rank" + std::to_string(rank) +
         (has_extension ? path.substr(dot) : std::string(".json"));
}

// Token ids ([B, T] integers) count as tokens, anything else as B examples.
bool counts_tokens(const data::Batch& batch) { return !is_floating(batch[0].dtype()) && batch[0].dim() >= 2; }
double items_of(const data::Batch& batch) {
  return counts_tokens(batch) ? double(batch[0].numel()) : double(batch[0].size(0));
}

int64_t bytes_on_disk(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return int64_t(std::filesystem::file_size(path));
  int64_t bytes = 0;
  for (const auto& file : std::filesystem::directory_iterator(path)) bytes += int64_t(file.file_size());
  return bytes;
}

// The first Update's optimizer (the Trainer's optimizer_ in a custom step: device, whole_parameters).
optim::Optimizer& first_optimizer(const std::vector<Update>& updates) {
  HG_CHECK(!updates.empty(), kWho, " a custom step without Updates; expected at least one named optimizer");
  HG_CHECK(updates.front().optimizer != nullptr, kWho, " Update '", updates.front().name,
           "' has no optimizer; expected a pointer to one");
  return *updates.front().optimizer;
}

}  // namespace

Trainer::Trainer(nn::Module& model, optim::Optimizer& optimizer, data::DataLoader& loader, LossFn loss,
                 TrainerOptions options)
    : model_(model), optimizer_(optimizer), loader_(loader), loss_(std::move(loss)), options_(std::move(options)) {
  HG_CHECK(loss_ != nullptr, kWho, " no loss function");
  init();
}

Trainer::Trainer(nn::Module& model, std::vector<Update> updates, data::DataLoader& loader, StepFn step,
                 TrainerOptions options)
    : model_(model),
      optimizer_(first_optimizer(updates)),
      loader_(loader),
      custom_step_(std::move(step)),
      options_(std::move(options)) {
  HG_CHECK(custom_step_ != nullptr, kWho, " no step function");
  const TrainerOptions& o = options_;
  HG_CHECK(o.clip() == 0 && o.clip_value() == 0, kWho, " options clip ", o.clip(), " / clip_value ", o.clip_value(),
           " with a custom step; expected 0: give each Update its own clip / clip_value");
  HG_CHECK(!o.cuda_graph(), kWho, " cuda_graph with a custom step; expected it off (the custom step runs eagerly)");
  for (size_t i = 0; i < updates.size(); ++i) {
    const Update& u = updates[i];
    HG_CHECK(!u.name.empty() && u.name.find('.') == std::string::npos, kWho, " Update ", i, " is named '", u.name,
             "'; expected a non-empty name without '.'");
    HG_CHECK(u.optimizer != nullptr, kWho, " Update '", u.name, "' has no optimizer; expected a pointer to one");
    HG_CHECK(!u.optimizer->is_sharded(), kWho, " Update '", u.name, "': the optimizer ", u.optimizer->name(),
             " is sharded; a custom step expects local optimizers");
    HG_CHECK(std::isfinite(u.clip) && u.clip >= 0 && std::isfinite(u.clip_value) && u.clip_value >= 0, kWho,
             " Update '", u.name, "': clip ", u.clip, " / clip_value ", u.clip_value, "; expected >= 0 (0: off)");
    for (size_t j = 0; j < i; ++j) {
      HG_CHECK(updates[j].name != u.name, kWho, " two Updates are named '", u.name, "'; expected unique names");
      HG_CHECK(updates[j].optimizer != u.optimizer, kWho, " Updates '", updates[j].name, "' and '", u.name,
               "' share one optimizer; expected one optimizer per Update");
    }
  }
  updates_.reserve(updates.size());
  for (Update& u : updates) updates_.push_back(UpdateState{std::move(u)});
  init();
}

void Trainer::init() {
  const TrainerOptions& o = options_;
  HG_CHECK(o.steps() >= 0 && o.stop_after() >= 0, kWho, " steps ", o.steps(), " / stop_after ", o.stop_after(),
           "; expected >= 0");
  HG_CHECK(o.grad_accum() >= 1, kWho, " grad_accum ", o.grad_accum(), "; expected >= 1 micro-batch per step");
  HG_CHECK(std::isfinite(o.clip()) && o.clip() >= 0, kWho, " clip ", o.clip(), "; expected >= 0 (0: off)");
  HG_CHECK(std::isfinite(o.clip_value()) && o.clip_value() >= 0, kWho, " clip_value ", o.clip_value(),
           "; expected >= 0 (0: off)");
  HG_CHECK(o.eval_every() >= 0 && o.log_every() >= 1 && o.checkpoint_every() >= 0 && o.keep_checkpoints() >= 1, kWho,
           " eval_every / checkpoint_every >= 0, log_every / keep_checkpoints >= 1 expected");
  HG_CHECK(o.seq_warmup_steps() >= 0 && o.seq_warmup_start() >= 1, kWho, " seq_warmup_steps ", o.seq_warmup_steps(),
           " >= 0 and seq_warmup_start ", o.seq_warmup_start(), " >= 1 expected");
  HG_CHECK(!o.checkpoint_dir().empty() || (!o.resume() && o.checkpoint_every() == 0), kWho,
           " resume and checkpoint_every need a checkpoint_dir");
  HG_CHECK(!optimizer_.is_sharded() || o.communicator() != nullptr, kWho, " the optimizer ", optimizer_.name(),
           " is sharded across ranks: give the trainer their communicator (TrainerOptions().communicator(...))");
  loader_position_ = loader_.state();
  if (custom()) {  // every Update's optimizer, scaler and t, by name
    state_.model(model_).counter("step", completed_steps_);
    for (UpdateState& u : updates_) {
      state_.optimizer(u.spec.name, *u.spec.optimizer).scaler(u.spec.name, u.spec.scaler);
      state_.counter("steps_" + u.spec.name, u.steps);
    }
  } else {
    state_.model(model_).optimizer(optimizer_).scaler(scaler_).counter("step", completed_steps_);
  }
  state_.counter("optimizer_steps", optimizer_steps_).generator("default", default_generator());
  state_.extra("loader", loader_position_, [this](const Tensor& saved) { loader_.check_state(saved); });
  state_.run_config(o.run_config());
  if (!o.checkpoint_dir().empty())
    checkpoints_ = std::make_unique<CheckpointDirectory>(o.checkpoint_dir(), o.keep_checkpoints(), o.communicator());
}

Trainer::~Trainer() = default;

Trainer& Trainer::schedule(std::shared_ptr<const optim::LrSchedule> schedule) {
  check_not_started("schedule");
  HG_CHECK(!custom(), kWho, " schedule() with a custom step; expected each Update's own schedule");
  schedule_ = std::move(schedule);
  return *this;
}

Trainer& Trainer::loss_scaler(optim::LossScaler scaler) {
  check_not_started("loss_scaler");
  HG_CHECK(!custom(), kWho, " loss_scaler() with a custom step; expected each Update's own scaler");
  scaler_ = std::move(scaler);  // the TrainingState keeps pointing at scaler_
  return *this;
}

Trainer& Trainer::evaluator(EvalFn evaluate) {
  evaluate_ = std::move(evaluate);
  return *this;
}

Trainer& Trainer::ema(EmaOptions options, std::vector<Tensor> params) {
  check_not_started("ema");
  HG_CHECK(ema_ == nullptr, kWho, " ema() twice; expected one EMA");
  HG_CHECK(!optimizer_.is_sharded(), kWho, " ema() with the sharded optimizer ", optimizer_.name(),
           "; expected a local optimizer (the EMA keeps whole parameters)");
  ema_ = std::make_unique<ExponentialMovingAverage>(params.empty() ? model_.parameters() : std::move(params), options);
  ema_->register_state(state_, "ema_");
  return *this;
}

Trainer& Trainer::plateau(std::shared_ptr<optim::ReduceLROnPlateau> plateau) {
  check_not_started("plateau");
  HG_CHECK(plateau != nullptr, kWho, " plateau(nullptr); expected a ReduceLROnPlateau");
  HG_CHECK(!custom(), kWho, " plateau() with a custom step; expected a single optimizer (a custom step sets its lrs)");
  HG_CHECK(plateau_ == nullptr, kWho, " plateau() twice; expected one");
  plateau_ = std::move(plateau);
  plateau_state_ = plateau_->state();
  state_.extra("plateau", plateau_state_, [](const Tensor& saved) { optim::ReduceLROnPlateau::check_state(saved); });
  return *this;
}

void Trainer::check_not_started(const char* what) const {
  HG_CHECK(!resumed_ && completed_steps_ == 0, kWho, " ", what,
           "() after resume() or fit(): set it before, so "
           "that a checkpoint's state (the loss scale, the step) is not replaced");
}

int Trainer::rank() const { return options_.communicator() ? options_.communicator()->rank() : 0; }

bool Trainer::resume() {
  HG_CHECK(checkpoints_ != nullptr, kWho, " resume needs a checkpoint_dir");
  if (resumed_) return completed_steps_ > 0;
  std::vector<CheckpointDirectory::Damaged> damaged;  // newer entries skipped: a flipped bit, a cut file
  const std::optional<std::string> latest = checkpoints_->latest_intact_for(state_, &damaged);
  if (rank() == 0)
    for (const CheckpointDirectory::Damaged& d : damaged)
      std::fprintf(stderr, "warning: checkpoint %s is damaged (%s); resuming from %s (%s%s)\n", d.entry.path.c_str(),
                   d.reason.c_str(), latest ? latest->c_str() : "no checkpoint",
                   d.moved_to.empty() ? "it stays listed" : "moved aside to ", d.moved_to.c_str());
  HG_CHECK(options_.resume_entry().empty() || (latest && *latest == options_.resume_entry()), kWho,
           " --resume: the run config was read from ", options_.resume_entry(), " but the state would be resumed from ",
           latest ? *latest : std::string("no checkpoint"),
           " (the directory changed in between, or a file could not be read the first time); "
           "expected both from one checkpoint: run again");
  if (!latest) {
    if (rank() == 0) std::printf("no checkpoint in %s yet: starting at step 0\n", options_.checkpoint_dir().c_str());
    resumed_ = true;
    return false;
  }
  try {  // everything, the loader's position included, is checked before anything changes
    checkpoints_->load(*latest, state_);
    loader_.load_state(loader_position_);
    if (plateau_) plateau_->load_state(plateau_state_);
  } catch (const Error& e) {
    throw Error("--resume from " + *latest + ": " + e.what());
  }
  resumed_ = true;
  if (rank() == 0) std::printf("resumed from %s at step %lld\n", latest->c_str(), (long long)completed_steps_);
  return true;
}

data::Batch Trainer::narrowed(const data::Batch& batch, int64_t step) const {
  if (options_.seq_warmup_steps() == 0) return batch;
  HG_CHECK(batch[0].dim() >= 2, kWho, " seq_warmup_steps narrows sequences, but the batch's first field is ",
           batch[0].describe(), "; expected [batch, length, ...]");
  const int64_t full = batch[0].size(1);
  const int64_t length =
      data::SequenceLengthWarmup(std::min(options_.seq_warmup_start(), full), full, options_.seq_warmup_steps())
          .length(step - 1);
  if (length >= full) return batch;
  data::Batch out = batch;
  for (Tensor& t : out.tensors)
    if (t.dim() >= 2) t = t.narrow(1, 0, length).contiguous();
  return out;
}

Tensor Trainer::micro_batch_loss(const data::Batch& batch, int64_t micro_batches) {
  std::optional<ActivationOffload> offload;
  if (options_.offload_activations() != OffloadMode::off) offload.emplace(options_.offload_activations());
  return loss_(batch) * (1.0 / double(micro_batches));
}

bool Trainer::steps_on_device() const {
  if (custom() || ema_ || plateau_ || options_.clip_value() > 0) return false;  // host-decided (trainer.h)
  return optimizer_.decides_on_device() && (!schedule_ || schedule_->device_form().has_value());
}

Trainer::StepFigures Trainer::run_step(int64_t step, bool read) {
  StepFigures f;
  const auto start = Clock::now();
  const RuntimeCounters runtime_before = runtime_counters();
  std::vector<data::Batch> batches;
  {
    profiler::ScopedRange data_range("data", profiler::Category::data);
    for (int64_t micro = 0; micro < options_.grad_accum(); ++micro) {
      batches.push_back(narrowed(loader_.next(), step));
      f.items += items_of(batches.back());
      unit_ = counts_tokens(batches.back()) ? "tok" : "ex";
    }
  }
  {
    std::optional<HostReadGuard> no_reads;
    if (step_state_ && !read && options_.forbid_host_reads()) no_reads.emplace("a training step that is not logged");
    if (custom()) {
      custom_step_body(batches, step, f);
    } else if (captured_) {
      captured_->run(step, batches, [&](const std::vector<data::Batch>& step_batches, bool eager) {
        StepFigures unused;  // a captured step reads nothing (its figures stay on the device)
        step_body(step_batches, /*read=*/false, /*ranges=*/eager, eager ? f : unused);
      });
    } else {
      step_body(batches, read, /*ranges=*/true, f);
    }
  }
  if (step_state_ && read) read_device_figures(f);
  if (dist::Communicator* comm = options_.communicator()) {
    if (read) comm->all_reduce(&f.loss, 1, DType::f64, dist::ReduceOp::avg).wait();  // same steps on every rank
    f.items *= comm->world_size();
  }
  f.seconds = seconds_since(start);
  f.runtime = runtime_counters() - runtime_before;
  return f;
}

void Trainer::step_body(const std::vector<data::Batch>& batches, bool read, bool ranges, StepFigures& f) {
  using profiler::Category;
  const int64_t micro_batches = int64_t(batches.size());
  const bool on_device = step_state_.has_value();
  std::optional<profiler::ScopedRange> phase;
  auto enter = [&](const char* name, Category category, const Device* device) {
    if (!ranges) return;
    if (device)
      phase.emplace(name, category, *device);
    else
      phase.emplace(name, category);
  };
  if (on_device) step_state_->loss_sum.zero_();
  // Each micro-batch's loss is divided by their number, so the summed gradients are those of the
  // mean over all of them; the scaler multiplies it by S for fp16 (1 otherwise). Only the last
  // micro-batch's backward communicates.
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    const data::Batch& batch = batches[size_t(micro)];
    const Device device = batch[0].device();
    optimizer_.set_gradient_sync(micro == micro_batches - 1);
    enter("forward", Category::forward, &device);
    const Tensor loss = micro_batch_loss(batch, micro_batches);
    enter("backward", Category::backward, &device);
    scaler_.scale(loss).backward();
    phase.reset();
    if (on_device) {  // summed in double in micro-batch order, as the host sum was: no read
      step_state_->add_loss(loss);
    } else {
      f.loss += loss.item();
    }
  }
  enter("optimizer", Category::optimizer, nullptr);
  if (on_device) {
    optimizer_step_on_device();
  } else {
    // unscale -> clip -> step -> update. A step with inf/NaN gradients is skipped: the weights and
    // the schedule stay where they are.
    scaler_.unscale_(optimizer_);
    f.grad_norm = options_.clip() > 0 ? optimizer_.clip_grad_norm(options_.clip()) : NAN;
    if (options_.clip_value() > 0) optim::clip_grad_value_(optimizer_.parameters(), options_.clip_value());
    f.lr = schedule_ ? schedule_->lr(optimizer_steps_) : NAN;
    if (plateau_) f.lr = schedule_ ? std::min(f.lr, plateau_->lr()) : plateau_->lr();
    if (schedule_ || plateau_) optimizer_.set_lr(f.lr);
    if (scaler_.step(optimizer_)) {
      ++optimizer_steps_;
      if (ema_) ema_->update();
    } else if (!scaler_.enabled())
      ++unscaled_skips_;  // a sharded optimizer found inf/NaN itself (the scaler counts only its own)
    scaler_.update();
    if (read && scaler_.enabled()) f.scale = scaler_.scale_value(), f.skipped = scaler_.skipped_steps();
  }
  optimizer_.zero_grad();
}

void Trainer::custom_step_body(const std::vector<data::Batch>& batches, int64_t step, StepFigures& f) {
  for (UpdateState& u : updates_) {
    u.spec.optimizer->zero_grad();
    u.backwards = 0;
    u.stepped = false;
    u.lr = u.grad_norm = NAN;
  }
  StepContext context(updates_, batches, step);
  custom_step_(context);
  bool stepped = false;
  int64_t steps = 0;
  for (const UpdateState& u : updates_) stepped = stepped || u.stepped, steps += u.steps;
  if (stepped && ema_) ema_->update();
  optimizer_steps_ = steps;
  f.logged = context.logged();
  f.loss = f.logged.empty() ? NAN : f.logged.front().second;
}

void Trainer::check_graph_preconditions() const {
  const TrainerOptions& o = options_;
  const char* why = nullptr;
  if (!device_.is_cuda())
    why = "the model is not on a CUDA device";
  else if (!step_state_)
    why =
        "the step is not taken on the device (it needs an optimizer that decides on the device -- SGD, AdamW, "
        "Adam, RMSprop, Adagrad, Lion, or ZeRO over AdamW without optimizer offload -- and a schedule with a "
        "device form)";
  else if ((o.communicator() != nullptr && o.communicator()->world_size() > 1) || optimizer_.is_sharded())
    why = "data parallelism or a sharded (ZeRO) optimizer is on (capturing their collectives is not supported yet)";
  else if (o.offload_activations() != OffloadMode::off)
    why = "activation offload is on (its host copies are not captured)";
  else if (o.seq_warmup_steps() > 0)
    why = "the sequence-length warmup changes the batch shapes during the run";
  else if (o.graph_warmup() < 1)
    why = "graph_warmup is below 1 (the captured step needs the state an eager step creates: Adam moments, caches)";
  HG_CHECK(why == nullptr, kWho, " cuda_graph: ", why, "; expected a single-process run ON THE DEVICE on a CUDA device");
}

void Trainer::optimizer_step_on_device() {
  StepState& state = *step_state_;
  optim::DeviceStep& device = *optimizer_.device_step();
  NoGradGuard no_grad;
  scaler_.unscale_on_device(optimizer_);
  // A sharded optimizer checks inf/NaN itself when no scaler does (it skips such a step): here on the
  // device, as the scaler would -- an unscale pass by 1 (the gradients keep their bits) writing a flag
  // that its step's kernels read -- instead of from its norm on the host.
  const bool own_check = !scaler_.enabled() && optimizer_.is_sharded();
  if (own_check) device.unscale(state.one, state.found_inf);
  if (options_.clip() > 0) device.clip_grad_norm(options_.clip(), state.sum_of_squares);
  Tensor lr;  // undefined without a schedule: the optimizer's own
  if (device_schedule_) {
    optim::write_lr_on_device(*device_schedule_, state.step_count, state.lr);
    lr = state.lr;
  }
  const bool stepped = scaler_.enabled() ? scaler_.step_on_device(optimizer_, lr)
                                         : device.step(lr, own_check ? state.found_inf : Tensor());
  if (stepped)  // t advances unless the device found inf/NaN
    state.count_step(own_check ? state.found_inf : scaler_.found_inf_tensor());
  else
    ++unscaled_skips_;
  scaler_.update();
}

void Trainer::read_device_figures(StepFigures& f) {
  const StepState::Figures v = step_state_->read(scaler_);  // the step's one read
  f.loss = v.loss_sum;
  f.grad_norm = options_.clip() > 0 ? std::sqrt(v.sum_of_squares) : NAN;
  f.lr = schedule_ ? v.lr : NAN;
  f.scale = v.loss_scale;
  f.skipped = v.skipped;
  optimizer_steps_ = v.steps;
  // Without a scaler, the steps a sharded optimizer skipped on its own inf/NaN check are the steps run
  // that t did not count.
  if (!scaler_.enabled() && optimizer_.is_sharded()) unscaled_skips_ = completed_steps_ + 1 - optimizer_steps_;
}

bool Trainer::reports_runtime() const { return device_.is_cuda(); }

namespace {
// cuda_<counter> for every runtime counter of the step (kernels/runtime_counters.h).
void set_runtime_counters(metrics::Record& record, const RuntimeCounters& runtime) {
  for (int i = 0; i < kRuntimeCounterCount; ++i)
    record.set(std::string("cuda_") + runtime_counter_name(RuntimeCounter(i)), double(runtime.value[size_t(i)]));
}
}  // namespace

metrics::Record Trainer::report_step(int64_t step, const StepFigures& f, bool keep) const {
  const MemoryStats memory = memory_stats(device_);
  std::string line;
  char part[160];
  if (custom()) {  // the step's logged figures, then each Update's lr and scale
    std::snprintf(part, sizeof part, "step %6lld/%lld", (long long)step, (long long)options_.steps());
    line += part;
    for (const auto& [name, value] : f.logged) line += " | " + name + " " + std::to_string(value);
    for (const UpdateState& u : updates_) {
      if (u.spec.schedule) std::snprintf(part, sizeof part, " | lr_%s %.2e", u.spec.name.c_str(), u.lr), line += part;
      if (u.spec.scaler.enabled())
        std::snprintf(part, sizeof part, " | scale_%s %g", u.spec.name.c_str(), u.spec.scaler.scale_value()),
            line += part;
    }
  } else {
    std::snprintf(part, sizeof part, "step %6lld/%lld | loss %.4f", (long long)step, (long long)options_.steps(),
                  f.loss);
    line += part;
  }
  if (schedule_ || plateau_) std::snprintf(part, sizeof part, " | lr %.2e", f.lr), line += part;
  std::snprintf(part, sizeof part, " | %7.0f %s/s | %6.1f ms/step | mem %s/%s MiB (reserved %s)", f.items / f.seconds,
                unit_, f.seconds * 1e3, megabytes(memory.allocated_bytes).c_str(),
                megabytes(memory.peak_allocated_bytes).c_str(), megabytes(memory.reserved_bytes).c_str());
  line += part;
  if (scaler_.enabled()) {
    std::snprintf(part, sizeof part, " | scale %g | skipped %lld", f.scale, (long long)f.skipped);
    line += part;
  }
  if (const std::string state = custom() ? std::string() : optimizer_.state_summary(); !state.empty())
    line += " | " + state;
  if (reports_runtime() && !options_.monitor().profile_path().empty()) {  // --profile: what the step asked of CUDA
    const RuntimeCounters& r = f.runtime;
    using C = RuntimeCounter;
    std::snprintf(part, sizeof part,
                  " | cuda: %lld launches, %lld gemm, %lld graph | %lld allocs, %lld frees | %lld device syncs, "
                  "%lld host waits | H2D %lld B, D2H %lld B",
                  (long long)r[C::kernel_launches], (long long)r[C::blas_calls], (long long)r[C::graph_launches],
                  (long long)(r[C::device_allocs] + r[C::pinned_allocs]),
                  (long long)(r[C::device_frees] + r[C::pinned_frees]), (long long)r[C::device_syncs],
                  (long long)r.host_waits(), (long long)r[C::h2d_bytes], (long long)r[C::d2h_bytes]);
    line += part;
  }
  progress_->step_line(line, keep);
  metrics::Record record(step);
  if (!custom() || !f.logged.empty()) record.set("loss", f.loss);
  if (schedule_ || plateau_) record.set("lr", f.lr);
  for (const auto& [name, value] : f.logged) record.set(name, value);
  for (const UpdateState& u : updates_) {
    if (u.spec.schedule) record.set("lr_" + u.spec.name, u.lr);
    if (u.spec.clip > 0) record.set("grad_norm_" + u.spec.name, u.grad_norm);
    if (u.spec.scaler.enabled()) record.set("loss_scale_" + u.spec.name, u.spec.scaler.scale_value());
  }
  record.set(std::strcmp(unit_, "tok") == 0 ? "tokens_per_s" : "examples_per_s", f.items / f.seconds);
  record.set("step_ms", f.seconds * 1e3);
  if (options_.clip() > 0) record.set("grad_norm", f.grad_norm);
  if (scaler_.enabled()) record.set("loss_scale", f.scale).set("skipped_steps", double(f.skipped));
  if (reports_runtime()) set_runtime_counters(record, f.runtime);
  return record;
}

bool Trainer::evaluate(int64_t step, metrics::Record& record, TrainingMonitor& monitor) {
  Evaluation evaluation;
  {
    profiler::ScopedRange eval_range("evaluate", profiler::Category::other);
    NoGradGuard no_grad;
    struct EvalMode {  // back to training mode however the evaluator leaves
      nn::Module& model;
      ~EvalMode() { model.train(); }
    } eval_mode{model_};
    model_.eval();
    std::optional<EmaScope> averaged;  // EmaOptions().evaluate(true): the evaluator sees the EMA weights
    if (ema_ && ema_->options().evaluate()) averaged.emplace(*ema_);
    evaluation = evaluate_();
  }
  record.set(options_.metric_name(), evaluation.value);
  for (const auto& [name, value] : evaluation.metrics) record.set(name, value);
  bool stop = false;
  {
    std::unique_ptr<optim::Optimizer::WholeParameters> whole;  // ZeRO stage 3: snapshots need the weights
    if (monitor.early_stopping()) whole = optimizer_.whole_parameters();
    stop = monitor.evaluated(step, evaluation.value);
  }
  if (plateau_) plateau_->step(evaluation.value);
  progress_->line("eval  step " + std::to_string(step) + " | " + evaluation.text);
  evaluations_.emplace_back(step, std::move(evaluation));
  return stop;
}

void Trainer::save_checkpoint(int64_t step, double loss) {
  const auto start = Clock::now();
  loader_position_ = loader_.state();
  if (plateau_) plateau_state_ = plateau_->state();
  std::string path;
  try {
    path = checkpoints_->save(state_, step);
  } catch (const CheckpointWriteError& e) {
    // The directory is as it was: its newest entry of this run's layout is intact. Listing it may fail
    // too (the same broken disk): that must not replace the write error.
    std::string previous;
    try {
      const bool sharded = optimizer_.is_sharded();
      for (const CheckpointDirectory::Entry& entry : checkpoints_->list())
        if (entry.sharded == sharded) previous = "'" + entry.path + "'";
      if (previous.empty()) previous = "none yet: a resumed run would start at step 0";
    } catch (const std::exception& list_error) {
      previous = std::string("unknown: the directory cannot be listed: ") + list_error.what();
    }
    if (!options_.continue_after_checkpoint_error())
      throw CheckpointWriteError(e.entry(), std::string(e.what()) + " | the newest intact checkpoint: " + previous);
    checkpoint_failures_ += 1;
    last_checkpoint_failed_ = true;
    std::string warning = "warning: " + std::string(e.what()) + " | training continues; the newest intact checkpoint: " +
                          previous;
    progress_->line(warning);  // rank 0's, on stdout with the step lines
    return;
  }
  last_checkpoint_failed_ = false;
  char saved[512];
  std::snprintf(saved, sizeof saved, "checkpoint step %lld -> %s | loss %.9g | %s MiB in %.0f ms", (long long)step,
                path.c_str(), loss, megabytes(bytes_on_disk(path)).c_str(), 1e3 * seconds_since(start));
  progress_->line(saved);
}

TrainResult Trainer::fit() {
  using profiler::Category;
  const TrainerOptions& o = options_;
  if (o.resume()) resume();
  checkpoint_failures_ = 0;
  last_checkpoint_failed_ = false;
  const int64_t last_step = o.stop_after() > 0 ? std::min(o.steps(), o.stop_after()) : o.steps();
  const std::vector<Tensor> parameters = model_.parameters();
  MonitorOptions monitor_options = o.monitor();
  if (!parameters.empty()) monitor_options.device(parameters.front().device());
  if (rank() != 0) {
    monitor_options.metrics_path("");  // one log: rank 0's (the values agree)
    if (!monitor_options.profile_path().empty())
      monitor_options.profile_path(rank_path(o.monitor().profile_path(), rank()));
  }
  device_ = monitor_options.device();
  TrainingMonitor monitor(monitor_options, parameters, o.metric_mode());
  Progress progress(/*enabled=*/rank() == 0);
  progress_ = &progress;

  TrainResult result;
  result.first_step = completed_steps_ + 1;
  double last_loss = NAN;
  model_.train();
  step_state_.reset();
  device_schedule_.reset();
  if (steps_on_device() && !parameters.empty()) {  // the step's scalars, made once (see ON THE DEVICE)
    step_state_.emplace(parameters.front().device(), optimizer_steps_);
    if (schedule_) device_schedule_ = schedule_->device_form();
  }
  captured_.reset();
  if (o.cuda_graph()) {
    check_graph_preconditions();
    captured_ = std::make_unique<CapturedStep>(device_, completed_steps_ + 1, o.graph_warmup());
  }
  const auto start = Clock::now();
  for (int64_t step = completed_steps_ + 1; step <= last_step; ++step) {
    monitor.begin_step(step);
    std::optional<profiler::ScopedRange> step_range(std::in_place, "step", Category::step);
    const bool eval_now = (o.eval_every() > 0 && step % o.eval_every() == 0) || step == o.steps();
    const bool checkpoint_now =
        checkpoints_ && ((o.checkpoint_every() > 0 && step % o.checkpoint_every() == 0) || step == last_step);
    const bool keep = eval_now || step % o.log_every() == 0;
    // The steps that read their figures: logged ones -- and on the CPU every step (its "device memory"
    // is host memory: reading costs nothing), unless the debug option forbids reads.
    const bool read = keep || checkpoint_now || step == last_step || (device_.is_cpu() && !o.forbid_host_reads());
    const StepFigures f = run_step(step, read);
    if (read) last_loss = f.loss;
    totals_.steps += 1;
    totals_.seconds += f.seconds;
    totals_.items += f.items;
    metrics::Record record(step);
    if (read) {
      record = report_step(step, f, keep);
    } else {  // what the host knows without reading the device
      record.set(std::strcmp(unit_, "tok") == 0 ? "tokens_per_s" : "examples_per_s", f.items / f.seconds);
      record.set("step_ms", f.seconds * 1e3);
      if (reports_runtime()) set_runtime_counters(record, f.runtime);
    }
    step_range.reset();
    const bool stop = eval_now && evaluate_ && evaluate(step, record, monitor);
    completed_steps_ = step;
    if (checkpoint_now) save_checkpoint(step, last_loss);
    monitor.end_step(std::move(record));
    if (stop) {
      progress.line("early stopping: no improvement in " + std::to_string(o.monitor().early_stop_patience()) +
                    " evaluations, stopping at step " + std::to_string(step));
      result.stopped_early = true;
      break;
    }
  }
  std::string restored;
  {
    std::unique_ptr<optim::Optimizer::WholeParameters> whole;  // stage 3: restored into the whole units
    if (monitor.early_stopping()) whole = optimizer_.whole_parameters();
    restored = monitor.finish();
    if (whole) whole->commit();
  }
  if (!evaluations_.empty()) result.evaluation = evaluations_.back().second;
  if (!restored.empty()) {
    progress.line(restored);
    for (const auto& [step, evaluation] : evaluations_)
      if (step == monitor.best_step()) result.evaluation = evaluation;
  }
  progress_ = nullptr;
  result.last_step = completed_steps_;
  result.optimizer_steps = optimizer_steps_;
  result.skipped_steps = scaler_.skipped_steps() + unscaled_skips_;
  for (const UpdateState& u : updates_) result.skipped_steps += u.spec.scaler.skipped_steps();
  result.final_loss = last_loss;
  result.seconds = seconds_since(start);
  result.data_wait_seconds = loader_.wait_seconds();
  result.throughput = totals_.seconds > 0 ? totals_.items / totals_.seconds : 0.0;
  result.peak_memory_bytes = memory_stats(device_).peak_allocated_bytes;
  result.checkpoint_failures = checkpoint_failures_;
  result.final_checkpoint_failed = checkpoint_failures_ > 0 && last_checkpoint_failed_;
  print_summary(result);
  return result;
}

void Trainer::print_summary(const TrainResult& r) const {
  if (rank() != 0) return;
  if (totals_.steps == 0) {
    std::printf("summary: 0 steps: step %lld of %lld was done already\n", (long long)completed_steps_,
                (long long)options_.steps());
    return;
  }
  std::printf("summary: %lld steps in %.1f s | final loss %.4f", (long long)totals_.steps, r.seconds, r.final_loss);
  if (r.evaluation) std::printf(" | %s", r.evaluation->text.c_str());
  if (scaler_.enabled()) std::printf(" | %lld skipped steps", (long long)r.skipped_steps);
  std::printf(" | waiting for data %.2f%% of the time",
              totals_.seconds > 0 ? 100.0 * r.data_wait_seconds / totals_.seconds : 0.0);
  std::printf(" | %.0f %s/s | %.1f ms/step | peak memory %s MiB", r.throughput, unit_,
              totals_.steps > 0 ? 1e3 * totals_.seconds / double(totals_.steps) : 0.0,
              megabytes(r.peak_memory_bytes).c_str());
  if (r.checkpoint_failures > 0)
    std::printf(" | %lld checkpoint(s) not written%s", (long long)r.checkpoint_failures,
                r.final_checkpoint_failed ? ", the final one among them" : "");
  std::printf("\n");
}

void Trainer::save_model(const std::string& path, const std::function<void(const std::string&)>& write) {
  {
    const auto whole = optimizer_.whole_parameters();  // ZeRO stage 3: gathered for rank 0 to write
    dist::on_rank0(options_.communicator(), "save the model", [&] {
      if (write)
        write(path);
      else
        safetensors::save(path, model_.state_dict());
    });
  }
  if (optim::ShardedState* shards = optimizer_.sharded_state()) shards->save_state(path);  // + each rank's shard
}

}  // namespace hg::train
