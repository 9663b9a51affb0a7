// The process's CPU GEMM plan: measuring the candidates, the cache file, and the answer each GEMM
// asks for (gemm_calibration.h). The rule and the file format are gemm_plan.cpp's.
//
// Measuring. Per decision (dtype, shape class), each candidate runs the class's representative
// shape twice, forward (A B^T) and weight gradient (A^T B), on pseudo-random values (AMX runs zeros
// faster than data); one untimed round first (pack buffers are touched, the OpenMP threads woken),
// then kRounds timed rounds with the candidates interleaved, keeping each one's best. On a 2-core
// Zen 4 VM, f32's decisions take ~20 ms and bf16's ~16 ms (docs/cpu_gemm.md, "Calibrated dispatch").
//
// The cache. Processes that start together (MPI ranks, ctest -j) serialise on a lock file beside
// the cache, so the first measures and writes while the others wait and then read its file: they
// all take the same paths. The file is written to a temporary name and renamed over the old one.
#include "kernels/cpu/gemm_calibration.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "kernels/cpu/calibration_rule.h"
#include "kernels/cpu/gemm_avx512_blocking.h"
#include "kernels/error.h"
#include "kernels/half.h"

namespace hg::kernels::cpu {
namespace detail {
namespace {

constexpr int kRounds = 3;  // timed rounds after the warm-up one

// ---- measuring ----------------------------------------------------------------------------------

// Operand storage for every representative shape of a dtype: A, B and C sized for the largest.
template <class T>
struct Operands {
  std::vector<T> a, b, c;
  explicit Operands(int threads) {
    int64_t a_size = 0, b_size = 0, c_size = 0;
    for (int shape = 0; shape < kGemmShapeClasses; ++shape) {
      const GemmShape s = representative_shape(GemmShapeClass(shape), threads);
      a_size = std::max(a_size, s.m * s.k);
      b_size = std::max(b_size, s.k * s.n);
      c_size = std::max(c_size, s.m * s.n);
    }
    uint64_t state = 0x9e3779b97f4a7c15ull;  // a fixed xorshift stream: values in [-1, 1)
    const auto next = [&] {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      return T(float(double(state >> 11) * 0x1.0p-52 - 1.0));
    };
    a.resize(size_t(a_size));
    b.resize(size_t(b_size));
    c.resize(size_t(c_size));
    for (T& x : a) x = next();
    for (T& x : b) x = next();
  }
};

template <class T>
void run_candidate(GemmCandidate candidate, const GemmShape& s, bool weight_gradient, Operands<T>& op,
                   const CpuGemmCaps& caps) {
  // Forward: C = A B^T with A [m, k], B stored [n, k]. Weight gradient: C = A^T B with A stored
  // [k, m], B [k, n].
  const bool ta = weight_gradient, tb = !weight_gradient;
  const int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
  if constexpr (std::is_same_v<T, float>) {
    const GemmTile tile = candidate == GemmCandidate::tile6x64 ? GemmTile::mr6_nr64 : GemmTile::mr14_nr32;
    gemm_f32_avx512_blocked(f32_blocking_of_tile(tile, caps.caches), ta, tb, s.m, s.n, s.k, 1.0f, op.a.data(), lda,
                            op.b.data(), ldb, 0.0f, op.c.data(), s.n);
  } else {
    constexpr bool is_bf16 = std::is_same_v<T, bfloat16>;
    if (candidate == GemmCandidate::amx) {
      if constexpr (is_bf16)
        gemm_bf16_amx(ta, tb, s.m, s.n, s.k, 1.0f, op.a.data(), lda, op.b.data(), ldb, 0.0f, op.c.data(), s.n, true);
      else
        gemm_f16_amx(ta, tb, s.m, s.n, s.k, 1.0f, op.a.data(), lda, op.b.data(), ldb, 0.0f, op.c.data(), s.n, true);
    } else if (candidate == GemmCandidate::vdpbf16ps) {
      if constexpr (is_bf16)
        gemm_bf16_avx512(ta, tb, s.m, s.n, s.k, 1.0f, op.a.data(), lda, op.b.data(), ldb, 0.0f, op.c.data(), s.n, true);
    } else {
      gemm_half_via_f32_avx512(ta, tb, s.m, s.n, s.k, 1.0f, op.a.data(), lda, op.b.data(), ldb, 0.0f, op.c.data(), s.n,
                               true);
    }
  }
}

template <class T>
std::vector<GemmDecisionTimings> measure_typed(GemmPlanDType dtype, const CpuGemmCaps& caps) {
  const std::vector<GemmCandidate> candidates = gemm_candidates(dtype, caps);
  const int threads = omp_get_max_threads();
  Operands<T> operands(threads);
  std::vector<GemmDecisionTimings> out;
  for (int shape = 0; shape < kGemmShapeClasses; ++shape) {
    const GemmShape s = representative_shape(GemmShapeClass(shape), threads);
    std::vector<std::function<void()>> runs;
    for (const GemmCandidate candidate : candidates)
      runs.emplace_back([&, candidate] {
        run_candidate<T>(candidate, s, false, operands, caps);
        run_candidate<T>(candidate, s, true, operands, caps);
      });
    const std::vector<double> best = interleaved_best_seconds(runs, kRounds);
    GemmDecisionTimings d{dtype, GemmShapeClass(shape), {}};
    for (size_t i = 0; i < candidates.size(); ++i) d.timings.push_back({candidates[i], best[i]});
    out.push_back(std::move(d));
  }
  return out;
}

// ---- the cache file -----------------------------------------------------------------------------

// mkdir that accepts an existing directory.
bool make_directory(const std::string& path) { return ::mkdir(path.c_str(), 0700) == 0 || errno == EEXIST; }

std::string cache_directory() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/halfgrad";  // relative: ignored (XDG spec)
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.cache/halfgrad";
  return "";
}

// An exclusive flock on `path`, waited for at most 10 s (a holder measures for well under one): past
// that the caller goes on without it rather than hang.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)) {
    if (fd_ < 0) return;
    for (int waited_ms = 0; ::flock(fd_, LOCK_EX | LOCK_NB) != 0; waited_ms += 10) {
      if (errno != EWOULDBLOCK || waited_ms >= 10000) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

// The file's bytes (at most `limit` + 1, so that an oversized file is seen as one); false when it
// does not exist. Something unreadable or not a regular file (a directory, a FIFO) reads as empty,
// which the parser rejects.
bool read_file(const std::string& path, size_t limit, std::string& text) {
  text.clear();
  // Non-blocking, so that a FIFO put there does not hang the open; checked as a regular file after.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT;
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return true;
  }
  text.assign(limit + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  ::close(fd);
  text.resize(got);
  return true;
}

// Writes `text` to a temporary file beside `path` and renames it over `path`; "" or why not.
std::string write_file_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  ::unlink(temporary.c_str());  // a leftover of a killed process that had this pid
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  int failure = 0;  // the errno of the first call that failed
  for (size_t done = 0; done < text.size() && failure == 0;) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      failure = n < 0 ? errno : EIO;
    else
      done += size_t(n);
  }
  if (failure == 0 && ::fsync(fd) != 0) failure = errno;
  if (::close(fd) != 0 && failure == 0) failure = errno;
  if (failure == 0 && ::rename(temporary.c_str(), path.c_str()) != 0) failure = errno;
  if (failure == 0) return "";
  ::unlink(temporary.c_str());
  return std::strerror(failure);
}

// One line on stderr, once per process for each distinct text (f32 and a half dtype settling in turn
// would otherwise repeat a cache file's fault when it cannot be rewritten).
void warn_once(const std::string& line) {
  static std::mutex mutex;
  static std::vector<std::string> said;
  const std::lock_guard<std::mutex> guard(mutex);
  if (std::find(said.begin(), said.end(), line) != said.end()) return;
  said.push_back(line);
  std::fprintf(stderr, "%s\n", line.c_str());
}

// ---- the plan -----------------------------------------------------------------------------------

struct DTypePlan {
  std::atomic<bool> ready{false};
  std::array<GemmCandidate, kGemmShapeClasses> choice{};
  std::string source;
};

struct PlanState {
  std::mutex mutex;
  std::array<DTypePlan, kGemmPlanDTypes> plans;
};
PlanState& plan_state() {
  static PlanState state;
  return state;
}

std::vector<GemmDecisionTimings> of_dtype(const std::vector<GemmDecisionTimings>& all, GemmPlanDType dtype) {
  std::vector<GemmDecisionTimings> out;
  for (const GemmDecisionTimings& d : all)
    if (d.dtype == dtype) out.push_back(d);
  return out;
}

// Settles `plan` from the cache file or by measuring (the caller holds the state's mutex).
void settle(GemmPlanDType dtype, DTypePlan& plan) {
  const CpuGemmCaps& caps = detect_cpu_gemm_caps();
  for (int shape = 0; shape < kGemmShapeClasses; ++shape)
    plan.choice[size_t(shape)] = flag_rule_candidate(dtype, GemmShapeClass(shape), caps);
  if (gemm_candidates(dtype, caps).size() < 2) {
    plan.source = "the only path on this CPU";
    return;
  }
  const std::string identity = cpu_identity(caps);
  const int threads = omp_get_max_threads();
  const std::string path = gemm_cache_path(identity, threads);

  std::vector<GemmDecisionTimings> cached, mine;
  std::unique_ptr<FileLock> lock;
  if (!path.empty()) {
    make_directory(path.substr(0, path.rfind("/halfgrad/")));
    make_directory(path.substr(0, path.rfind('/')));
    lock = std::make_unique<FileLock>(path + ".lock");
    std::string text, error;
    if (read_file(path, 16 * 1024, text)) {
      cached = parse_gemm_cache(text, identity, threads, caps, error);
      if (!error.empty())
        warn_once("[cpu gemm] ignoring the calibration cache " + path + ": " + error + "; measuring again");
      mine = of_dtype(cached, dtype);
    }
  }
  if (!mine.empty()) {
    plan.source = "cached in " + path;
  } else {
    const auto start = std::chrono::steady_clock::now();
    mine = measure_gemm_decisions(dtype, caps);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    char measured[48];
    std::snprintf(measured, sizeof measured, "measured in %.0f ms", ms);
    plan.source = measured;
    if (path.empty()) {
      plan.source += " (no cache: neither XDG_CACHE_HOME nor HOME is set)";
    } else {
      cached.insert(cached.end(), mine.begin(), mine.end());
      const std::string failure = write_file_atomically(path, format_gemm_cache(identity, threads, cached));
      if (failure.empty()) {
        plan.source += ", cached in " + path;
      } else {
        plan.source += ", not cached (" + path + ": " + failure + ")";
        warn_once("[cpu gemm] cannot write the calibration cache " + path + ": " + failure);
      }
    }
  }
  // Every process chooses from the timings as the file holds them (6 significant digits), so the one
  // that measured and the ones that read its file cannot land on different sides of the margin.
  std::string unused;
  const std::vector<GemmDecisionTimings> as_filed =
      parse_gemm_cache(format_gemm_cache(identity, threads, mine), identity, threads, caps, unused);
  for (const GemmDecisionTimings& d : as_filed.empty() ? mine : as_filed)
    plan.choice[size_t(d.shape)] = choose_gemm_candidate(d.timings, flag_rule_candidate(dtype, d.shape, caps));
}

// The plan of `dtype`, settled; nullptr inside an OpenMP parallel region when not yet settled.
const DTypePlan* settled_plan(GemmPlanDType dtype) {
  PlanState& state = plan_state();
  DTypePlan& plan = state.plans[size_t(dtype)];
  if (plan.ready.load(std::memory_order_acquire)) return &plan;
  if (omp_in_parallel()) return nullptr;
  // A half dtype's fp32 candidate runs the f32 kernel with the f32 plan's tile: settle that first,
  // outside this dtype's settling (which holds the mutex and the cache file's lock).
  if (dtype != GemmPlanDType::f32) (void)settled_plan(GemmPlanDType::f32);
  const std::lock_guard<std::mutex> guard(state.mutex);
  if (!plan.ready.load(std::memory_order_relaxed)) {
    settle(dtype, plan);
    plan.ready.store(true, std::memory_order_release);
  }
  return &plan;
}

GemmPlanDType plan_dtype_of(DType dtype, const char* caller) {
  if (dtype == DType::f32) return GemmPlanDType::f32;
  if (dtype == DType::bf16) return GemmPlanDType::bf16;
  HG_CHECK(dtype == DType::f16, "[", caller, "] expected f32, bf16 or f16, got ", dtype_name(dtype));
  return GemmPlanDType::f16;
}

}  // namespace

