// kernels/cpu/gemm_plan.* and gemm_calibration.*: calibrated CPU GEMM dispatch (issue 41), and the
// timed tiers of tier_calibration.h (row kernels, half conversions).
// The pure parts with made-up CPUs and timings (shape classes, the choosing rule, the flag rule, the
// cache file and every way it can be wrong), then the process's plan on this CPU: a cache file with
// injected timings decides the path gemm() takes (checked bit for bit against the path called
// directly), a bad file is ignored with one line and rewritten, and a missing cache directory only
// costs a measurement.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <omp.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/calibration_rule.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_avx512_blocking.h"
#include "kernels/cpu/gemm_calibration.h"
#include "kernels/cpu/gemm_plan.h"
#include "kernels/cpu/tier_calibration.h"
#include "kernels/error.h"
#include "kernels/half.h"
#include "kernels/kernels.h"

namespace {

namespace cpu = hg::kernels::cpu;
namespace d = hg::kernels::cpu::detail;
using d::CpuGemmCaps;
using d::GemmCandidate;
using d::GemmDecisionTimings;
using d::GemmPlanDType;
using d::GemmShapeClass;
using d::GemmTiming;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

CpuGemmCaps zen4() { return {true, true, false, {32 * 1024, 1024 * 1024}}; }
CpuGemmCaps xeon_without_amx() { return {true, true, false, {48 * 1024, 2048 * 1024}}; }
CpuGemmCaps sapphire_rapids() { return {true, true, true, {48 * 1024, 2048 * 1024}}; }
CpuGemmCaps without_avx512() { return {false, false, false, {32 * 1024, 512 * 1024}}; }

// Timings for every decision of `dtype` on `caps`, each candidate i taking seconds(i).
template <class Seconds>
std::vector<GemmDecisionTimings> timings_for(GemmPlanDType dtype, const CpuGemmCaps& caps, Seconds seconds) {
  std::vector<GemmDecisionTimings> out;
  for (int shape = 0; shape < d::kGemmShapeClasses; ++shape) {
    GemmDecisionTimings decision{dtype, GemmShapeClass(shape), {}};
    for (GemmCandidate c : d::gemm_candidates(dtype, caps)) decision.timings.push_back({c, seconds(c)});
    out.push_back(decision);
  }
  return out;
}

std::string rewrite_checksum(std::string text) {
  const size_t last = text.rfind("checksum ");
  text.resize(last);
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(d::fnv1a64(text)));
  return text + "checksum " + sum + "\n";
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "\"", from, "\" not in the cache text");
  return text.replace(at, from.size(), to);
}

TEST_CASE("classify_gemm_shape: skinny below 64 rows or columns, k_small to depth 256, square beyond") {
  CHECK(d::classify_gemm_shape(63, 4096, 4096) == GemmShapeClass::skinny);
  CHECK(d::classify_gemm_shape(4096, 8, 4096) == GemmShapeClass::skinny);
  CHECK(d::classify_gemm_shape(64, 64, 256) == GemmShapeClass::k_small);
  CHECK(d::classify_gemm_shape(2048, 768, 64) == GemmShapeClass::k_small);
  CHECK(d::classify_gemm_shape(64, 64, 257) == GemmShapeClass::square);
  CHECK(d::classify_gemm_shape(2048, 3072, 768) == GemmShapeClass::square);
  for (int shape = 0; shape < d::kGemmShapeClasses; ++shape)  // each class's representative is of its class
    for (int threads : {1, 2, 3, 16, 64, 1000}) {
      const d::GemmShape s = d::representative_shape(GemmShapeClass(shape), threads);
      CHECK(d::classify_gemm_shape(s.m, s.n, s.k) == GemmShapeClass(shape));
      const d::GemmShape one = d::representative_shape(GemmShapeClass(shape), 1);
      CHECK(s.m * s.n * s.k == one.m * one.n * one.k * std::min(threads, 64));  // the same work per thread
    }
}

