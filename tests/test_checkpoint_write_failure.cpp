// Checkpoint writes that fail (train/checkpoint_directory.h, WRITE FAILURES): a file-size limit
// (setrlimit RLIMIT_FSIZE with SIGXFSZ ignored: write() fails with EFBIG, as a full disk fails with
// ENOSPC), an entry path a directory occupies (the rename fails), and a read-only directory. Each
// time save() must throw CheckpointWriteError naming the entry and the system's reason, leave no
// temporary behind, keep the previous entry -- even with keep_last 1, where pruning would otherwise
// have removed it -- and that entry must still load into fresh objects with the weights it held.
// Both layouts: one file (a local optimizer) and one directory (ZeRO stage 2, in a world of 1). A
// sharded entry written again at its step stays until the new one is complete (a failed rewrite
// leaves it whole), and a successful rewrite replaces it, leaving nothing aside.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dist/data_parallel.h"
#include "layers/nn.h"
#include "optim/optim.h"
#include "support/temp_dir.h"
#include "train/checkpoint.h"
#include "train/checkpoint_directory.h"

using namespace hg;
namespace fs = std::filesystem;

namespace {

// A model, its optimizer (local, or ZeRO stage 2 through DataParallel) and the state they make.
struct Run {
  nn::Linear model{48, 48};
  std::unique_ptr<dist::DataParallel> parallel;
  std::unique_ptr<optim::Optimizer> optimizer;
  int64_t step = 0;
  train::TrainingState state;
  explicit Run(bool sharded, float fill) {
    const auto options = optim::AdamWOptions().lr(1e-2);
    if (sharded) {
      parallel = std::make_unique<dist::DataParallel>(dist::DataParallelOptions().zero_stage(2));
      optimizer = parallel->adamw(model, options);
    } else {
      optimizer = std::make_unique<optim::AdamW>(model.parameters(), options);
    }
    refill(fill);
    state.model(model).optimizer(*optimizer).counter("step", step);
  }
  // Fresh random weights around `centre` (every element differs from any earlier fill).
  void refill(float centre) {
    NoGradGuard no_grad;
    for (const Tensor& p : model.parameters()) p.copy_(randn(p.shape()) + centre);
  }
  dist::Communicator* comm() const { return parallel ? parallel->communicator() : nullptr; }
  std::vector<float> weights() const { return model.weight.to_vector<float>(); }
};

// The names in `dir`, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& item : fs::directory_iterator(dir)) out.push_back(item.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// RLIMIT_FSIZE at `bytes` for the scope, with SIGXFSZ ignored (a write past it fails with EFBIG).
struct FileSizeLimit {
  rlimit before{};
  struct sigaction old_action {};
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(::sigaction(SIGXFSZ, &ignore, &old_action) == 0);
    rlimit limit = before;
    limit.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &before);
    ::sigaction(SIGXFSZ, &old_action, nullptr);
  }
};

// Saves step 1, then fails to save step 2 through `fail` (which sets up the failure and calls save),
// and checks what the failure must leave: the step-1 entry alone, loadable, with its weights.
template <class Fail>
void check_failed_save(bool sharded, const char* reason, Fail&& fail) {
  test::TempDir dir;
  const std::string where = (dir.path / "ck").string();
  Run run(sharded, 0.25f);
  const train::CheckpointDirectory checkpoints(where, /*keep_last=*/1, run.comm());
  run.step = 1;
  const std::string first = checkpoints.save(run.state, 1);
  const std::vector<std::string> before = names_in(where);
  REQUIRE(before.size() == 1);
  const std::vector<float> saved = run.weights();

  run.step = 2;
  run.refill(-3.0f);  // what the failed entry would have held
  const std::string second = (fs::path(where) / (sharded ? "step_0000000002" : "step_0000000002.safetensors")).string();
  try {
    fail(checkpoints, run, second);
    FAIL("the save of step 2 succeeded");
  } catch (const train::CheckpointWriteError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(e.entry() == second);
    CHECK(message.find("'" + second + "'") != std::string::npos);
    CHECK(message.find(reason) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);  // one line
  }
  // Only the step-1 entry (plus what the failure itself planted): no temporary, nothing pruned.
  std::vector<std::string> after = names_in(where);
  after.erase(std::remove(after.begin(), after.end(), fs::path(second).filename().string()), after.end());
  CHECK(after == before);
  const auto listed = checkpoints.list();
  REQUIRE(listed.size() == 1);
  CHECK(listed.back().path == first);

  Run fresh(sharded, 9.0f);
  const train::CheckpointDirectory reopened(where, 1, fresh.comm());
  CHECK(reopened.load(first, fresh.state) == 1);
  CHECK(fresh.step == 1);
  CHECK(fresh.weights() == saved);
}

