// CheckpointDirectory (train/checkpoint_directory.h): one-file and one-directory entries, written
// atomically, listed and pruned by rank 0.
#include "train/checkpoint_directory.h"

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

#include "dist/rank0.h"

namespace hg::train {
namespace {

namespace fs = std::filesystem;
constexpr const char* kWho = "[CheckpointDirectory]";
constexpr const char* kFileSuffix = ".safetensors";

std::string entry_name(int64_t step, bool sharded) {
  char name[48];
  std::snprintf(name, sizeof name, "step_%010lld%s", (long long)step, sharded ? "" : kFileSuffix);
  return name;
}

// The step of a name that starts with "step_<10 digits>" (-1 otherwise).
int64_t parse_step(const std::string& name) {
  if (name.size() < 15 || name.rfind("step_", 0) != 0) return -1;
  int64_t step = -1;
  const auto parsed = std::from_chars(name.data() + 5, name.data() + 15, step);
  return parsed.ec == std::errc() && parsed.ptr == name.data() + 15 ? step : -1;
}

// The writer's pid of a temporary or retired name "step_<10 digits>[.safetensors](.tmp.|.old.)<pid>"
// (0 when the name is not one).
long long writer_pid(const std::string& name) {
  if (parse_step(name) < 0) return 0;
  std::string tail = name.substr(15);
  if (tail.rfind(kFileSuffix, 0) == 0) tail = tail.substr(std::strlen(kFileSuffix));
  if (tail.rfind(".tmp.", 0) != 0 && tail.rfind(".old.", 0) != 0) return 0;
  long long pid = 0;
  const auto parsed = std::from_chars(tail.data() + 5, tail.data() + tail.size(), pid);
  return parsed.ec == std::errc() && parsed.ptr == tail.data() + tail.size() && pid > 0 ? pid : 0;
}

// The system's reason with its number: "(errno N)" is what marks an I/O failure (is_io_failure).
using hg::errno_text;
std::string errno_text(const std::error_code& error) {
  if (error.category() == std::generic_category() || error.category() == std::system_category())
    return errno_text(error.value());
  return error.message();
}

// Whether a failure of a write is the filesystem's (a message carrying the system's errno, on every
// rank alike: dist/rank0.h passes the text on) rather than the communicator's or a bug's.
bool is_io_failure(const std::exception& e) { return std::strstr(e.what(), "(errno ") != nullptr; }

void fsync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HG_CHECK(fd >= 0, kWho, " cannot open '", directory, "' to fsync it: ", errno_text(errno));
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // Some filesystems cannot fsync a directory (EINVAL): nothing to make durable there.
  HG_CHECK(status == 0 || error == EINVAL, kWho, " fsync of '", directory, "' failed: ", errno_text(error));
}

// Takes an entry out of the listing at once (rename), then deletes it.
void retire(const fs::path& entry) {
  const fs::path old = entry.string() + ".old." + std::to_string(::getpid());
  std::error_code error;
  fs::rename(entry, old, error);
  HG_CHECK(!error, kWho, " cannot rename the old entry '", entry.string(), "' out of the way: ", errno_text(error));
  fs::remove_all(old, error);
  HG_CHECK(!error, kWho, " cannot remove the old entry '", old.string(), "': ", errno_text(error));
}

int rank_of(const dist::Communicator* comm) { return comm ? comm->rank() : 0; }

bool writes_sharded(const TrainingState& state) {
  const optim::Optimizer* optimizer = state.registered_optimizer();
  return optimizer && optimizer->is_sharded();
}

std::string layout_name(bool sharded) {
  return sharded ? "ZeRO (sharded-optimizer: a directory per entry, one optimizer shard per rank)"
                 : "single-process (the whole optimizer state in one file per entry)";
}

}  // namespace