namespace {
// HG_CPU_GEMM's text and meaning, read once.
struct CpuGemmEnvironment {
  std::string text;
  CpuGemmChoice choice;
};
const CpuGemmEnvironment& cpu_gemm_environment() {
  static const CpuGemmEnvironment env = [] {
    const char* text = std::getenv("HG_CPU_GEMM");
    return CpuGemmEnvironment{text != nullptr ? text : "", parse_cpu_gemm_choice(text)};
  }();
  return env;
}
}  // namespace

CpuGemmChoice cpu_gemm_choice() { return cpu_gemm_environment().choice; }

GemmCandidate planned_gemm_candidate(GemmPlanDType dtype, int64_t m, int64_t n, int64_t k) {
  const GemmShapeClass shape = classify_gemm_shape(m, n, k);
  const DTypePlan* plan = cpu_gemm_choice() == CpuGemmChoice::automatic ? settled_plan(dtype) : nullptr;
  if (plan != nullptr) return plan->choice[size_t(shape)];
  // The flag rule. f32 by the product's own depth (what f32_blocking takes), without asking for the
  // AMX tile state (a forced avx512 or fp32 promises never to) and without running the cache rule's
  // AVX-512 code on a CPU that lacks it.
  if (dtype == GemmPlanDType::f32) {
    if (!cpu_has_avx512_gemm()) return GemmCandidate::tile14x32;
    return f32_blocking_for(detect_cpu_caches(), k).tile == GemmTile::mr6_nr64 ? GemmCandidate::tile6x64
                                                                               : GemmCandidate::tile14x32;
  }
  return flag_rule_candidate(dtype, shape, detect_cpu_gemm_caps());
}

