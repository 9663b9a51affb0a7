// Crash safety of training checkpoints (train/checkpoint.h): a writer process killed with SIGKILL
// at random points while it saves checkpoints in a loop (tests/checkpoint_writer_child.cpp) leaves
// a directory whose listed checkpoints all load, whole: the step counter and every element of the
// 4 MiB marker agree, so no partial or mixed file passes for a good one. Temporary files the kills
// leave behind are never listed, and the next CheckpointDirectory removes them.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "layers/nn.h"
#include "optim/optim.h"
#include "train/checkpoint.h"
#include "train/checkpoint_directory.h"

using namespace hg;

namespace {

// Starts the writer on `dir`, waits until it printed `saves` "saved" lines, then sleeps `delay_us`
// and kills it with SIGKILL. Returns the number of saves it reported.
int run_and_kill(const std::string& dir, int saves, int delay_us) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(pipe_fds[1], STDOUT_FILENO);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execl(HG_CHECKPOINT_WRITER_CHILD, HG_CHECKPOINT_WRITER_CHILD, dir.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  FILE* out = ::fdopen(pipe_fds[0], "r");
  int seen = 0;
  char line[64];
  while (seen < saves && std::fgets(line, sizeof line, out)) seen += std::string(line).rfind("saved ", 0) == 0;
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::fclose(out);
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  return seen;
}

struct Loaded {
  nn::Linear model{32, 32};
  optim::AdamW optimizer{model.parameters(), optim::AdamWOptions().lr(1e-3)};
  int64_t step = -1;
  Tensor marker = zeros({1 << 20});
  train::TrainingState state;
  Loaded() { state.model(model).optimizer(optimizer).counter("step", step).extra("marker", marker); }
};

}  // namespace

TEST_CASE("a checkpoint writer killed at random points leaves only whole loadable checkpoints") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hg_crash_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::mt19937 rng(20261130);
  int leftover_temporaries = 0, kills = 20;
  int64_t newest_seen = 0;
  for (int round = 0; round < kills; ++round) {
    // The first round kills during the first save's neighbourhood too: wait for 1..3 saves, then
    // 0..15 ms (a save of this ~4.3 MB file takes a few ms), so kills land before, during and after
    // writes, fsyncs and renames.
    const int reported = run_and_kill(dir.string(), 1 + int(rng() % 3), int(rng() % 15000));
    REQUIRE(reported >= 1);
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      leftover_temporaries += entry.path().filename().string().find(".tmp.") != std::string::npos;

    // Every listed checkpoint loads whole: counter and marker agree, the step is one it saved.
    const train::CheckpointDirectory directory(dir.string(), 2);
    const auto listed = directory.list();
    REQUIRE_FALSE(listed.empty());
    for (const auto& [step, path, sharded] : listed) {
      INFO("round ", round, ": ", path);
      Loaded loaded;
      CHECK(train::load_checkpoint(path, loaded.state) == step);
      CHECK(loaded.step == step);
      const std::vector<float> marker = loaded.marker.to_vector<float>();
      CHECK(std::all_of(marker.begin(), marker.end(), [&](float v) { return v == float(step); }));
    }
    newest_seen = std::max(newest_seen, listed.back().step);
    // The CheckpointDirectory above removed the dead writer's temporary files.
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
    // Each round starts from an empty directory (the writer counts steps from 1 again).
    std::filesystem::remove_all(dir);
  }
  CHECK(leftover_temporaries >= 1);  // otherwise no kill hit a save and the test proved nothing
  MESSAGE("killed the writer ", kills, " times; ", leftover_temporaries,
          " kills landed mid-save (a temporary file left behind); most checkpoints listed after a kill: step ",
          newest_seen);
  std::filesystem::remove_all(dir);
}
