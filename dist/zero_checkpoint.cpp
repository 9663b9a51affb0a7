// ZeroCheckpointDirectory (dist/zero_checkpoint.h): entry directories written by every rank into a
// temporary directory and renamed into place by rank 0 once complete.
#include "dist/zero_checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace hg::dist {
namespace {

namespace fs = std::filesystem;
constexpr const char* kWho = "[ZeroCheckpointDirectory]";

std::string entry_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%010lld", (long long)step);
  return name;
}

// The step of "step_<10 digits>" followed by exactly `suffix` (-1 when the name is not of that form).
int64_t parse_step(const std::string& name, size_t* rest = nullptr) {
  if (name.size() < 15 || name.rfind("step_", 0) != 0) return -1;
  int64_t step = -1;
  const auto parsed = std::from_chars(name.data() + 5, name.data() + 15, step);
  if (parsed.ec != std::errc() || parsed.ptr != name.data() + 15) return -1;
  if (rest) *rest = 15;
  return step;
}

void fsync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HG_CHECK(fd >= 0, kWho, " cannot open '", directory, "' to fsync it: ", std::strerror(errno));
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // Some filesystems cannot fsync a directory (EINVAL): nothing to make durable there.
  HG_CHECK(status == 0 || error == EINVAL, kWho, " fsync of '", directory, "' failed: ", std::strerror(error));
}

// Takes an entry out of the listing at once (rename), then deletes it.
void retire(const fs::path& entry) {
  const fs::path old = entry.string() + ".old." + std::to_string(::getpid());
  std::error_code error;
  fs::rename(entry, old, error);
  HG_CHECK(!error, kWho, " cannot rename the old entry '", entry.string(), "' out of the way: ", error.message());
  fs::remove_all(old, error);
  HG_CHECK(!error, kWho, " cannot remove the old entry '", old.string(), "': ", error.message());
}

// Runs `fn` on rank 0 and makes its failure every rank's: the others would otherwise wait at the
// next collective until the timeout.
template <class Fn>
void on_rank0(Communicator& comm, Fn&& fn) {
  int64_t failed = 0;
  std::string message;
  if (comm.rank() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      failed = 1;
      message = e.what();
    }
  }
  comm.broadcast(&failed, 1, DType::i64, 0).wait();
  if (comm.rank() == 0 && failed) throw Error(message);
  HG_CHECK(!failed, kWho, " rank 0 failed to write the checkpoint (its error says why)");
}

}  // namespace

ZeroCheckpointDirectory::ZeroCheckpointDirectory(std::string directory, int64_t keep_last, Communicator& comm)
    : directory_(std::move(directory)), keep_last_(keep_last), comm_(comm) {
  HG_CHECK(!directory_.empty(), kWho, " empty directory name");
  HG_CHECK(keep_last_ >= 1, kWho, " keep_last = ", keep_last_, "; expected >= 1");
  on_rank0(comm_, [&] {
    std::error_code error;
    fs::create_directories(directory_, error);
    HG_CHECK(!error, kWho, " cannot create '", directory_, "': ", error.message());
    // Temporaries ("step_<10 digits>.tmp.<pid>", ".old.<pid>") of writers that are gone.
    for (const auto& item : fs::directory_iterator(directory_, error)) {
      const std::string name = item.path().filename().string();
      size_t rest = 0;
      if (parse_step(name, &rest) < 0) continue;
      const std::string tail = name.substr(rest);
      if (tail.rfind(".tmp.", 0) != 0 && tail.rfind(".old.", 0) != 0) continue;
      long long pid = 0;
      const auto parsed = std::from_chars(tail.data() + 5, tail.data() + tail.size(), pid);
      if (parsed.ec != std::errc() || parsed.ptr != tail.data() + tail.size() || pid <= 0) continue;
      if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove_all(item.path(), error);
    }
  });
}

std::vector<std::pair<int64_t, std::string>> ZeroCheckpointDirectory::list(const std::string& directory) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(directory, error)) {
    const std::string name = item.path().filename().string();
    const int64_t step = parse_step(name);
    // Exactly "step_" + 10 digits, a directory: temporaries and single-process files do not match.
    if (step < 0 || name.size() != 15 || !item.is_directory()) continue;
    out.emplace_back(step, item.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> ZeroCheckpointDirectory::latest() const {
  int64_t step = -1;
  if (comm_.rank() == 0) {
    const auto entries = list(directory_);
    if (!entries.empty()) step = entries.back().first;
  }
  comm_.broadcast(&step, 1, DType::i64, 0).wait();
  if (step < 0) return std::nullopt;
  return (fs::path(directory_) / entry_name(step)).string();
}

std::string ZeroCheckpointDirectory::save(const train::TrainingState& state, ZeroOptimizer& optimizer,
                                          int64_t step) const {
  HG_CHECK(step >= 0, kWho, " step ", step, " < 0");
  std::string described = " ";  // (appended, not " " + ...: GCC 12 warns falsely about that)
  described += state.describe();
  described += ' ';
  HG_CHECK(described.find(" optimizer ") == std::string::npos, kWho,
           " the TrainingState registers an optimizer; the ZeroOptimizer's shards are saved beside it instead");
  int64_t pid = comm_.rank() == 0 ? int64_t(::getpid()) : 0;
  comm_.broadcast(&pid, 1, DType::i64, 0).wait();
  const fs::path entry = fs::path(directory_) / entry_name(step);
  const fs::path temporary = entry.string() + ".tmp." + std::to_string(pid);
  on_rank0(comm_, [&] {
    std::error_code error;
    fs::remove_all(temporary, error);
    fs::create_directory(temporary, error);
    HG_CHECK(!error, kWho, " cannot create '", temporary.string(), "': ", error.message());
  });
  optimizer.save_state((temporary / "optimizer").string());  // every rank's shard; ends with a barrier
  const auto whole = optimizer.gather_parameters();           // stage 3: the weights whole for rank 0
  on_rank0(comm_, [&] {
    train::save_checkpoint((temporary / "state.safetensors").string(), state, step);
    if (fs::exists(entry)) retire(entry);  // an entry of this step from an earlier run
    std::error_code error;
    fs::rename(temporary, entry, error);
    HG_CHECK(!error, kWho, " cannot rename '", temporary.string(), "' to '", entry.string(), "': ", error.message());
    fsync_directory(directory_);
    const auto present = list(directory_);
    for (size_t i = 0; i + size_t(keep_last_) < present.size(); ++i) retire(present[i].second);
  });
  return entry.string();
}

int64_t ZeroCheckpointDirectory::load(const std::string& entry, const train::TrainingState& state,
                                      ZeroOptimizer& optimizer) const {
  const std::string state_file = (fs::path(entry) / "state.safetensors").string();
  const std::string prefix = (fs::path(entry) / "optimizer").string();
  HG_CHECK(ZeroOptimizer::saved_world_size(prefix) > 0, kWho, " '", entry, "' holds no optimizer shards ",
           prefix, ".rank0-of-N.safetensors; expected an entry written by ZeroCheckpointDirectory::save");
  int64_t step = 0;
  {  // the weights first (into stage 3's whole units, then its shards): a master the files lack comes from them
    auto whole = optimizer.gather_parameters();
    step = train::load_checkpoint(state_file, state);
    whole.write_back();
  }
  optimizer.load_state(prefix);
  return step;
}

}  // namespace hg::dist
