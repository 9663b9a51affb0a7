// The pure half of calibrated GEMM dispatch: shape classes, candidates, the choosing rule and the
// cache file's format (gemm_plan.h explains each; gemm_calibration.cpp uses them).
#include "kernels/cpu/gemm_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/calibration_rule.h"
#include "kernels/cpu/gemm_avx512.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace hg::kernels::cpu::detail {
namespace {

constexpr const char* kCacheHeader = "halfgrad cpu gemm calibration 1";
constexpr size_t kCacheMaxBytes = 16 * 1024;  // a valid file is < 1 KiB; anything far larger is not ours

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// Splits on single spaces; an empty field (two spaces, a leading space) makes the line invalid.
std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (start <= line.size()) {
    const size_t space = line.find(' ', start);
    const size_t end = space == std::string_view::npos ? line.size() : space;
    fields.push_back(line.substr(start, end - start));
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  return fields;
}

// A time as format_gemm_cache writes it ("%.6e"), and only so: the text must be what formatting its
// value gives back (no leading blanks, hex floats, '+' signs or other spellings strtod accepts).
bool parse_seconds(std::string_view text, double& out) {
  if (text.empty() || text.size() > 32) return false;
  const std::string owned(text);
  char* end = nullptr;
  out = std::strtod(owned.c_str(), &end);
  if (end != owned.c_str() + owned.size() || !std::isfinite(out) || out <= 0.0 || out >= 100.0) return false;
  char again[32];
  std::snprintf(again, sizeof again, "%.6e", out);
  return owned == again;
}

template <class Enum, int N>
bool parse_name(std::string_view text, const char* (*name_of)(Enum), Enum& out) {
  for (int i = 0; i < N; ++i)
    if (text == name_of(Enum(i))) {
      out = Enum(i);
      return true;
    }
  return false;
}

// The brand string of cpuid leaves 0x80000002..4, trimmed, printable ASCII only.
std::string cpu_brand() {
  std::string brand;
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u)
    for (unsigned leaf = 0x80000002u; leaf <= 0x80000004u; ++leaf) {
      __get_cpuid(leaf, &eax, &ebx, &ecx, &edx);
      for (unsigned reg : {eax, ebx, ecx, edx})
        for (int byte = 0; byte < 4; ++byte) brand += char((reg >> (8 * byte)) & 0xff);
    }
#endif
  std::string clean;
  for (char ch : brand)
    if (ch >= 0x20 && ch < 0x7f && !(ch == ' ' && (clean.empty() || clean.back() == ' '))) clean += ch;
  while (!clean.empty() && clean.back() == ' ') clean.pop_back();
  return clean.empty() ? "unknown" : clean;
}

std::string cpu_signature() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    const unsigned base_family = (eax >> 8) & 0xf, base_model = (eax >> 4) & 0xf;
    const unsigned family = base_family == 0xf ? base_family + ((eax >> 20) & 0xff) : base_family;
    const unsigned model = base_family >= 0x6 ? (((eax >> 16) & 0xf) << 4) + base_model : base_model;
    return "family " + std::to_string(family) + " model " + std::to_string(model) + " stepping " +
           std::to_string(eax & 0xf);
  }
#endif
  return "family ? model ? stepping ?";
}

}  // namespace

const char* gemm_shape_class_name(GemmShapeClass shape) {
  switch (shape) {
    case GemmShapeClass::square:
      return "square";
    case GemmShapeClass::skinny:
      return "skinny";
    case GemmShapeClass::k_small:
      return "k_small";
  }
  return "?";
}

GemmShapeClass classify_gemm_shape(int64_t m, int64_t n, int64_t k) {
  if (std::min(m, n) < 64) return GemmShapeClass::skinny;
  if (k <= 256) return GemmShapeClass::k_small;
  return GemmShapeClass::square;
}

const char* gemm_plan_dtype_name(GemmPlanDType dtype) {
  switch (dtype) {
    case GemmPlanDType::f32:
      return "f32";
    case GemmPlanDType::bf16:
      return "bf16";
    case GemmPlanDType::f16:
      return "f16";
  }
  return "?";
}