TEST_CASE("choose_gemm_candidate: the fastest, unless the incumbent is within 5% of it; bad times never win") {
  using C = GemmCandidate;
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, 1.00}, {C::fp32, 0.80}}, C::vdpbf16ps) == C::fp32);
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, 1.00}, {C::fp32, 0.96}}, C::vdpbf16ps) == C::vdpbf16ps);
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, 1.00}, {C::fp32, 0.949}}, C::vdpbf16ps) == C::fp32);
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, 0.50}, {C::fp32, 1.00}}, C::fp32) == C::vdpbf16ps);
  // Three candidates: the fastest of all, not merely one faster than the incumbent.
  CHECK(d::choose_gemm_candidate({{C::amx, 1.0}, {C::vdpbf16ps, 0.7}, {C::fp32, 0.5}}, C::amx) == C::fp32);
  // NaN, infinity, zero and negative times are not measurements.
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, 1.0}, {C::fp32, kNaN}}, C::vdpbf16ps) == C::vdpbf16ps);
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, kInf}, {C::fp32, 1.0}}, C::vdpbf16ps) == C::fp32);
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, 1.0}, {C::fp32, 0.0}}, C::vdpbf16ps) == C::vdpbf16ps);
  CHECK(d::choose_gemm_candidate({{C::vdpbf16ps, 1.0}, {C::fp32, -1.0}}, C::vdpbf16ps) == C::vdpbf16ps);
  CHECK(d::choose_gemm_candidate({}, C::tile6x64) == C::tile6x64);
  CHECK(d::choose_gemm_candidate({{C::tile14x32, kNaN}}, C::tile6x64) == C::tile6x64);
  // Equal times: the incumbent stays; without one, the first listed.
  CHECK(d::choose_gemm_candidate({{C::tile14x32, 1.0}, {C::tile6x64, 1.0}}, C::tile6x64) == C::tile6x64);
  CHECK(d::choose_gemm_candidate({{C::tile14x32, 1.0}, {C::tile6x64, 1.0}}, C::amx) == C::tile14x32);
  // Deterministic: the same timings give the same answer every time.
  const std::vector<GemmTiming> t = {{C::vdpbf16ps, 0.0123}, {C::fp32, 0.0117}};
  for (int i = 0; i < 100; ++i) CHECK(d::choose_gemm_candidate(t, C::vdpbf16ps) == C::vdpbf16ps);
}

TEST_CASE("gemm_candidates and the flag rule on made-up CPUs") {
  using C = GemmCandidate;
  CHECK(d::gemm_candidates(GemmPlanDType::f32, zen4()) == std::vector<C>{C::tile14x32, C::tile6x64});
  CHECK(d::gemm_candidates(GemmPlanDType::bf16, zen4()) == std::vector<C>{C::vdpbf16ps, C::fp32});
  CHECK(d::gemm_candidates(GemmPlanDType::f16, zen4()) == std::vector<C>{C::fp32});
  CHECK(d::gemm_candidates(GemmPlanDType::bf16, sapphire_rapids()) == std::vector<C>{C::amx, C::vdpbf16ps, C::fp32});
  CHECK(d::gemm_candidates(GemmPlanDType::f16, sapphire_rapids()) == std::vector<C>{C::amx, C::fp32});
  for (int dtype = 0; dtype < d::kGemmPlanDTypes; ++dtype)
    CHECK(d::gemm_candidates(GemmPlanDType(dtype), without_avx512()).empty());

  for (int shape = 0; shape < d::kGemmShapeClasses; ++shape) {
    const GemmShapeClass s = GemmShapeClass(shape);
    CHECK(d::flag_rule_candidate(GemmPlanDType::f32, s, zen4()) == C::tile14x32);
    CHECK(d::flag_rule_candidate(GemmPlanDType::bf16, s, zen4()) == C::vdpbf16ps);
    CHECK(d::flag_rule_candidate(GemmPlanDType::bf16, s, xeon_without_amx()) == C::vdpbf16ps);
    CHECK(d::flag_rule_candidate(GemmPlanDType::bf16, s, sapphire_rapids()) == C::amx);
    CHECK(d::flag_rule_candidate(GemmPlanDType::f16, s, zen4()) == C::fp32);
    CHECK(d::flag_rule_candidate(GemmPlanDType::f16, s, sapphire_rapids()) == C::amx);
  }
  // A 48 KiB L1d keeps 14 x 32 for shallow products only (f32_blocking_for's depth rule).
  CHECK(d::flag_rule_candidate(GemmPlanDType::f32, GemmShapeClass::k_small, xeon_without_amx()) == C::tile14x32);
  CHECK(d::flag_rule_candidate(GemmPlanDType::f32, GemmShapeClass::square, xeon_without_amx()) == C::tile6x64);
  // The tiles' blockings share KC and NC, so both sum each C element in the same order.
  for (const CpuGemmCaps& caps : {zen4(), xeon_without_amx()}) {
    const d::GemmBlocking narrow = d::f32_blocking_of_tile(d::GemmTile::mr14_nr32, caps.caches);
    const d::GemmBlocking wide = d::f32_blocking_of_tile(d::GemmTile::mr6_nr64, caps.caches);
    CHECK(narrow.kc == wide.kc);
    CHECK(narrow.nc == wide.nc);
  }
}

