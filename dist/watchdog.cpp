// Watchdog (dist/watchdog.h): one thread that polls the watched work every `poll` while there is any,
// and sleeps on a condition variable while there is none. The clock of a piece of work starts when it
// is watched and restarts whenever some watched work completes (progress): a long queue of gathers
// that a healthy peer works through is not a hang; `timeout` without any completing is.
#include "dist/watchdog.h"

#include <algorithm>
#include <sstream>

namespace hg::dist {

Watchdog::Watchdog(std::chrono::milliseconds poll, Health health, Expire expire)
    : poll_(poll), health_(std::move(health)), expire_(std::move(expire)), thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::watch(std::string what, std::chrono::milliseconds timeout, Done done) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return;  // the transport is aborted: nothing more to watch
    items_.push_back({std::move(what), std::chrono::steady_clock::now(), timeout, std::move(done)});
  }
  cv_.notify_all();
}

std::string Watchdog::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

size_t Watchdog::watched() const {
  std::lock_guard lock(mutex_);
  return items_.size();
}

void Watchdog::fail(const std::string& why) {
  if (!failure_.empty()) return;
  failure_ = why;
  items_.clear();
  if (expire_) expire_(why);
}

void Watchdog::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
    if (stop_) return;
    cv_.wait_for(lock, poll_, [&] { return stop_; });
    if (stop_) return;
    // Completed work leaves the list (progress: every clock restarts); the first still pending for
    // its timeout since it was watched or since the last progress fails the transport.
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < items_.size();) {
      bool done = true;
      try {
        done = items_[i].done();
      } catch (...) {
      }
      if (done) {
        items_.erase(items_.begin() + std::ptrdiff_t(i));
        last_progress_ = now;
        continue;
      }
      ++i;
    }
    for (const Item& item : items_) {
      if (now - std::max(item.since, last_progress_) > item.timeout) {
        std::ostringstream why;
        why << "[dist] " << item.what << " did not complete within " << double(item.timeout.count()) / 1000.0
            << " s, with no watched work completing meanwhile (the device waited for it; no host wait would have "
               "noticed): another rank has died or hangs (set HALFGRAD_DIST_TIMEOUT to allow longer)";
        fail(why.str());
        break;
      }
    }
    if (!items_.empty() && health_) {
      const std::string error = health_();
      if (!error.empty()) fail(error);
    }
  }
}

}  // namespace hg::dist