CheckpointDirectory::CheckpointDirectory(std::string directory, int64_t keep_last, dist::Communicator* comm)
    : directory_(std::move(directory)), keep_last_(keep_last), comm_(comm) {
  HG_CHECK(!directory_.empty(), kWho, " empty directory name");
  HG_CHECK(keep_last_ >= 1, kWho, " keep_last = ", keep_last_, "; expected >= 1");
  dist::on_rank0(comm_, "create the checkpoint directory", [&] {
    std::error_code error;
    fs::create_directories(directory_, error);
    HG_CHECK(!error, kWho, " cannot create '", directory_, "': ", error.message());
    // increment(error_code): a filesystem error is an hg::Error, never an escaping std::filesystem_error.
    fs::directory_iterator it(directory_, error);
    for (; !error && it != fs::directory_iterator(); it.increment(error)) {
      const long long pid = writer_pid(it->path().filename().string());
      std::error_code ignored;  // a temporary that cannot be removed now is tried again next time
      if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH) fs::remove_all(it->path(), ignored);
    }
    HG_CHECK(!error, kWho, " cannot list '", directory_, "': ", error.message());
  });
}

namespace {
// The complete entries of `directory`, oldest first.
std::vector<CheckpointDirectory::Entry> list_entries(const std::string& directory) {
  using Entry = CheckpointDirectory::Entry;
  std::vector<Entry> out;
  std::error_code error;
  fs::directory_iterator it(directory, error);
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {  // errors as codes, never thrown
    const std::string name = it->path().filename().string();
    const int64_t step = parse_step(name);
    if (step < 0) continue;
    // Exactly "step_<10 digits>" (a directory) or that + ".safetensors" (a file): temporaries do not match.
    std::error_code kind_error;
    if (name.size() == 15 && it->is_directory(kind_error)) out.push_back({step, it->path().string(), true});
    if (name == entry_name(step, false) && it->is_regular_file(kind_error))
      out.push_back({step, it->path().string(), false});
  }
  HG_CHECK(!error, kWho, " cannot list '", directory, "': ", error.message());
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.step, a.sharded) < std::tie(b.step, b.sharded); });
  return out;
}
}  // namespace

std::vector<CheckpointDirectory::Entry> CheckpointDirectory::list() const { return list_entries(directory_); }

std::optional<StoredRunConfig> read_run_config(const std::string& directory, std::optional<bool> sharded) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) return std::nullopt;
  const std::vector<CheckpointDirectory::Entry> entries = list_entries(directory);
  const CheckpointDirectory::Entry* newest[2] = {nullptr, nullptr};  // single-file, sharded
  for (const CheckpointDirectory::Entry& e : entries) newest[e.sharded] = &e;
  // Without the layout, only a directory of one layout says which entry the run will resume.
  HG_CHECK(sharded || !newest[0] || !newest[1], kWho, " '", directory,
           "' holds checkpoints of both layouts (the newest single-file one: '", newest[0] ? newest[0]->path : "",
           "'; the newest sharded (ZeRO) one: '", newest[1] ? newest[1]->path : "",
           "'); which one a run resumes depends on its optimizer: name it (train_gpt: --zero)");
  const CheckpointDirectory::Entry* chosen = sharded ? newest[*sharded] : newest[0] ? newest[0] : newest[1];
  if (chosen == nullptr) return std::nullopt;
  // The newest intact entry of that layout: the one a resume falls back to when newer ones are damaged.
  const bool layout = chosen->sharded;
  chosen = nullptr;
  std::string damaged;
  for (auto it = entries.rbegin(); it != entries.rend() && chosen == nullptr; ++it) {
    if (it->sharded != layout) continue;
    if (std::optional<std::string> why = CheckpointDirectory::damage(*it))
      damaged += (damaged.empty() ? " " : "; ") + it->path + ": " + *why;
    else
      chosen = &*it;
  }
  HG_CHECK(chosen != nullptr, kWho, " every checkpoint in '", directory, "' is damaged; none to resume from:", damaged);
  const std::string file = chosen->sharded ? (fs::path(chosen->path) / "state.safetensors").string() : chosen->path;
  std::optional<std::string> json = checkpoint_run_config(file);
  if (!json) return std::nullopt;
  return StoredRunConfig{chosen->path, std::move(*json), chosen->sharded};
}