const char* gemm_candidate_name(GemmCandidate candidate) {
  switch (candidate) {
    case GemmCandidate::tile14x32:
      return "14x32";
    case GemmCandidate::tile6x64:
      return "6x64";
    case GemmCandidate::amx:
      return "amx";
    case GemmCandidate::vdpbf16ps:
      return "avx512";
    case GemmCandidate::fp32:
      return "fp32";
  }
  return "?";
}

const CpuGemmCaps& detect_cpu_gemm_caps() {
  static const CpuGemmCaps caps = [] {
    CpuGemmCaps found;
    found.avx512 = cpu_has_avx512_gemm();
    if (!found.avx512) return found;  // detect_cpu_caches is compiled for AVX-512 (gemm_avx512.cpp)
    found.avx512_bf16 = cpu_has_avx512_bf16_gemm();
    found.amx = cpu_has_amx_bf16_gemm();
    found.caches = detect_cpu_caches();
    return found;
  }();
  return caps;
}

std::vector<GemmCandidate> gemm_candidates(GemmPlanDType dtype, const CpuGemmCaps& caps) {
  if (!caps.avx512) return {};
  switch (dtype) {
    case GemmPlanDType::f32:
      return {GemmCandidate::tile14x32, GemmCandidate::tile6x64};
    case GemmPlanDType::bf16: {
      std::vector<GemmCandidate> out;
      if (caps.amx) out.push_back(GemmCandidate::amx);
      if (caps.avx512_bf16) out.push_back(GemmCandidate::vdpbf16ps);
      out.push_back(GemmCandidate::fp32);
      return out;
    }
    case GemmPlanDType::f16:
      if (caps.amx) return {GemmCandidate::amx, GemmCandidate::fp32};
      return {GemmCandidate::fp32};
  }
  return {};
}

GemmCandidate flag_rule_candidate(GemmPlanDType dtype, GemmShapeClass shape, const CpuGemmCaps& caps) {
  switch (dtype) {
    case GemmPlanDType::f32:
      if (!caps.avx512) return GemmCandidate::tile14x32;  // unused there (Eigen); f32_blocking_for is AVX-512 code
      return f32_blocking_for(caps.caches, representative_shape(shape, 1).k).tile == GemmTile::mr6_nr64
                 ? GemmCandidate::tile6x64
                 : GemmCandidate::tile14x32;
    case GemmPlanDType::bf16:
      if (caps.amx) return GemmCandidate::amx;
      return caps.avx512_bf16 ? GemmCandidate::vdpbf16ps : GemmCandidate::fp32;
    case GemmPlanDType::f16:
      return caps.amx ? GemmCandidate::amx : GemmCandidate::fp32;
  }
  return GemmCandidate::fp32;
}

GemmShape representative_shape(GemmShapeClass shape, int threads) {
  const int64_t t = std::clamp(threads, 1, 64);
  switch (shape) {
    case GemmShapeClass::square:
      return {128 * t, 384, 512};
    case GemmShapeClass::skinny:
      return {32, 512 * t, 512};
    case GemmShapeClass::k_small:
      return {384 * t, 384, 128};
  }
  return {128 * t, 384, 512};
}

GemmCandidate choose_gemm_candidate(const std::vector<GemmTiming>& timings, GemmCandidate incumbent) {
  std::vector<std::pair<GemmCandidate, double>> pairs;
  for (const GemmTiming& t : timings) pairs.emplace_back(t.candidate, t.seconds);
  return choose_fastest(pairs, incumbent);
}

std::string cpu_identity(const CpuGemmCaps& caps) {
  return cpu_brand() + " | " + cpu_signature() + " | avx512 " + std::to_string(int(caps.avx512)) + " avx512_bf16 " +
         std::to_string(int(caps.avx512_bf16)) + " amx " + std::to_string(int(caps.amx)) + " | l1d " +
         std::to_string(caps.caches.l1d) + " l2 " + std::to_string(caps.caches.l2);
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string format_gemm_cache(const std::string& identity, int threads,
                              const std::vector<GemmDecisionTimings>& decisions) {
  std::string body = std::string(kCacheHeader) + "\ncpu " + identity + "\nthreads " + std::to_string(threads) + "\n";
  for (const GemmDecisionTimings& d : decisions) {
    body += gemm_plan_dtype_name(d.dtype);
    body += ' ';
    body += gemm_shape_class_name(d.shape);
    for (const GemmTiming& t : d.timings) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.6e", t.seconds);
      body += ' ';
      body += gemm_candidate_name(t.candidate);
      body += '=';
      body += seconds;
    }
    body += '\n';
  }
  return body + "checksum " + hex64(fnv1a64(body)) + "\n";
}