std::vector<GemmDecisionTimings> measure_gemm_decisions(GemmPlanDType dtype, const CpuGemmCaps& caps) {
  if (gemm_candidates(dtype, caps).empty()) return {};
  switch (dtype) {
    case GemmPlanDType::f32:
      return measure_typed<float>(dtype, caps);
    case GemmPlanDType::bf16:
      return measure_typed<bfloat16>(dtype, caps);
    case GemmPlanDType::f16:
      return measure_typed<half>(dtype, caps);
  }
  return {};
}

GemmBlocking f32_blocking(int64_t m, int64_t n, int64_t k) {
  static const CpuCaches caches = detect_cpu_caches();
  if (cpu_gemm_choice() != CpuGemmChoice::automatic) return f32_blocking_for(caches, k);
  const GemmCandidate tile = planned_gemm_candidate(GemmPlanDType::f32, m, n, k);
  return f32_blocking_of_tile(tile == GemmCandidate::tile6x64 ? GemmTile::mr6_nr64 : GemmTile::mr14_nr32, caches);
}

std::string gemm_cache_path(const std::string& identity, int threads) {
  const std::string directory = cache_directory();
  if (directory.empty()) return "";
  char name[64];
  std::snprintf(name, sizeof name, "/cpu-gemm-%016llx-t%d.txt", static_cast<unsigned long long>(fnv1a64(identity)),
                threads);
  return directory + name;
}

