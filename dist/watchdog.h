#pragma once
// Watchdog: a deadline for work the host never waits on. A collective the device consumes through a
// stream wait (Work::block with NCCL: ZeRO stage 3's parameter gathers, the offloaded optimizer's
// gradient stream) has no host wait that could time out: when a peer dies, the NCCL kernel never
// completes, the stream waiting on it never moves, and the host blocks in its next synchronize
// (reading the loss, the offloaded update waiting for the gradients) -- forever. The watchdog polls
// every watched piece of work from a thread of its own: when one is still pending `timeout` after it
// was watched and after any watched work last completed (progress restarts the clock), or the
// transport reports an asynchronous error, it fails ONCE: it records the reason and calls
// `expire` (NCCL: ncclCommAbort, which ends the pending kernels, so that the streams drain and the
// host's synchronize returns; the next collective then throws the recorded reason).
//
//   Watchdog dog(std::chrono::milliseconds(20), [] { return std::string(); }, [](const std::string& why) { ... });
//   dog.watch("all_gather (collective #7 on rank 0 of 2, nccl)", timeout, [work] { return work->completed(); });
//
// `done`, `health` and `expire` run on the watchdog's thread with its lock held (they must not call
// the watchdog); `done` that throws counts as done (the error surfaces where the work is next used).
// After a failure nothing more is watched.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hg::dist {

class Watchdog {
 public:
  using Done = std::function<bool()>;
  using Health = std::function<std::string()>;  // "" while healthy, else the transport's error
  using Expire = std::function<void(const std::string& why)>;

  Watchdog(std::chrono::milliseconds poll, Health health, Expire expire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches `done` until it returns true; fails when it has not within `timeout` of now or of the
  // last completion of any watched work, whichever is later (progress restarts the clock).
  void watch(std::string what, std::chrono::milliseconds timeout, Done done);
  // The reason of the failure ("" while none happened).
  std::string failure() const;
  // How many pieces of work are watched now.
  size_t watched() const;

 private:
  struct Item {
    std::string what;
    std::chrono::steady_clock::time_point since;  // when it was watched
    std::chrono::milliseconds timeout;
    Done done;
  };
  void loop();
  void fail(const std::string& why);  // with mutex_ held

  std::chrono::milliseconds poll_;
  Health health_;
  Expire expire_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Item> items_;
  std::string failure_;
  std::chrono::steady_clock::time_point last_progress_{};  // when watched work last completed
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hg::dist