void save_under_file_size_limit(const train::CheckpointDirectory& checkpoints, Run& run, const std::string&) {
  const FileSizeLimit limit(4096);  // the 48 x 48 weight alone is 9 KiB
  checkpoints.save(run.state, 2);
}

}  // namespace

TEST_CASE("a checkpoint write past a file-size limit (EFBIG) keeps the previous entry, whole, and leaves nothing") {
  for (const bool sharded : {false, true}) {
    INFO(std::string(sharded ? "sharded (ZeRO stage 2) layout" : "one-file layout"));
    check_failed_save(sharded, "File too large", save_under_file_size_limit);
  }
}

TEST_CASE("a checkpoint whose rename fails (a directory holds its name) removes its temporary file") {
  check_failed_save(false, "rename of", [](const train::CheckpointDirectory& checkpoints, Run& run,
                                          const std::string& entry) {
    fs::create_directories(fs::path(entry) / "occupied");  // rename(file, non-empty directory) fails
    checkpoints.save(run.state, 2);
  });
}

TEST_CASE("a checkpoint into a read-only directory (EACCES) keeps the previous entry") {
  if (::geteuid() == 0) {
    // Permission bits do not bind root: this case runs again in a child process as nobody (setpriv),
    // where they do. Without setpriv it is skipped, saying so.
    if (std::system("command -v setpriv >/dev/null 2>&1") != 0) {
      MESSAGE("skipped: running as root without setpriv, and chmod 0555 does not make a directory read-only "
              "for root");
      return;
    }
    const std::string self = fs::read_symlink("/proc/self/exe").string();
    const std::string command = "TMPDIR=/tmp setpriv --reuid=65534 --regid=65534 --clear-groups '" + self +
                                "' -tc='a checkpoint into a read-only directory*'";
    MESSAGE("running as root: the case runs as uid 65534: " << command);
    const int status = std::system(command.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    return;
  }
  for (const bool sharded : {false, true}) {
    INFO(std::string(sharded ? "sharded (ZeRO stage 2) layout" : "one-file layout"));
    check_failed_save(sharded, "Permission denied", [](const train::CheckpointDirectory& checkpoints, Run& run,
                                                       const std::string& entry) {
      const std::string dir = fs::path(entry).parent_path().string();
      REQUIRE(::chmod(dir.c_str(), 0555) == 0);
      try {
        checkpoints.save(run.state, 2);
      } catch (...) {
        ::chmod(dir.c_str(), 0755);
        throw;
      }
      ::chmod(dir.c_str(), 0755);
    });
  }
}

TEST_CASE("a sharded entry saved again at its step is replaced only once the new one is complete") {
  test::TempDir dir;
  const std::string where = (dir.path / "ck").string();
  Run run(true, 0.5f);
  const train::CheckpointDirectory checkpoints(where, /*keep_last=*/2, run.comm());
  run.step = 2;
  const std::string entry = checkpoints.save(run.state, 2);
  const std::vector<float> first = run.weights();
  // A failed write of the same step (an earlier run's entry is there) leaves that entry as it was.
  run.refill(-2.0f);
  try {
    save_under_file_size_limit(checkpoints, run, entry);
    FAIL("the save under the file-size limit succeeded");
  } catch (const train::CheckpointWriteError& e) {
    CHECK(std::string(e.what()).find("was not written to") != std::string::npos);
  }
  CHECK(names_in(where) == std::vector<std::string>{"step_0000000002"});
  {
    Run fresh(true, 7.0f);
    CHECK(train::CheckpointDirectory(where, 2, fresh.comm()).load(entry, fresh.state) == 2);
    CHECK(fresh.weights() == first);
  }
  // A successful one replaces it, leaving nothing aside.
  run.refill(4.0f);
  const std::vector<float> second = run.weights();
  REQUIRE(second != first);
  CHECK(checkpoints.save(run.state, 2) == entry);
  CHECK(names_in(where) == std::vector<std::string>{"step_0000000002"});
  Run fresh(true, 7.0f);
  CHECK(train::CheckpointDirectory(where, 2, fresh.comm()).load(entry, fresh.state) == 2);
  CHECK(fresh.weights() == second);
}