std::optional<CheckpointDirectory::Entry> CheckpointDirectory::newest(std::optional<bool> sharded) const {
  int64_t found[2] = {-1, 0};  // step, sharded
  dist::on_rank0(comm_, "list the checkpoint directory", [&] {
    for (const Entry& e : list())
      if (!sharded || e.sharded == *sharded) found[0] = e.step, found[1] = e.sharded;
  });
  if (comm_) comm_->broadcast(found, 2, DType::i64, 0).wait();
  if (found[0] < 0) return std::nullopt;
  return Entry{found[0], (fs::path(directory_) / entry_name(found[0], found[1] != 0)).string(), found[1] != 0};
}

namespace {
// The files of a sharded entry, or why it is incomplete: state.safetensors and a whole set
// optimizer.rank0..N-1-of-N.safetensors must be there (a file missing is damage, as a file cut short is).
std::optional<std::string> sharded_files(const std::string& entry, std::vector<std::string>& files) {
  std::error_code error;
  bool has_state = false;
  int64_t world = -1;
  std::vector<int64_t> ranks;
  fs::directory_iterator it(entry, error);
  for (; !error && it != fs::directory_iterator(); it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (it->path().extension() != kFileSuffix) continue;
    files.push_back(it->path().string());
    if (name == "state.safetensors") has_state = true;
    long long rank = -1, of = -1;
    char tail = 0;
    if (std::sscanf(name.c_str(), "optimizer.rank%lld-of-%lld.safetensor%c", &rank, &of, &tail) == 3 && tail == 's' &&
        name == "optimizer.rank" + std::to_string(rank) + "-of-" + std::to_string(of) + kFileSuffix) {
      if (world >= 0 && of != world)
        return "'" + entry + "' holds optimizer shards of " + std::to_string(world) + " and of " +
               std::to_string(of) + " ranks; expected one set";
      world = of;
      ranks.push_back(rank);
    }
  }
  if (error) return "cannot list '" + entry + "': " + error.message();
  std::sort(files.begin(), files.end());
  if (!has_state) return "'" + entry + "' has no state.safetensors (missing); expected the weights and counters there";
  if (world <= 0)
    return "'" + entry + "' has no optimizer shards (optimizer.rank0-of-N.safetensors missing)";
  std::sort(ranks.begin(), ranks.end());
  for (int64_t r = 0; r < world; ++r)
    if (!std::binary_search(ranks.begin(), ranks.end(), r))
      return "'" + entry + "' lacks optimizer.rank" + std::to_string(r) + "-of-" + std::to_string(world) +
             ".safetensors (missing); expected all " + std::to_string(world) + " shards";
  return std::nullopt;
}

// A name beside `path` that no listing, pruning or clean-up touches: "<path>.damaged", then ".damaged.2", ...
fs::path damaged_name(const std::string& path) {
  std::error_code error;
  fs::path name = path + ".damaged";
  for (int n = 2; fs::exists(fs::symlink_status(name, error)); ++n) name = path + ".damaged." + std::to_string(n);
  return name;
}
}  // namespace