TEST_CASE("the cache file round-trips, and every way of being wrong is named") {
  const CpuGemmCaps caps = zen4();
  const std::string identity = "AMD EPYC | family 25 model 17 stepping 1 | avx512 1 avx512_bf16 1 amx 0 | l1d 32768";
  std::vector<GemmDecisionTimings> all = timings_for(
      GemmPlanDType::f32, caps, [](GemmCandidate c) { return c == GemmCandidate::tile14x32 ? 1.25e-3 : 1.5e-3; });
  const auto bf16 = timings_for(GemmPlanDType::bf16, caps,
                                [](GemmCandidate c) { return c == GemmCandidate::fp32 ? 2.0e-3 : 0.75e-3; });
  all.insert(all.end(), bf16.begin(), bf16.end());
  const std::string text = d::format_gemm_cache(identity, 2, all);
  MESSAGE(text);

  std::string error;
  const std::vector<GemmDecisionTimings> back = d::parse_gemm_cache(text, identity, 2, caps, error);
  CHECK(error.empty());
  REQUIRE(back.size() == all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK(back[i].dtype == all[i].dtype);
    CHECK(back[i].shape == all[i].shape);
    REQUIRE(back[i].timings.size() == all[i].timings.size());
    for (size_t c = 0; c < all[i].timings.size(); ++c) {
      CHECK(back[i].timings[c].candidate == all[i].timings[c].candidate);
      CHECK(back[i].timings[c].seconds == doctest::Approx(all[i].timings[c].seconds).epsilon(1e-6));
    }
  }

  const auto rejects = [&](const std::string& bad, const std::string& expected, int threads = 2,
                           const CpuGemmCaps& with = zen4()) {
    std::string why;
    const auto parsed = d::parse_gemm_cache(bad, identity, threads, with, why);
    CHECK(parsed.empty());
    CHECK_MESSAGE(why.find(expected) != std::string::npos, "error: ", why, "\nexpected to contain: ", expected);
  };
  rejects("", "empty, or not a regular file");
  rejects(text.substr(0, text.size() - 10), "truncated");
  rejects(text.substr(0, text.find("threads")), "truncated");
  rejects(replace_once(text, "calibration 1", "calibration 2"), "line 1 is \"halfgrad cpu gemm calibration 2\"");
  rejects(replace_once(text, "1.250000e-03", "1.350000e-03"), "checksum does not match");
  {
    std::string why;
    CHECK(d::parse_gemm_cache(text, identity + "x", 2, caps, why).empty());
    CHECK(why.find("written for another CPU") != std::string::npos);
  }
  rejects(text, "written for \"threads 2\", this process runs 4", 4);
  // A file of the right identity whose candidates are not this CPU's (AMX lines missing, or extra).
  rejects(text, "2 paths, this CPU has 3", 2, sapphire_rapids());
  rejects(rewrite_checksum(replace_once(text, "bf16 square avx512=", "bf16 square amx=1e-3 avx512=")),
          "3 paths, this CPU has 2");
  rejects(rewrite_checksum(replace_once(text, "bf16 square avx512=", "bf16 square fp32=")),
          "expected avx512=<seconds>");
  rejects(rewrite_checksum(replace_once(text, "7.500000e-04", "nan")), "a finite time > 0");
  rejects(rewrite_checksum(replace_once(text, "7.500000e-04", "-1")), "a finite time > 0");
  rejects(rewrite_checksum(replace_once(text, "7.500000e-04", "7.5e-04x")), "a finite time > 0");
  rejects(rewrite_checksum(replace_once(text, "7.500000e-04", "1e300")), "a finite time > 0");
  // Only the spelling format_gemm_cache writes: strtod's other spellings of the same value are refused.
  for (const char* spelling : {"7.5e-04", "+7.500000e-04", "7.500000E-04", "0x1.89374bc6a7efap-11"})
    rejects(rewrite_checksum(replace_once(text, "7.500000e-04", spelling)), "a finite time > 0");
  rejects(rewrite_checksum(replace_once(text, "bf16 square", "bf16  square")), "expected \"<f32|bf16|f16>");
  rejects(rewrite_checksum(replace_once(text, "bf16 square", "f64 square")), "expected \"<f32|bf16|f16>");
  rejects(rewrite_checksum(replace_once(text, "bf16 skinny", "bf16 square")), "a second line for this decision");
  {
    const size_t line = text.find("bf16 k_small");
    const std::string without = text.substr(0, line) + text.substr(text.find('\n', line) + 1);
    rejects(rewrite_checksum(without), "only 2 of the 3 shape classes of bf16");
  }
  rejects(rewrite_checksum(replace_once(text, "\nchecksum", "\r\nchecksum")), "a finite time > 0");
  rejects(text + std::string(20000, '#') + "\n", "bytes, expected at most");
  rejects(std::string(100, '\0') + "\n", "truncated");
}