void reset_gemm_plan() {
  PlanState& state = plan_state();
  const std::lock_guard<std::mutex> guard(state.mutex);
  for (DTypePlan& plan : state.plans) plan.ready.store(false, std::memory_order_release);
}

}  // namespace detail

std::string gemm_plan_description(DType dtype) {
  const detail::GemmPlanDType plan_dtype = detail::plan_dtype_of(dtype, "gemm_plan_description");
  if (!detail::cpu_has_avx512_gemm()) return dtype == DType::f32 ? "eigen" : "f32 temporaries";
  const detail::CpuGemmChoice env = detail::cpu_gemm_choice();
  if (dtype != DType::f32 && env != detail::CpuGemmChoice::automatic && env != detail::CpuGemmChoice::flags) {
    if (env == detail::CpuGemmChoice::amx) return "amx";
    if (env == detail::CpuGemmChoice::amx4) return dtype == DType::f16 ? "amx (4 products)" : "amx";
    if (env == detail::CpuGemmChoice::avx512) return dtype == DType::f16 ? "fp32" : "avx512";
    return "fp32";
  }
  const detail::GemmShape shapes[] = {detail::representative_shape(detail::GemmShapeClass::square, 1),
                                      detail::representative_shape(detail::GemmShapeClass::skinny, 1),
                                      detail::representative_shape(detail::GemmShapeClass::k_small, 1)};
  std::string names[detail::kGemmShapeClasses];
  for (int shape = 0; shape < detail::kGemmShapeClasses; ++shape)
    names[shape] = detail::gemm_candidate_name(
        detail::planned_gemm_candidate(plan_dtype, shapes[shape].m, shapes[shape].n, shapes[shape].k));
  if (names[0] == names[1] && names[1] == names[2]) return names[0];
  std::string out;
  for (int shape = 0; shape < detail::kGemmShapeClasses; ++shape) {
    if (shape > 0) out += ", ";
    out += detail::gemm_shape_class_name(detail::GemmShapeClass(shape));
    out += ' ';
    out += names[shape];
  }
  return out;
}

std::string gemm_plan_source(DType dtype) {
  const detail::GemmPlanDType plan_dtype = detail::plan_dtype_of(dtype, "gemm_plan_source");
  if (detail::cpu_gemm_choice() != detail::CpuGemmChoice::automatic)
    return "HG_CPU_GEMM=" + detail::cpu_gemm_environment().text;
  const detail::DTypePlan* plan = detail::settled_plan(plan_dtype);
  return plan != nullptr ? plan->source : "not settled yet (asked inside an OpenMP parallel region)";
}

std::string gemm_plan_line(DType precision) {
  const bool half = precision == DType::bf16 || precision == DType::f16;
  std::string line = "cpu gemm: f32 " + gemm_plan_description(DType::f32);
  if (half) {
    line += ", ";
    line += dtype_name(precision);
    line += ' ';
    line += gemm_plan_description(precision);
  }
  return line + " (" + gemm_plan_source(half ? precision : DType::f32) + ")";
}

}  // namespace hg::kernels::cpu
