// The block scheduler (see block.h for the semantics it enforces).
#include "kernels/emu/block.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/emu/audit_log.h"
#include "kernels/error.h"

#if HG_EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace hg::emu::detail {

std::string kernel_name(const void* kernel);  // launch.cpp

namespace {

// Fiber stacks are reserved, not committed: only the pages a kernel touches cost memory. ASan frames
// (redzones) and exceptions thrown inside kernels need more room than plain kernel code.
constexpr size_t kStackBytes = HG_EMU_ASAN ? 512 * 1024 : 256 * 1024;
constexpr size_t kDynamicSharedCapacity = kSharedMemPerBlockOptin;

thread_local __attribute__((tls_model("initial-exec"))) BlockRunner* t_runner = nullptr;

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

enum class Order { Forward, Reverse, Shuffled };

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync:
      return "__syncwarp";
    case WarpOp::Shfl:
      return "__shfl_sync";
    case WarpOp::ShflUp:
      return "__shfl_up_sync";
    case WarpOp::ShflDown:
      return "__shfl_down_sync";
    case WarpOp::ShflXor:
      return "__shfl_xor_sync";
    case WarpOp::Ballot:
      return "__ballot_sync";
    case WarpOp::Any:
      return "__any_sync";
    case WarpOp::All:
      return "__all_sync";
    case WarpOp::ReduceAddU:
    case WarpOp::ReduceAddI:
      return "__reduce_add_sync";
    case WarpOp::ReduceMinU:
    case WarpOp::ReduceMinI:
      return "__reduce_min_sync";
    case WarpOp::ReduceMaxU:
    case WarpOp::ReduceMaxI:
      return "__reduce_max_sync";
    case WarpOp::ReduceAnd:
      return "__reduce_and_sync";
    case WarpOp::ReduceOr:
      return "__reduce_or_sync";
    case WarpOp::ReduceXor:
      return "__reduce_xor_sync";
    case WarpOp::ActiveMask:
      return "__activemask";
    case WarpOp::WmmaLoad:
      return "wmma::load_matrix_sync";
    case WarpOp::WmmaStore:
      return "wmma::store_matrix_sync";
    case WarpOp::WmmaMma:
      return "wmma::mma_sync";
  }
  return "?";
}

const char* barrier_name(BarrierOp op) {
  switch (op) {
    case BarrierOp::Sync:
      return "__syncthreads";
    case BarrierOp::Count:
      return "__syncthreads_count";
    case BarrierOp::And:
      return "__syncthreads_and";
    case BarrierOp::Or:
      return "__syncthreads_or";
  }
  return "?";
}

// "fill.cu:42" (the file's name without its directories).
std::string site_text(const Site& site) {
  const char* file = site.file;
  const char* slash = std::strrchr(file, '/');
  return ::hg::detail::concat(slash ? slash + 1 : file, ":", site.line);
}

bool same_site(const Site& a, const Site& b) { return a.line == b.line && std::strcmp(a.file, b.file) == 0; }

std::string hex(unsigned v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

// "0-15, 17, 20-21"
std::string lanes_text(unsigned lanes) {
  std::string out;
  for (int lane = 0; lane < 32;) {
    if (!(lanes >> lane & 1u)) {
      ++lane;
      continue;
    }
    int end = lane;
    while (end + 1 < 32 && (lanes >> (end + 1) & 1u)) ++end;
    if (!out.empty()) out += ", ";
    out += std::to_string(lane);
    if (end > lane) {
      out += '-';
      out += std::to_string(end);
    }
    lane = end + 1;
  }
  return out.empty() ? "none" : out;
}

std::string thread_text(const Fiber& f) {
  return ::hg::detail::concat("(", f.thread_idx.x, ", ", f.thread_idx.y, ", ", f.thread_idx.z, ")");
}

}  // namespace

// ---- public entry points of emu.h -------------------------------------------------------------------

const void* warp_collective(WarpOp op, unsigned mask, const void* value, unsigned size, int param, int width,
                            const Site& site) {
  return t_runner->collective(op, mask, value, size, param, width, site);
}

int block_barrier(BarrierOp op, int predicate, const Site& site) { return t_runner->barrier(op, predicate, site); }

unsigned active_mask(const Site& site) { return t_runner->active_mask(site); }