// ---- the process's plan on this CPU -----------------------------------------------------------------

// A temporary XDG_CACHE_HOME (and HOME) for one case, the plan reset before and after.
class CacheHome {
 public:
  CacheHome() {
    char pattern[] = "/tmp/hg_gemm_plan_XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    dir_ = pattern;
    save("XDG_CACHE_HOME", saved_xdg_);
    save("HOME", saved_home_);
    ::setenv("XDG_CACHE_HOME", dir_.c_str(), 1);
    d::reset_gemm_plan();
  }
  ~CacheHome() {
    restore("XDG_CACHE_HOME", saved_xdg_);
    restore("HOME", saved_home_);
    d::reset_gemm_plan();
    std::filesystem::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }

 private:
  static void save(const char* name, std::optional<std::string>& out) {
    if (const char* v = std::getenv(name)) out = v;
  }
  static void restore(const char* name, const std::optional<std::string>& value) {
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  std::string dir_;
  std::optional<std::string> saved_xdg_, saved_home_;
};

std::string cache_path() {
  return d::gemm_cache_path(d::cpu_identity(d::detect_cpu_gemm_caps()), omp_get_max_threads());
}

void write_cache(const std::vector<GemmDecisionTimings>& decisions) {
  const std::string path = cache_path();
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << d::format_gemm_cache(d::cpu_identity(d::detect_cpu_gemm_caps()),
                                                                omp_get_max_threads(), decisions);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `body` with stderr captured to a file; returns what it wrote. stderr comes back even if the
// body throws.
template <class Body>
std::string capture_stderr(Body body) {
  std::fflush(stderr);
  char name[] = "/tmp/hg_gemm_plan_stderr_XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  struct Redirect {
    int saved;
    explicit Redirect(int to) : saved(::dup(2)) { ::dup2(to, 2); }
    ~Redirect() {
      std::fflush(stderr);
      ::dup2(saved, 2);
      ::close(saved);
    }
  };
  {
    const Redirect redirect(fd);
    body();
  }
  ::close(fd);
  const std::string text = read_text(name);
  ::unlink(name);
  return text;
}

bool skip_unless_calibrating(GemmPlanDType dtype) {
  const char* forced = std::getenv("HG_CPU_GEMM");
  if (forced != nullptr && *forced != '\0' && std::string(forced) != "auto") {
    MESSAGE("skipped: HG_CPU_GEMM=", forced, " fixes the paths without calibrating");
    return true;
  }
  if (d::gemm_candidates(dtype, d::detect_cpu_gemm_caps()).size() < 2) {
    MESSAGE("skipped: this CPU has one ", d::gemm_plan_dtype_name(dtype), " path, nothing to calibrate");
    return true;
  }
  return false;
}

template <class T>
std::vector<T> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> out(static_cast<size_t>(count));
  for (T& x : out) x = T(u(rng));
  return out;
}