std::vector<GemmDecisionTimings> parse_gemm_cache(std::string_view text, const std::string& identity, int threads,
                                                  const CpuGemmCaps& caps, std::string& error) {
  error.clear();
  const auto fail = [&](const std::string& why) {
    error = why;
    return std::vector<GemmDecisionTimings>{};
  };
  if (text.size() > kCacheMaxBytes)
    return fail(std::to_string(text.size()) + " bytes, expected at most " + std::to_string(kCacheMaxBytes));
  if (text.empty()) return fail("empty, or not a regular file");
  if (text.back() != '\n') return fail("truncated (no final newline)");
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.size() < 4) return fail("truncated (" + std::to_string(lines.size()) + " lines)");
  const auto quoted = [](std::string_view s) {  // built with += (GCC 12 warns falsely on a + chain here)
    std::string out = "\"";
    out += s.substr(0, 80);
    out += s.size() > 80 ? "...\"" : "\"";
    return out;
  };
  if (lines[0] != kCacheHeader) return fail("line 1 is " + quoted(lines[0]) + ", expected \"" + kCacheHeader + "\"");
  const std::string_view checksum_line = lines.back();
  const size_t body_bytes = text.size() - checksum_line.size() - 1;
  if (checksum_line != "checksum " + hex64(fnv1a64(text.substr(0, body_bytes))))
    return fail("its checksum does not match its contents (last line " + quoted(checksum_line) + ")");
  if (lines[1] != "cpu " + identity)
    return fail("written for another CPU (" + quoted(lines[1]) + ", this one is \"cpu " + identity + "\")");
  if (lines[2] != "threads " + std::to_string(threads))
    return fail("written for " + quoted(lines[2]) + ", this process runs " + std::to_string(threads));

  std::vector<GemmDecisionTimings> decisions;
  bool seen[kGemmPlanDTypes][kGemmShapeClasses] = {};
  for (size_t i = 3; i + 1 < lines.size(); ++i) {
    const std::string where = "line " + std::to_string(i + 1) + " " + quoted(lines[i]);
    const std::vector<std::string_view> fields = split_fields(lines[i]);
    GemmDecisionTimings d{};
    if (fields.size() < 3 || !parse_name<GemmPlanDType, kGemmPlanDTypes>(fields[0], gemm_plan_dtype_name, d.dtype) ||
        !parse_name<GemmShapeClass, kGemmShapeClasses>(fields[1], gemm_shape_class_name, d.shape))
      return fail(where + ": expected \"<f32|bf16|f16> <square|skinny|k_small> <path>=<seconds> ...\"");
    bool& twice = seen[int(d.dtype)][int(d.shape)];
    if (twice) return fail(where + ": a second line for this decision");
    twice = true;
    const std::vector<GemmCandidate> expected = gemm_candidates(d.dtype, caps);
    if (fields.size() - 2 != expected.size())
      return fail(where + ": " + std::to_string(fields.size() - 2) + " paths, this CPU has " +
                  std::to_string(expected.size()));
    for (size_t c = 0; c < expected.size(); ++c) {
      const std::string_view field = fields[c + 2];
      const size_t equals = field.find('=');
      double seconds = 0.0;
      if (equals == std::string_view::npos || field.substr(0, equals) != gemm_candidate_name(expected[c]) ||
          !parse_seconds(field.substr(equals + 1), seconds))
        return fail(where + ": expected " + gemm_candidate_name(expected[c]) + "=<seconds> (a finite time > 0)");
      d.timings.push_back({expected[c], seconds});
    }
    decisions.push_back(std::move(d));
  }
  for (int dtype = 0; dtype < kGemmPlanDTypes; ++dtype) {
    const int classes = int(std::count(seen[dtype], seen[dtype] + kGemmShapeClasses, true));
    if (classes != 0 && classes != kGemmShapeClasses)
      return fail(std::string("only ") + std::to_string(classes) + " of the 3 shape classes of " +
                  gemm_plan_dtype_name(GemmPlanDType(dtype)));
  }
  return decisions;
}

}  // namespace hg::kernels::cpu::detail