void trap(const char* what, const Site& site) {
  t_runner->fail(::hg::detail::concat(what, " called at ", site_text(site)));
}

// ---- the runner ------------------------------------------------------------------------------------

BlockRunner::BlockRunner() {
  init_thread_context(scheduler_);
  fibers_.reserve(kMaxThreadsPerBlock);  // never reallocated: fibers point into it
  dynamic_shared_ = static_cast<unsigned char*>(std::aligned_alloc(128, kDynamicSharedCapacity));
  HG_CHECK(dynamic_shared_, "[emu] cannot allocate ", kDynamicSharedCapacity, " bytes of shared memory");
}

BlockRunner::~BlockRunner() {
  for (Fiber& f : fibers_) free_stack(f.context.stack);
#if HG_EMU_ASAN
  __asan_unpoison_memory_region(dynamic_shared_, kDynamicSharedCapacity);
#endif
  std::free(dynamic_shared_);
}

BlockRunner& BlockRunner::this_thread() {
  static thread_local BlockRunner runner;
  return runner;
}

void BlockRunner::run(const GridJob& job, uint3 block_idx) {
  job_ = &job;
  block_idx_ = block_idx;
  block_linear_ = block_idx.x + uint64_t(job.grid.x) * (block_idx.y + uint64_t(job.grid.y) * block_idx.z);
  const dim3 b = job.block;
  n_threads_ = b.x * b.y * b.z;
  while (fibers_.size() < n_threads_) {
    fibers_.emplace_back();
    fibers_.back().context.stack = allocate_stack(kStackBytes);
  }

  t_runner = this;
  t_thread = nullptr;
  t_block_idx = block_idx;
  t_block_dim = job.block;
  t_grid_dim = job.grid;
#if HG_EMU_ASAN
  __asan_unpoison_memory_region(dynamic_shared_, job.shared_bytes);
  __asan_poison_memory_region(dynamic_shared_ + job.shared_bytes, kDynamicSharedCapacity - job.shared_bytes);
#endif
  std::memset(dynamic_shared_, 0xff, job.shared_bytes);
  t_dynamic_shared = dynamic_shared_;
  if (audit::detail::g_recording) audit::detail::begin_block(block_idx, job.block);

  for (uint32_t i = 0; i < n_threads_; ++i) {
    Fiber& f = fibers_[i];
    f.thread_idx = uint3{i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
    f.linear = i;
    f.state = FiberState::Runnable;
    prepare(f.context, &BlockRunner::fiber_main, &f);
  }
  const uint32_t n_warps = (n_threads_ + 31) / 32;
  warps_.assign(n_warps, Warp{});
  for (uint32_t w = 0; w < n_warps; ++w) {
    const uint32_t lanes = std::min<uint32_t>(32, n_threads_ - 32 * w);
    warps_[w].alive = lanes == 32 ? ~0u : (1u << lanes) - 1u;
  }
  n_exited_ = 0;
  n_at_barrier_ = 0;
  phase_ = 0;
  error_ = nullptr;
  start_phase();

  for (;;) {
    if (queue_head_ < queue_.size()) {
      Fiber& f = fibers_[queue_[queue_head_++]];
      switch_context(scheduler_, f.context);
      t_thread = nullptr;
    }
    if (error_) {
      abandon();
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
    if (queue_head_ < queue_.size()) continue;
    if (n_exited_ == n_threads_) break;
    bool released = false;
    for (Warp& warp : warps_) released |= try_complete_active_mask(warp, nullptr, true);
    if (released) continue;
    if (n_at_barrier_ == n_threads_ - n_exited_) {
      release_barrier();
    } else {
      report_deadlock();
    }
  }
  if (audit::detail::g_recording) audit::detail::end_block();
  t_runner = nullptr;
}

void BlockRunner::fiber_main(void* fiber) {
  Fiber& self = *static_cast<Fiber*>(fiber);
  on_fiber_start(self.context);
  t_thread = &self;
  BlockRunner& runner = *t_runner;
  runner.run_body();
  runner.on_exit(self);
  exit_to(self.context, runner.next_context());
  __builtin_unreachable();
}

void BlockRunner::run_body() noexcept {
  try {
    job_->invoke(job_->closure);
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
}

void BlockRunner::on_exit(Fiber& self) {
  self.state = FiberState::Exited;
  ++n_exited_;
  if (error_) return;
  Warp& warp = warps_[self.linear >> 5];
  warp.alive &= ~(1u << (self.linear & 31));
  // Collectives of this warp may have been waiting only for lanes that have now all exited.
  for (int g = warp.n_groups - 1; g >= 0; --g) {
    if (g < warp.n_groups) try_complete(warp, g, nullptr);
  }
  try_complete_active_mask(warp, nullptr, false);
}

Context& BlockRunner::next_context() {
  if (error_ || queue_head_ >= queue_.size()) {
    queue_.clear();
    queue_head_ = 0;
    return scheduler_;
  }
  return fibers_[queue_[queue_head_++]].context;
}

void BlockRunner::suspend(Fiber& self) {
  switch_context(self.context, next_context());
  t_thread = &self;
}

// Forward, reverse or shuffled, by block and phase: neighbouring blocks start with different orders,
// and every barrier changes the order again.
void BlockRunner::start_phase() {
  queue_.clear();
  queue_head_ = 0;
  for (uint32_t i = 0; i < n_threads_; ++i) {
    if (fibers_[i].state == FiberState::Runnable) queue_.push_back(i);
  }
  const uint64_t h = mix(job_->seed ^ mix(block_linear_ * 0x100000001b3ull + phase_));
  switch (static_cast<Order>((block_linear_ + phase_ + job_->seed) % 3)) {
    case Order::Forward:
      break;
    case Order::Reverse:
      std::reverse(queue_.begin(), queue_.end());
      break;
    case Order::Shuffled: {
      uint64_t state = h;
      for (size_t i = queue_.size(); i > 1; --i) {
        state = mix(state);
        std::swap(queue_[i - 1], queue_[state % i]);
      }
      break;
    }
  }
}

void BlockRunner::push_released(Warp& warp, unsigned lanes, const Fiber* running) {
  const uint32_t base = uint32_t(&warp - warps_.data()) * 32;
  const bool reverse = static_cast<Order>((block_linear_ + phase_ + job_->seed) % 3) == Order::Reverse;
  for (int k = 0; k < 32; ++k) {
    const int lane = reverse ? 31 - k : k;
    if (!(lanes >> lane & 1u)) continue;
    Fiber& f = fibers_[base + lane];
    f.state = FiberState::Runnable;
    if (&f != running) queue_.push_back(f.linear);
  }
}

bool BlockRunner::try_complete(Warp& warp, int group, const Fiber* running) {
  const WarpGroup g = warp.groups[group];
  const unsigned required = g.mask & warp.alive;
  if ((g.arrived & required) != required) return false;
  // Of the warp collectives only __syncwarp orders memory between its lanes (CUDA's memory model): the
  // race check joins the lanes' clocks for it alone.
  if (audit::detail::g_recording && fibers_[uint32_t(&warp - warps_.data()) * 32 + __builtin_ctz(g.arrived)].op == WarpOp::Sync) {
    audit::detail::on_warp_sync(uint32_t(&warp - warps_.data()), g.arrived);
  }
  compute_results(warp, g);
  warp.groups[group] = warp.groups[--warp.n_groups];
  push_released(warp, g.arrived, running);
  return true;
}

void BlockRunner::compute_results(Warp& warp, const WarpGroup& group) {
  const uint32_t base = uint32_t(&warp - warps_.data()) * 32;
  auto lane_fiber = [&](int lane) -> Fiber& { return fibers_[base + lane]; };
  const WarpOp op = lane_fiber(__builtin_ctz(group.arrived)).op;
  auto for_each_lane = [&](auto&& body) {
    for (unsigned lanes = group.arrived; lanes; lanes &= lanes - 1) body(__builtin_ctz(lanes));
  };
  switch (op) {
    case WarpOp::Sync:
    case WarpOp::ActiveMask:
      return;
    case WarpOp::Shfl:
    case WarpOp::ShflUp:
    case WarpOp::ShflDown:
    case WarpOp::ShflXor:
      for_each_lane([&](int lane) {
        Fiber& f = lane_fiber(lane);
        const int w = f.width;
        const int within = lane & (w - 1), segment = lane & ~(w - 1);
        const unsigned delta = unsigned(f.param);
        int src = lane;
        if (op == WarpOp::Shfl) {
          src = segment + (f.param & (w - 1));
        } else if (op == WarpOp::ShflUp) {
          if (unsigned(within) >= delta) src = lane - int(delta);
        } else if (op == WarpOp::ShflDown) {
          if (unsigned(within) + delta < unsigned(w)) src = lane + int(delta);
        } else {
          src = lane ^ (f.param & 31);
          if ((src & ~(w - 1)) > segment) src = lane;  // later sub-warps are out of reach: own value
        }
        if (group.arrived >> src & 1u) {
          std::memcpy(f.result, lane_fiber(src).value, f.size);
        } else {
          std::memset(f.result, 0xff, f.size);  // a lane that does not take part: undefined on a GPU
        }
      });
      return;
    case WarpOp::Ballot:
    case WarpOp::Any:
    case WarpOp::All: {
      unsigned ballot = 0;
      for_each_lane([&](int lane) {
        int v;
        std::memcpy(&v, lane_fiber(lane).value, sizeof v);
        if (v) ballot |= 1u << lane;
      });
      const unsigned out = op == WarpOp::Ballot ? ballot
                           : op == WarpOp::Any  ? unsigned(ballot != 0)
                                                : unsigned(ballot == group.arrived);
      for_each_lane([&](int lane) { std::memcpy(lane_fiber(lane).result, &out, sizeof out); });
      return;
    }
    case WarpOp::WmmaLoad:
    case WarpOp::WmmaStore:
    case WarpOp::WmmaMma: {
      warp.wmma_records.fill(nullptr);
      for_each_lane([&](int lane) { std::memcpy(&warp.wmma_records[lane], lane_fiber(lane).value, sizeof(void*)); });
      const WmmaResult out{warp.wmma_records.data(), group.arrived};
      static_assert(sizeof out <= sizeof Fiber::result);
      for_each_lane([&](int lane) { std::memcpy(lane_fiber(lane).result, &out, sizeof out); });
      return;
    }
    default: {
      // __reduce_*_sync over 32-bit values, signed or unsigned as the op says.
      bool first = true;
      uint32_t acc = 0;
      for_each_lane([&](int lane) {
        uint32_t v;
        std::memcpy(&v, lane_fiber(lane).value, sizeof v);
        if (first) {
          acc = v;
          first = false;
          return;
        }
        switch (op) {
          case WarpOp::ReduceAddU:
          case WarpOp::ReduceAddI:
            acc += v;
            break;
          case WarpOp::ReduceMinU:
            acc = std::min(acc, v);
            break;
          case WarpOp::ReduceMaxU:
            acc = std::max(acc, v);
            break;
          case WarpOp::ReduceMinI:
            acc = uint32_t(std::min(int32_t(acc), int32_t(v)));
            break;
          case WarpOp::ReduceMaxI:
            acc = uint32_t(std::max(int32_t(acc), int32_t(v)));
            break;
          case WarpOp::ReduceAnd:
            acc &= v;
            break;
          case WarpOp::ReduceOr:
            acc |= v;
            break;
          case WarpOp::ReduceXor:
            acc ^= v;
            break;
          default:
            break;
        }
      });
      for_each_lane([&](int lane) { std::memcpy(lane_fiber(lane).result, &acc, sizeof acc); });
      return;
    }
  }
}

const void* BlockRunner::collective(WarpOp op, unsigned mask, const void* value, unsigned size, int param, int width,
                                    const Site& site) {
  Fiber& self = current();
  const int lane = int(self.linear & 31);
  Warp& warp = warps_[self.linear >> 5];
  if (!(mask >> lane & 1u)) {
    fail(::hg::detail::concat(op_name(op), " at ", site_text(site), ": mask ", hex(mask),
                              " does not include the calling lane ", lane));
  }
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    fail(::hg::detail::concat(op_name(op), " at ", site_text(site), ": width ", width,
                              " is not a power of 2 in [1, 32]"));
  }
  self.op = op;
  self.mask = mask;
  self.size = uint8_t(size);
  self.param = param;
  self.width = width;
  self.site = site;
  if (size) std::memcpy(self.value, value, size);

  int group = -1;
  for (int g = 0; g < warp.n_groups; ++g) {
    const WarpGroup& other = warp.groups[g];
    const Fiber& first = fibers_[(self.linear & ~31u) + __builtin_ctz(other.arrived)];
    if (other.mask == mask) {
      if (first.op != op || first.size != size || first.width != width) {
        fail(::hg::detail::concat("lanes of warp ", self.linear >> 5, " meet in different warp collectives: lane ",
                                  lane, " calls ", op_name(op), " at ", site_text(site), ", lane ", first.linear & 31,
                                  " called ", op_name(first.op), " at ", site_text(first.site), " (same mask ",
                                  hex(mask), ")"));
      }
      group = g;
      break;
    }
    if (other.mask & mask) {
      fail(::hg::detail::concat(op_name(op), " at ", site_text(site), " with mask ", hex(mask), ": lanes ",
                                lanes_text(other.arrived), " of warp ", self.linear >> 5, " wait in ",
                                op_name(first.op), " at ", site_text(first.site), " with the overlapping mask ",
                                hex(other.mask), " (every lane of a mask must pass the same mask)"));
    }
  }
  if (group < 0) {
    group = warp.n_groups++;
    warp.groups[group] = WarpGroup{mask, 0};
  }
  warp.groups[group].arrived |= 1u << lane;
  self.state = FiberState::InCollective;
  if (!try_complete(warp, group, &self)) suspend(self);
  return self.result;
}

int BlockRunner::barrier(BarrierOp op, int predicate, const Site& site) {
  Fiber& self = current();
  self.state = FiberState::AtBarrier;
  self.barrier_op = op;
  self.predicate = predicate;
  self.site = site;
  ++n_at_barrier_;
  suspend(self);
  return barrier_result_;
}

unsigned BlockRunner::active_mask(const Site& site) {
  Fiber& self = current();
  Warp& warp = warps_[self.linear >> 5];
  self.op = WarpOp::ActiveMask;
  self.site = site;
  self.state = FiberState::InCollective;
  warp.in_active_mask |= 1u << (self.linear & 31);
  if (!try_complete_active_mask(warp, &self, false)) suspend(self);
  unsigned mask;
  std::memcpy(&mask, self.result, sizeof mask);
  return mask;
}

// Completes the warp's __activemask when all its non-exited lanes are in it, or (diverged_ok, when
// nothing else can run) with whichever lanes are.
bool BlockRunner::try_complete_active_mask(Warp& warp, const Fiber* running, bool diverged_ok) {
  const unsigned lanes = warp.in_active_mask;
  if (lanes == 0 || (!diverged_ok && lanes != warp.alive)) return false;
  const uint32_t base = uint32_t(&warp - warps_.data()) * 32;
  for (unsigned l = lanes; l; l &= l - 1) std::memcpy(fibers_[base + __builtin_ctz(l)].result, &lanes, sizeof lanes);
  warp.in_active_mask = 0;
  push_released(warp, lanes, running);
  return true;
}

std::string BlockRunner::where() const {
  return ::hg::detail::concat("kernel ", kernel_name(job_->kernel), ", block (", block_idx_.x, ", ", block_idx_.y, ", ",
                              block_idx_.z, ")");
}

void BlockRunner::fail(const std::string& what) const {
  std::string text = "[emu] " + where();
  if (t_thread) text += ", thread " + thread_text(current());
  throw Error(text + ": " + what);
}

// Every thread that has not exited waits at a barrier: release it, or report why it cannot be.
void BlockRunner::release_barrier() {
  const Fiber* first = nullptr;
  const Fiber* other_site = nullptr;
  int count = 0, all = 1, any = 0;
  for (uint32_t i = 0; i < n_threads_; ++i) {
    const Fiber& f = fibers_[i];
    if (f.state != FiberState::AtBarrier) continue;
    if (!first) first = &f;
    if (!other_site && (!same_site(f.site, first->site) || f.barrier_op != first->barrier_op)) other_site = &f;
    count += f.predicate != 0;
    all &= f.predicate != 0;
    any |= f.predicate != 0;
  }
  std::string problem;
  if (other_site) {
    problem = ::hg::detail::concat(
        "divergent barrier: threads wait at different barriers: ", barrier_name(first->barrier_op), " at ",
        site_text(first->site), " (e.g. thread ", thread_text(*first), ") and ", barrier_name(other_site->barrier_op),
        " at ", site_text(other_site->site), " (e.g. thread ", thread_text(*other_site),
        "); every thread of a block must reach the same __syncthreads");
  } else if (n_exited_ > 0) {
    const Fiber* exited = nullptr;
    for (uint32_t i = 0; i < n_threads_ && !exited; ++i) {
      if (fibers_[i].state == FiberState::Exited) exited = &fibers_[i];
    }
    problem =
        ::hg::detail::concat(barrier_name(first->barrier_op), " at ", site_text(first->site), " is reached by ",
                             n_at_barrier_, " threads, but ", n_exited_,
                             " threads of the block exited without reaching it (e.g. thread ", thread_text(*exited),
                             "); every thread of a block must reach each __syncthreads: guard the work "
                             "instead of returning early");
  }
  if (!problem.empty()) {
    std::string text = "[emu] " + where() + ": " + problem;
    abandon();
    throw Error(text);
  }
  if (audit::detail::g_recording) audit::detail::on_barrier();
  switch (first->barrier_op) {
    case BarrierOp::Sync:
      barrier_result_ = 0;
      break;
    case BarrierOp::Count:
      barrier_result_ = count;
      break;
    case BarrierOp::And:
      barrier_result_ = all;
      break;
    case BarrierOp::Or:
      barrier_result_ = any;
      break;
  }
  for (uint32_t i = 0; i < n_threads_; ++i) {
    if (fibers_[i].state == FiberState::AtBarrier) fibers_[i].state = FiberState::Runnable;
  }
  n_at_barrier_ = 0;
  ++phase_;
  start_phase();
}

void BlockRunner::report_deadlock() {
  std::ostringstream out;
  out << "[emu] " << where() << ": deadlock, no thread can proceed:";
  // Threads at barriers, by call site.
  std::vector<const Fiber*> sites;
  for (uint32_t i = 0; i < n_threads_; ++i) {
    const Fiber& f = fibers_[i];
    if (f.state != FiberState::AtBarrier) continue;
    bool seen = false;
    for (const Fiber* s : sites) seen = seen || same_site(s->site, f.site);
    if (seen) continue;
    sites.push_back(&f);
    int n = 0;
    for (uint32_t j = 0; j < n_threads_; ++j) {
      n += fibers_[j].state == FiberState::AtBarrier && same_site(fibers_[j].site, f.site);
    }
    out << " " << n << " threads wait at " << barrier_name(f.barrier_op) << " at " << site_text(f.site)
        << " (e.g. thread " << thread_text(f) << ");";
  }
  // Warp collectives that cannot complete.
  for (size_t w = 0; w < warps_.size(); ++w) {
    const Warp& warp = warps_[w];
    for (int g = 0; g < warp.n_groups; ++g) {
      const WarpGroup& group = warp.groups[g];
      const Fiber& first = fibers_[w * 32 + __builtin_ctz(group.arrived)];
      const unsigned missing = group.mask & warp.alive & ~group.arrived;
      out << " warp " << w << " lanes " << lanes_text(group.arrived) << " wait in " << op_name(first.op) << " at "
          << site_text(first.site) << " (mask " << hex(group.mask) << ") for lanes " << lanes_text(missing);
      if (missing) {
        const Fiber& absent = fibers_[w * 32 + __builtin_ctz(missing)];
        if (absent.state == FiberState::AtBarrier) {
          out << ", which wait at " << barrier_name(absent.barrier_op) << " at " << site_text(absent.site);
        } else if (absent.state == FiberState::InCollective) {
          out << ", which wait in " << op_name(absent.op) << " at " << site_text(absent.site) << " (mask "
              << hex(absent.mask) << ")";
        }
      }
      out << ";";
    }
  }
  if (n_exited_) out << " " << n_exited_ << " threads have exited;";
  std::string text = out.str();
  text.pop_back();
  abandon();
  throw Error(text);
}

// Drops the block's unfinished fibers. Their frames never returned, so ASan's poison of their
// redzones is still set: clear it before the stacks are reused.
void BlockRunner::abandon() {
  for (uint32_t i = 0; i < n_threads_; ++i) {
    if (fibers_[i].state != FiberState::Exited) unpoison_stack(fibers_[i].context.stack);
  }
  queue_.clear();
  queue_head_ = 0;
  t_thread = nullptr;
  t_runner = nullptr;
}

}  // namespace hg::emu::detail