std::optional<std::string> CheckpointDirectory::damage(const Entry& entry) {
  std::vector<std::string> files;
  if (entry.sharded) {
    if (std::optional<std::string> incomplete = sharded_files(entry.path, files)) return incomplete;
  } else {
    files.push_back(entry.path);
  }
  for (const std::string& file : files) {
    // A file that cannot be opened (EACCES, EMFILE, ENFILE, ...) is no evidence of damage: refused, so
    // that a transient error never makes a resume fall back to an older entry.
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    HG_CHECK(fd >= 0, kWho, " cannot open '", file, "' to verify it: ", std::strerror(errno),
             "; expected a readable checkpoint (an I/O error, not damage: nothing falls back)");
    ::close(fd);
    try {
      // Structure and every tensor's checksum (the mapping is dropped at once), then the readers' rule:
      // a version-2 checkpoint or shard that lost its checksum keys would pass load() yet be refused by
      // load_checkpoint or load_state, so it is damage here too (the resume falls back past it).
      const safetensors::File loaded = safetensors::load(file);
      if (safetensors::lacks_promised_checksums(loaded, "version", "2") ||
          safetensors::lacks_promised_checksums(loaded, "shard_version", "2"))
        return detail::concat(kWho, " '", file,
                              "': a version-2 file without its checksums (the header's 'halfgrad.crc32c.' keys are "
                              "missing or misspelt); the header is damaged");
    } catch (const Error& e) {
      const std::string what = e.what();
      // mmap refused (ENOMEM, ENODEV, ...): the same, an error of this process, not of the file.
      HG_CHECK(what.find(": mmap of ") == std::string::npos, kWho, " cannot verify '", file, "': ", what,
               " (an I/O error, not damage: nothing falls back)");
      return what;
    }
  }
  return std::nullopt;
}

std::optional<std::string> CheckpointDirectory::latest_intact_for(const TrainingState& state,
                                                                  std::vector<Damaged>* damaged) const {
  const bool sharded = writes_sharded(state);
  int64_t chosen = -1;  // the step of the newest intact entry of the layout
  dist::on_rank0(comm_, "verify the checkpoints", [&] {
    std::vector<Damaged> found;
    bool any = false;
    const std::vector<Entry> entries = list();
    for (auto it = entries.rbegin(); it != entries.rend() && chosen < 0; ++it) {
      if (it->sharded != sharded) continue;
      any = true;
      if (std::optional<std::string> why = damage(*it)) {
        found.push_back({*it, std::move(*why)});
      } else {
        chosen = it->step;
      }
    }
    if (any && chosen < 0) {
      std::string list_text;
      for (const Damaged& d : found) list_text += (list_text.empty() ? " " : "; ") + d.entry.path + ": " + d.reason;
      throw Error(detail::concat(kWho, " every checkpoint in '", directory_, "' is damaged; none to resume from:",
                                 list_text));
    }
    // Falling back: the damaged newer entries are moved out of the listing (kept for a look, never
    // pruned or cleaned), so that they neither count toward keep_last nor are chosen again.
    if (chosen >= 0)
      for (Damaged& d : found) {
        const fs::path moved = damaged_name(d.entry.path);
        std::error_code error;
        fs::rename(d.entry.path, moved, error);
        if (error)
          d.reason += " (could not move it aside to '" + moved.string() + "': " + error.message() + ")";
        else
          d.moved_to = moved.string();
      }
    if (damaged) damaged->insert(damaged->end(), found.begin(), found.end());
  });
  if (comm_) comm_->broadcast(&chosen, 1, DType::i64, 0).wait();
  if (chosen < 0) return latest_for(state);  // nullopt, or the error for a directory of the other layout
  return (fs::path(directory_) / entry_name(chosen, sharded)).string();
}

std::optional<std::string> CheckpointDirectory::latest() const {
  const auto entry = newest(std::nullopt);
  if (!entry) return std::nullopt;
  return entry->path;
}

std::optional<std::string> CheckpointDirectory::latest_for(const TrainingState& state) const {
  const bool sharded = writes_sharded(state);
  if (const auto entry = newest(sharded)) return entry->path;
  const auto other = newest(!sharded);
  HG_CHECK(!other, kWho, " '", directory_, "' holds ", layout_name(!sharded), " checkpoints (the newest: '",
           other ? other->path : "", "'), but this run's optimizer ",
           sharded ? "is sharded across ranks" : "keeps its whole state in one process", "; resume them with ",
           sharded ? "a local optimizer (no ZeRO)" : "a sharded optimizer (ZeRO)");
  return std::nullopt;
}

