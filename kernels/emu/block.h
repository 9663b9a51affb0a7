#pragma once
// The block scheduler: runs the threads of one CUDA block as fibers on the calling OS thread.
// Internal to kernels/emu (kernel code sees emu.h only).
//
// Semantics (the rules of emu.h, enforced here):
//   * A fiber runs until it blocks (__syncthreads, a warp collective) or ends; then the next fiber
//     in the run queue runs, switched to directly.
//   * Warp collective: complete when every lane of `mask` that has not exited has arrived with the
//     same mask; then every participant gets its result and becomes runnable. Lanes of the mask that
//     exited (or do not exist, in a partial last warp) do not participate; a shuffle that reads
//     such a lane returns all-ones bytes (NaN for floats), as a GPU returns an undefined value.
//     Overlapping groups with different masks, or lanes of one group calling different collectives,
//     are errors.
//   * __activemask: the lanes that are converged with the caller, which the emulator defines as the
//     lanes that call __activemask together: it completes when every non-exited lane of the warp
//     has called it, or, when nothing else can run, with the lanes that did (the others are blocked
//     elsewhere: diverged).
//   * __syncthreads: releases when every thread of the block waits at it, at the same call site. A
//     thread that has exited does not count as arrived (CUDA requires the barrier to be reached by
//     the whole block): some threads at the barrier while others exited is reported.
//   * When nothing can run and the block is not finished (a barrier or collective that cannot
//     complete), the block fails with hg::Error describing who waits where, instead of hanging.
//   * Run order: each phase (the stretch between two barrier releases) runs its fibers forward,
//     reversed or shuffled, chosen from (block, phase, seed); a missing barrier shows as wrong data.
//   * An exception thrown by kernel code stops the block (the other fibers are abandoned, their
//     destructors do not run) and is rethrown by run().
#include <array>
#include <cstdint>
#include <exception>
#include <vector>

#include "kernels/emu/emu.h"
#include "kernels/emu/fiber.h"

namespace hg::emu::detail {

// One kernel launch, as the block scheduler needs it.
struct GridJob {
  const void* kernel = nullptr;                   // for messages
  void (*invoke)(const void* closure) = nullptr;  // calls the kernel with its arguments
  const void* closure = nullptr;
  dim3 grid, block;
  size_t shared_bytes = 0;
  uint64_t seed = 0;  // this launch's order seed
};

enum class FiberState : uint8_t { Runnable, AtBarrier, InCollective, Exited };

struct Fiber : ThreadBuiltins {
  Context context;
  uint32_t linear = 0;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
  FiberState state = FiberState::Runnable;
  Site site;  // where it waits
  // The pending collective or barrier.
  WarpOp op = WarpOp::Sync;
  BarrierOp barrier_op = BarrierOp::Sync;
  uint8_t size = 0;
  unsigned mask = 0;
  int param = 0;
  int width = 32;
  int predicate = 0;
  alignas(16) unsigned char value[16] = {};
  alignas(16) unsigned char result[16] = {};
};

// Lanes of one warp waiting in one collective.
struct WarpGroup {
  unsigned mask = 0;
  unsigned arrived = 0;
};

struct Warp {
  unsigned alive = 0;           // lanes that exist and have not exited
  unsigned in_active_mask = 0;  // lanes waiting in __activemask
  int n_groups = 0;
  std::array<WarpGroup, 32> groups{};
  std::array<const void*, 32> wmma_records{};  // of the last wmma collective (WmmaResult::records)
};

class BlockRunner {
 public:
  BlockRunner();
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // Runs block `block_idx` of `job` to completion on this OS thread; throws what the block threw or
  // an hg::Error for a deadlock / divergent barrier.
  void run(const GridJob& job, uint3 block_idx);

  // The runner of the calling OS thread.
  static BlockRunner& this_thread();

  // Called by kernel code through emu.h, on the running fiber.
  const void* collective(WarpOp op, unsigned mask, const void* value, unsigned size, int param, int width,
                         const Site& site);
  int barrier(BarrierOp op, int predicate, const Site& site);
  unsigned active_mask(const Site& site);
  [[noreturn]] void fail(const std::string& what) const;  // throws hg::Error with block/thread context

 private:
  static void fiber_main(void* fiber);
  void run_body() noexcept;
  void on_exit(Fiber& self);
  void suspend(Fiber& self);
  Context& next_context();
  void push_released(Warp& warp, unsigned lanes, const Fiber* running);
  bool try_complete(Warp& warp, int group, const Fiber* running);
  bool try_complete_active_mask(Warp& warp, const Fiber* running, bool diverged_ok);
  void compute_results(Warp& warp, const WarpGroup& group);
  void start_phase();
  void release_barrier();
  [[noreturn]] void report_deadlock();
  void abandon();
  std::string where() const;  // "kernel K, block (x, y, z)"
  Fiber& current() const { return *static_cast<Fiber*>(t_thread); }

  Context scheduler_;
  std::vector<Fiber> fibers_;  // grown on demand; stacks kept for the life of the OS thread
  std::vector<Warp> warps_;
  std::vector<uint32_t> queue_;
  size_t queue_head_ = 0;
  unsigned char* dynamic_shared_ = nullptr;

  const GridJob* job_ = nullptr;
  uint3 block_idx_{};
  uint64_t block_linear_ = 0;
  uint32_t n_threads_ = 0;
  uint32_t n_exited_ = 0;
  uint32_t n_at_barrier_ = 0;
  uint32_t phase_ = 0;
  int barrier_result_ = 0;
  std::exception_ptr error_;
};

}  // namespace hg::emu::detail