TEST_CASE("f32: the injected timings choose the tile gemm() runs, and both tiles give the same bits") {
  if (skip_unless_calibrating(GemmPlanDType::f32)) return;
  const CpuGemmCaps& caps = d::detect_cpu_gemm_caps();
  CacheHome outer;                          // the direct calls below settle f32 too: never into the user's cache
  const int64_t m = 300, n = 200, k = 520;  // square class
  const std::vector<float> a = random_values<float>(m * k, 1), b = random_values<float>(n * k, 2);
  // Both tiles sum each element in the same order: the same bits in every layout, with beta != 0 too.
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const std::vector<float> c0 = random_values<float>(m * n, 5);
      std::vector<float> narrow_c = c0, wide_c = c0;
      const int64_t lda = ta ? m : k, ldb = tb ? k : n;
      const auto run = [&](d::GemmTile tile, std::vector<float>& out) {
        d::gemm_f32_avx512_blocked(d::f32_blocking_of_tile(tile, caps.caches), ta, tb, m, n, k, 0.75f, a.data(), lda,
                                   b.data(), ldb, 0.5f, out.data(), n);
      };
      run(d::GemmTile::mr14_nr32, narrow_c);
      run(d::GemmTile::mr6_nr64, wide_c);
      CHECK_MESSAGE(std::memcmp(narrow_c.data(), wide_c.data(), narrow_c.size() * sizeof(float)) == 0, "trans_a ", ta,
                    " trans_b ", tb);
    }
  const auto run_gemm = [&] {
    std::vector<float> c(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
    cpu::gemm(false, true, m, n, k, 1.0, a.data(), k, b.data(), k, 0.0, c.data(), n, hg::DType::f32);
    return c;
  };
  const auto run_tile = [&](d::GemmTile tile) {
    std::vector<float> c(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
    d::gemm_f32_avx512_blocked(d::f32_blocking_of_tile(tile, caps.caches), false, true, m, n, k, 1.0f, a.data(), k,
                               b.data(), k, 0.0f, c.data(), n);
    return c;
  };
  const std::vector<float> narrow = run_tile(d::GemmTile::mr14_nr32), wide = run_tile(d::GemmTile::mr6_nr64);
  CHECK(std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float)) == 0);

  for (const GemmCandidate fastest : {GemmCandidate::tile6x64, GemmCandidate::tile14x32}) {
    CacheHome home;
    write_cache(timings_for(GemmPlanDType::f32, caps, [&](GemmCandidate c) { return c == fastest ? 1e-3 : 2e-3; }));
    const std::vector<float> c = run_gemm();
    CHECK(d::planned_gemm_candidate(GemmPlanDType::f32, m, n, k) == fastest);
    CHECK(d::gemm_tile_name(d::f32_blocking(m, n, k).tile) == std::string(d::gemm_candidate_name(fastest)));
    CHECK(cpu::gemm_plan_source(hg::DType::f32) == "cached in " + cache_path());
    CHECK(cpu::gemm_plan_description(hg::DType::f32) == d::gemm_candidate_name(fastest));
    CHECK(std::memcmp(c.data(), narrow.data(), c.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("bf16: the injected timings choose between vdpbf16ps and the fp32 kernel, per shape class") {
  if (skip_unless_calibrating(GemmPlanDType::bf16)) return;
  const CpuGemmCaps& caps = d::detect_cpu_gemm_caps();
  if (caps.amx || !caps.avx512_bf16) {
    MESSAGE("skipped: this case expects vdpbf16ps and fp32 as the bf16 paths (no AMX)");
    return;
  }
  using hg::bfloat16;
  CacheHome outer;                          // the direct calls below settle f32 too: never into the user's cache
  const int64_t m = 100, n = 120, k = 600;  // square
  // A is subnormal (|a| < 2^-126): vdpbf16ps counts such inputs as zero and the fp32 kernel does
  // not (gemm_avx512.h), so the two paths give different bits and the result tells which one ran.
  std::vector<bfloat16> a = random_values<bfloat16>(m * k, 3), b = random_values<bfloat16>(k * n, 4);
  for (bfloat16& x : a) x = bfloat16(std::ldexp(float(x), -128));
  for (bfloat16& x : b) x = bfloat16(std::ldexp(float(x), 100));
  const auto poisoned = [&] {
    return std::vector<bfloat16>(size_t(m * n), bfloat16(std::numeric_limits<float>::quiet_NaN()));
  };
  std::vector<bfloat16> by_dot = poisoned(), by_fp32 = poisoned();
  d::gemm_bf16_avx512(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, 0.0f, by_dot.data(), n, true);
  d::gemm_half_via_f32_avx512(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, 0.0f, by_fp32.data(), n, true);
  REQUIRE(std::memcmp(by_dot.data(), by_fp32.data(), by_dot.size() * 2) != 0);  // the paths are told apart

  for (const GemmCandidate fastest : {GemmCandidate::fp32, GemmCandidate::vdpbf16ps}) {
    CacheHome home;
    // The square class's fastest is `fastest`; skinny and k_small keep the other one.
    std::vector<GemmDecisionTimings> t = timings_for(GemmPlanDType::bf16, caps, [](GemmCandidate) { return 1e-3; });
    for (GemmDecisionTimings& decision : t)
      for (GemmTiming& timing : decision.timings)
        if ((decision.shape == GemmShapeClass::square) == (timing.candidate == fastest)) timing.seconds = 0.5e-3;
    write_cache(t);
    std::vector<bfloat16> c = poisoned();
    cpu::gemm(true, false, m, n, k, 1.0, a.data(), m, b.data(), n, 0.0, c.data(), n, hg::DType::bf16);
    const std::vector<bfloat16>& expected = fastest == GemmCandidate::fp32 ? by_fp32 : by_dot;
    CHECK(std::memcmp(c.data(), expected.data(), c.size() * 2) == 0);
    // gemm_bias follows the same plan: its bias epilogue on the chosen path, bit for bit.
    const std::vector<bfloat16> bias = random_values<bfloat16>(n, 6);
    std::vector<bfloat16> with_bias = poisoned(), expected_bias = poisoned();
    cpu::gemm_bias(true, false, m, n, k, 1.0, a.data(), m, b.data(), n, bias.data(), with_bias.data(), n,
                   hg::DType::bf16);
    if (fastest == GemmCandidate::fp32)
      d::gemm_bias_half_via_f32_avx512(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, bias.data(),
                                       expected_bias.data(), n);
    else
      d::gemm_bias_bf16_avx512(true, false, m, n, k, 1.0f, a.data(), m, b.data(), n, bias.data(), expected_bias.data(),
                               n);
    CHECK(std::memcmp(with_bias.data(), expected_bias.data(), with_bias.size() * 2) == 0);
    const GemmCandidate other = fastest == GemmCandidate::fp32 ? GemmCandidate::vdpbf16ps : GemmCandidate::fp32;
    CHECK(d::planned_gemm_candidate(GemmPlanDType::bf16, 16, 1024, 1024) == other);  // skinny
    CHECK(d::planned_gemm_candidate(GemmPlanDType::bf16, 1024, 1024, 64) == other);  // k_small
    const std::string description = cpu::gemm_plan_description(hg::DType::bf16);
    CHECK(description == std::string("square ") + d::gemm_candidate_name(fastest) + ", skinny " +
                             d::gemm_candidate_name(other) + ", k_small " + d::gemm_candidate_name(other));
  }
}

TEST_CASE("a bad cache file is ignored with one line on stderr, measured again and rewritten") {
  if (skip_unless_calibrating(GemmPlanDType::f32)) return;
  const CpuGemmCaps& caps = d::detect_cpu_gemm_caps();
  const std::string identity = d::cpu_identity(caps);
  for (const std::string& bad :
       {std::string("not a cache\n"), std::string(5000, 'x'),
        std::string("halfgrad cpu gemm calibration 1\ncpu someone else\nthreads 1\nchecksum 0\n")}) {
    CacheHome home;
    std::filesystem::create_directories(std::filesystem::path(cache_path()).parent_path());
    std::ofstream(cache_path(), std::ios::binary) << bad;
    const std::string err = capture_stderr([] { (void)d::planned_gemm_candidate(GemmPlanDType::f32, 512, 512, 512); });
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK(err.find("[cpu gemm] ignoring the calibration cache " + cache_path() + ": ") == 0);
    CHECK(err.find("; measuring again") != std::string::npos);
    const std::string source = cpu::gemm_plan_source(hg::DType::f32);
    CHECK(source.find("measured in ") == 0);
    CHECK(source.find("cached in " + cache_path()) != std::string::npos);
    std::string why;
    const auto rewritten = d::parse_gemm_cache(read_text(cache_path()), identity, omp_get_max_threads(), caps, why);
    CHECK(why.empty());
    CHECK(rewritten.size() == size_t(d::kGemmShapeClasses));
  }
}

TEST_CASE("a directory where the cache file goes: measured, said once per process, the run goes on") {
  if (skip_unless_calibrating(GemmPlanDType::f32)) return;
  CacheHome home;
  std::filesystem::create_directories(cache_path());
  const std::string err = capture_stderr([] {
    (void)d::planned_gemm_candidate(GemmPlanDType::f32, 512, 512, 512);
    (void)d::planned_gemm_candidate(GemmPlanDType::bf16, 512, 512, 512);  // reads the same directory again
  });
  MESSAGE(err);
  CHECK(std::count(err.begin(), err.end(), '\n') == 2);
  CHECK(err.find("ignoring the calibration cache " + cache_path() + ": empty, or not a regular file") !=
        std::string::npos);
  CHECK(err.find("cannot write the calibration cache " + cache_path() + ": Is a directory") != std::string::npos);
  CHECK(cpu::gemm_plan_source(hg::DType::f32).find("not cached (") != std::string::npos);
}

TEST_CASE("a second dtype's calibration keeps the first's lines; without a cache directory it only measures") {
  if (skip_unless_calibrating(GemmPlanDType::f32)) return;
  const CpuGemmCaps& caps = d::detect_cpu_gemm_caps();
  {
    CacheHome home;
    (void)d::planned_gemm_candidate(GemmPlanDType::f32, 512, 512, 512);
    if (d::gemm_candidates(GemmPlanDType::bf16, caps).size() >= 2)
      (void)d::planned_gemm_candidate(GemmPlanDType::bf16, 512, 512, 512);
    std::string why;
    const auto all =
        d::parse_gemm_cache(read_text(cache_path()), d::cpu_identity(caps), omp_get_max_threads(), caps, why);
    CHECK(why.empty());
    const size_t dtypes = d::gemm_candidates(GemmPlanDType::bf16, caps).size() >= 2 ? 2 : 1;
    CHECK(all.size() == dtypes * d::kGemmShapeClasses);
    // Measured times are real: positive, finite, and no slower than a second per decision.
    for (const GemmDecisionTimings& decision : all)
      for (const GemmTiming& t : decision.timings) CHECK((t.seconds > 0 && t.seconds < 1.0));
    // Settled once per process: asking again changes nothing.
    const std::string before = cpu::gemm_plan_source(hg::DType::f32);
    (void)d::planned_gemm_candidate(GemmPlanDType::f32, 100, 100, 100);
    CHECK(cpu::gemm_plan_source(hg::DType::f32) == before);
  }
  {
    CacheHome home;
    ::unsetenv("XDG_CACHE_HOME");
    ::unsetenv("HOME");
    CHECK(cache_path().empty());
    const std::string err = capture_stderr([] { (void)d::planned_gemm_candidate(GemmPlanDType::f32, 512, 512, 512); });
    CHECK(err.empty());
    CHECK(cpu::gemm_plan_source(hg::DType::f32).find("(no cache: neither XDG_CACHE_HOME nor HOME is set)") !=
          std::string::npos);
  }
}

TEST_CASE("a relative XDG_CACHE_HOME is ignored for HOME's ~/.cache, as the XDG spec says") {
  CacheHome home;
  ::setenv("XDG_CACHE_HOME", "relative/cache", 1);
  ::setenv("HOME", home.dir().c_str(), 1);
  CHECK(cache_path().rfind(home.dir() + "/.cache/halfgrad/cpu-gemm-", 0) == 0);
  ::setenv("XDG_CACHE_HOME", (home.dir() + "/xdg").c_str(), 1);
  CHECK(cache_path().rfind(home.dir() + "/xdg/halfgrad/cpu-gemm-", 0) == 0);
  const std::string path = cache_path();
  CHECK(path.substr(path.size() - 4 - std::to_string(omp_get_max_threads()).size() - 2) ==
        "-t" + std::to_string(omp_get_max_threads()) + ".txt");
}

// ---- the row kernels' and conversions' tiers (tier_calibration.h) ------------------------------------

namespace tiers {

TEST_CASE("the conversion tier is the timed choice among the tiers this CPU runs, and converts as the scalar one") {
  using cpu::ConvertIsa;
  const auto& timings = d::convert_tier_timings();
  const ConvertIsa chosen = cpu::convert_default_isa();
  const std::string description = cpu::convert_tier_description();
  MESSAGE(description);
  CHECK(int(chosen) <= int(cpu::convert_best_isa()));
  CHECK(description.rfind(cpu::convert_isa_name(chosen), 0) == 0);
  if (cpu::convert_best_isa() == ConvertIsa::scalar) {
    CHECK(timings.empty());
    CHECK(description == "scalar (the only tier)");
  } else {
    REQUIRE(timings.size() == size_t(cpu::convert_best_isa()) + 1);  // every tier, widest first
    for (size_t i = 0; i < timings.size(); ++i) {
      CHECK(int(timings[i].first) == int(cpu::convert_best_isa()) - int(i));
      CHECK((std::isfinite(timings[i].second) && timings[i].second > 0));
      CHECK(description.find(cpu::convert_isa_name(timings[i].first)) != std::string::npos);
    }
    CHECK(chosen == d::choose_fastest(timings, cpu::convert_best_isa()));
  }
  // Whatever was chosen converts bit for bit as the scalar reference (subnormals, NaN, overflow too).
  std::vector<float> values = random_values<float>(1000, 7);
  for (float v : {0.0f, -0.0f, 1e-40f, -3e-42f, 70000.0f, -3e38f, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::infinity()})
    values.push_back(v);
  const int64_t n = int64_t(values.size());
  std::vector<hg::bfloat16> by_default(values.size()), by_scalar(values.size());
  std::vector<hg::half> h_default(values.size()), h_scalar(values.size());
  cpu::from_float(values.data(), by_default.data(), n);
  cpu::from_float(values.data(), by_scalar.data(), n, ConvertIsa::scalar);
  cpu::from_float(values.data(), h_default.data(), n);
  cpu::from_float(values.data(), h_scalar.data(), n, ConvertIsa::scalar);
  CHECK(std::memcmp(by_default.data(), by_scalar.data(), by_default.size() * 2) == 0);
  CHECK(std::memcmp(h_default.data(), h_scalar.data(), h_default.size() * 2) == 0);
}

TEST_CASE("the row kernels' default tier is the timed choice unless HG_VECTOR_MATH names one") {
  using cpu::VectorMath;
  const std::string description = cpu::vector_math_description();
  MESSAGE(description);
  const char* env = std::getenv("HG_VECTOR_MATH");
  if (env != nullptr && *env != '\0' && std::string(env) != "auto") {
    CHECK(description.find(std::string("(HG_VECTOR_MATH=") + env + ")") != std::string::npos);
    CHECK(d::vector_math_timings().empty());
    return;
  }
  const auto& timings = d::vector_math_timings();
  if (cpu::vector_math_best() == VectorMath::portable) {
    CHECK(timings.empty());
    CHECK(description == "portable (the only tier)");
    return;
  }
  REQUIRE(timings.size() == 2);
  CHECK(timings[0].first == VectorMath::avx512);
  CHECK(timings[1].first == VectorMath::portable);
  for (const auto& t : timings) CHECK((std::isfinite(t.second) && t.second > 0));
  const VectorMath chosen = d::choose_fastest(timings, VectorMath::avx512);
  CHECK(description.rfind(std::string(cpu::vector_math_name(chosen)) + " (timed: avx512 ", 0) == 0);
  cpu::vector_math_reset();
  CHECK(cpu::vector_math_active() == chosen);
}

TEST_CASE("choose_fastest on the tiers: the widest stays within 5%, a tier 5% faster replaces it") {
  using cpu::ConvertIsa;
  using T = std::vector<std::pair<ConvertIsa, double>>;
  CHECK(d::choose_fastest(T{{ConvertIsa::avx512, 1.0}, {ConvertIsa::avx2, 0.96}}, ConvertIsa::avx512) ==
        ConvertIsa::avx512);
  CHECK(d::choose_fastest(T{{ConvertIsa::avx512, 1.0}, {ConvertIsa::avx2, 0.90}, {ConvertIsa::scalar, 5.0}},
                          ConvertIsa::avx512) == ConvertIsa::avx2);
  CHECK(d::choose_fastest(T{{ConvertIsa::avx512, kNaN}, {ConvertIsa::scalar, 5.0}}, ConvertIsa::avx512) ==
        ConvertIsa::scalar);
}

}  // namespace tiers

}  // namespace