std::string CheckpointDirectory::save(const TrainingState& state, int64_t step) const {
  HG_CHECK(step >= 0, kWho, " step ", step, " < 0");
  optim::Optimizer* optimizer = state.registered_optimizer();
  const bool sharded = optimizer && optimizer->is_sharded();
  const std::string path = (fs::path(directory_) / entry_name(step, sharded)).string();
  // Every failure below reaches every rank alike, with its text (on_rank0, throw_if_any_failed). Only
  // an I/O failure (the system's errno in its text) is a write failure; one of the communicator (a
  // dead rank, an aborted NCCL communicator) or any other error passes unchanged.
  const auto write_failure = [&](const std::exception& e, const char* what) {
    return CheckpointWriteError(path, hg::detail::concat(kWho, " the checkpoint of step ", step, " ", what, " '", path,
                                                     "': ", e.what()));
  };
  try {
    sharded ? save_sharded(state, *optimizer, step) : save_file(state, step);
  } catch (const std::exception& e) {
    if ((comm_ && comm_->broken()) || !is_io_failure(e)) throw;
    // "written, but": the entry is in place, complete, but an fsync after its rename failed (here, or
    // engine/safetensors.cpp's of a single file): a crash may still lose it.
    if (std::strstr(e.what(), "written, but ")) throw write_failure(e, "was written, but not made durable, to");
    throw write_failure(e, "was not written to");
  }
  try {  // only now: the new entry is complete, so the newest intact one is never the one removed
    dist::on_rank0(comm_, "prune old checkpoints", [&] { prune(sharded, path); });
  } catch (const std::exception& e) {
    if ((comm_ && comm_->broken()) || !is_io_failure(e)) throw;
    throw write_failure(e, "was written, but older entries could not be pruned beside");
  }
  return path;
}

std::string CheckpointDirectory::save_file(const TrainingState& state, int64_t step) const {
  const std::string path = (fs::path(directory_) / entry_name(step, false)).string();
  dist::on_rank0(comm_, "write the checkpoint", [&] { save_checkpoint(path, state, step); });  // atomic by itself
  return path;
}

std::string CheckpointDirectory::save_sharded(const TrainingState& state, optim::Optimizer& optimizer,
                                              int64_t step) const {
  int64_t pid = rank_of(comm_) == 0 ? int64_t(::getpid()) : 0;
  if (comm_) comm_->broadcast(&pid, 1, DType::i64, 0).wait();
  const fs::path entry = fs::path(directory_) / entry_name(step, true);
  const fs::path temporary = entry.string() + ".tmp." + std::to_string(pid);
  try {
    dist::on_rank0(comm_, "write the checkpoint", [&] {
      std::error_code error;
      fs::remove_all(temporary, error);
      fs::create_directory(temporary, error);
      HG_CHECK(!error, kWho, " cannot create '", temporary.string(), "': ", errno_text(error));
    });
    optimizer.sharded_state()->save_state((temporary / "optimizer").string());  // every rank fails alike
    // ZeRO stage 3: the weights whole for rank 0. A rank that cannot (memory) fails every rank alike.
    std::unique_ptr<optim::Optimizer::WholeParameters> whole;
    std::string whole_error;
    try {
      whole = optimizer.whole_parameters();
    } catch (const std::exception& e) {
      whole_error = e.what();
    }
    dist::throw_if_any_failed(comm_, whole_error);
    dist::on_rank0(comm_, "write the checkpoint", [&] {
      save_checkpoint((temporary / "state.safetensors").string(), state, step);
      // An entry of this step from an earlier run stays until the new one is in place: moved aside,
      // the new one renamed in (the old one moved back when that fails), then the old one deleted.
      const fs::path aside = entry.string() + ".old." + std::to_string(pid);
      std::error_code error;
      const bool moved_aside = fs::exists(entry);
      if (moved_aside) {
        fs::remove_all(aside, error);
        fs::rename(entry, aside, error);
        HG_CHECK(!error, kWho, " cannot rename the earlier entry '", entry.string(), "' out of the way: ",
                 errno_text(error));
      }
      fs::rename(temporary, entry, error);
      if (error) {
        std::error_code ignored;
        if (moved_aside) fs::rename(aside, entry, ignored);
        HG_FAIL(kWho, " cannot rename '", temporary.string(), "' to '", entry.string(), "': ", errno_text(error));
      }
      if (moved_aside) fs::remove_all(aside, error);  // left behind, a later run removes it (its writer is gone)
      try {
        fsync_directory(directory_);
      } catch (const std::exception& e) {  // the entry is in place and complete: only its durability is in doubt
        HG_FAIL(kWho, " '", entry.string(), "' written, but not made durable: ", e.what());
      }
    });
  } catch (...) {
    // Every rank is here (the failures above are collective): rank 0 removes the incomplete entry,
    // which would otherwise stay until a later run finds its writer gone.
    if (rank_of(comm_) == 0) {
      std::error_code ignored;
      fs::remove_all(temporary, ignored);
    }
    throw;
  }
  return entry.string();
}

