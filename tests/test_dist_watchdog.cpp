// dist::Watchdog (dist/watchdog.h), the deadline of collectives the device consumes without a host
// wait (NCCL under ZeRO stage 3 and the offloaded optimizer): work that never completes fails it once
// the timeout has passed -- not before, and exactly once, naming the work and the timeout -- work
// that completes in time leaves without a failure, and a transport error reported by `health` fails
// it at once, and work that keeps completing restarts the clock of the work still pending (a queue
// worked through is progress, not a hang). Runs on the CPU (the NCCL transport's use of it needs two GPUs).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/watchdog.h"

using namespace std::chrono;
using hg::dist::Watchdog;

namespace {

struct Expiries {
  std::mutex mutex;
  std::vector<std::string> reasons;
  steady_clock::time_point first;
  void add(const std::string& why) {
    std::lock_guard lock(mutex);
    if (reasons.empty()) first = steady_clock::now();
    reasons.push_back(why);
  }
  size_t count() {
    std::lock_guard lock(mutex);
    return reasons.size();
  }
};

// Waits up to `limit` for `condition`.
template <class Condition>
bool eventually(Condition condition, milliseconds limit) {
  const auto end = steady_clock::now() + limit;
  while (steady_clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return condition();
}

}  // namespace

TEST_CASE("work that never completes fails the watchdog once, after its timeout, naming it") {
  Expiries expiries;
  Watchdog dog(milliseconds(1), [] { return std::string(); }, [&](const std::string& why) { expiries.add(why); });
  const auto start = steady_clock::now();
  dog.watch("all_gather (collective #7 on rank 0 of 2, nccl)", milliseconds(150), [] { return false; });
  dog.watch("reduce_scatter (collective #8 on rank 0 of 2, nccl)", milliseconds(150), [] { return false; });
  REQUIRE(eventually([&] { return expiries.count() > 0; }, seconds(5)));
  const double waited = duration<double>(expiries.first - start).count();
  CHECK(waited >= 0.15);
  CHECK(waited < 2.0);
  std::this_thread::sleep_for(milliseconds(50));
  REQUIRE(expiries.count() == 1);  // one failure, however many pieces of work were pending
  const std::string why = expiries.reasons[0];
  INFO(why);
  CHECK(why.find("all_gather (collective #7 on rank 0 of 2, nccl) did not complete within 0.15 s") != std::string::npos);
  CHECK(why.find("another rank has died or hangs") != std::string::npos);
  CHECK(dog.failure() == why);
  CHECK(dog.watched() == 0);
  dog.watch("later", milliseconds(1), [] { return false; });  // after a failure nothing is watched
  CHECK(dog.watched() == 0);
}

TEST_CASE("work that completes in time leaves the watchdog without a failure") {
  Expiries expiries;
  Watchdog dog(milliseconds(1), [] { return std::string(); }, [&](const std::string& why) { expiries.add(why); });
  std::atomic<bool> done{false};
  std::atomic<int> polls{0};
  dog.watch("broadcast (collective #1 on rank 1 of 2, nccl)", milliseconds(300), [&] {
    ++polls;
    return done.load();
  });
  std::this_thread::sleep_for(milliseconds(40));
  CHECK(dog.watched() == 1);
  done = true;
  REQUIRE(eventually([&] { return dog.watched() == 0; }, seconds(2)));
  std::this_thread::sleep_for(milliseconds(400));  // past the deadline it had
  CHECK(expiries.count() == 0);
  CHECK(dog.failure().empty());
  CHECK(polls.load() >= 2);  // it was polled while pending, not just once
}

TEST_CASE("a transport error reported by health fails the watchdog before the timeout") {
  Expiries expiries;
  std::atomic<bool> broken{false};
  Watchdog dog(
      milliseconds(1), [&] { return broken ? std::string("[dist] NCCL failed asynchronously: remote process exited") : ""; },
      [&](const std::string& why) { expiries.add(why); });
  dog.watch("all_gather (collective #3 on rank 0 of 2, nccl)", seconds(60), [] { return false; });
  std::this_thread::sleep_for(milliseconds(20));
  CHECK(expiries.count() == 0);
  broken = true;
  REQUIRE(eventually([&] { return expiries.count() > 0; }, seconds(2)));
  CHECK(expiries.reasons[0].find("remote process exited") != std::string::npos);
}

TEST_CASE("watched work completing restarts the clock of the work still pending; without it, the timeout fails") {
  Expiries expiries;
  Watchdog dog(milliseconds(10), nullptr, [&](const std::string& why) { expiries.add(why); });
  const auto start = steady_clock::now();
  dog.watch("all_gather (collective #1 on rank 0 of 2, nccl)", milliseconds(400), [] { return false; });
  // Twelve pieces of work, each completing 100 ms after it was watched: 1.2 s of progress, three
  // times the timeout of the one that never completes.
  for (int i = 0; i < 12; ++i) {
    auto finished = std::make_shared<std::atomic<bool>>(false);
    dog.watch("reduce_scatter (collective #" + std::to_string(i + 2) + " on rank 0 of 2, nccl)", milliseconds(400),
              [finished] { return finished->load(); });
    std::this_thread::sleep_for(milliseconds(100));
    finished->store(true);
  }
  CHECK(expiries.count() == 0);  // progress all along: no failure
  const auto progress_end = steady_clock::now();
  REQUIRE(eventually([&] { return expiries.count() > 0; }, seconds(5)));
  std::this_thread::sleep_for(milliseconds(50));
  REQUIRE(expiries.count() == 1);
  CHECK(expiries.first - start > milliseconds(1200));
  CHECK(expiries.first - progress_end >= milliseconds(300));  // the timeout since the last completion
  CHECK(expiries.reasons[0].find("all_gather (collective #1 on rank 0 of 2, nccl) did not complete within 0.4 s") !=
        std::string::npos);
}