void CheckpointDirectory::prune(bool sharded, const std::string& written) const {
  std::vector<Entry> present;  // of the layout just written: entries of the other layout stay
  for (const Entry& e : list())
    if (e.sharded == sharded) present.push_back(e);
  // The entry just written is never retired, even when newer ones (of a run resumed from an older
  // step whose newer entries could not be moved aside) outnumber keep_last.
  for (size_t i = 0; i + size_t(keep_last_) < present.size(); ++i)
    if (present[i].path != written) retire(present[i].path);
}

int64_t CheckpointDirectory::load(const std::string& entry, const TrainingState& state) const {
  const bool sharded = writes_sharded(state);
  std::error_code error;
  const bool is_directory = fs::is_directory(entry, error);
  HG_CHECK(!error || error == std::errc::no_such_file_or_directory, kWho, " cannot stat '", entry, "': ", error.message());
  HG_CHECK(is_directory == sharded, kWho, " '", entry, "' is a ", layout_name(is_directory),
           " checkpoint: the directory holds ", is_directory ? "ZeRO" : "single-process",
           " checkpoints, but this "
           "run's optimizer ",
           sharded ? "is sharded across ranks" : "keeps its whole state in one process");
  if (!sharded) return load_checkpoint(entry, state);
  optim::Optimizer& optimizer = *state.registered_optimizer();
  optim::ShardedState& shards = *optimizer.sharded_state();
  const std::string prefix = (fs::path(entry) / "optimizer").string();
  HG_CHECK(shards.has_saved_state(prefix), kWho, " '", entry, "' holds no optimizer shards ", prefix,
           ".rank0-of-N.safetensors; expected an entry written by CheckpointDirectory::save");
  // Every shard checked before the weights change; the optimizer keeps them (mapped) for load_state.
  // Should the weights' load throw, the guard drops them: held on, they would pin the files' mappings
  // and serve a later load_state of the same prefix from files rewritten since.
  struct ForgetChecked {
    const optim::ShardedState& shards;
    ~ForgetChecked() { shards.forget_checked_state(); }
  } forget_checked{shards};
  shards.check_saved_state(prefix);
  int64_t step = 0;
  {  // the weights first (into stage 3's whole units, then its shards): a master the files lack comes from them
    const auto whole = optimizer.whole_parameters();
    step = load_checkpoint((fs::path(entry) / "state.safetensors").string(), state);
    whole->commit();
  }
  shards.load_state(prefix);
  return step;
}

}  // namespace hg::train
