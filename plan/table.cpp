// plan::format_table (plan/plan.h): the ranked candidates as an aligned text table, the recommended
// one first (marked *), with the per-rank device bytes split into model state and activations, the host
// bytes, the predicted step time and throughput, and the flags that select each; then how many
// configurations were considered and how many fit.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "plan/search.h"

namespace hg::plan {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

std::string seconds(double s) {
  if (s >= 1) return format("%.2f s", s);
  if (s >= 1e-3) return format("%.1f ms", s * 1e3);
  return format("%.0f us", s * 1e6);
}

std::string rate(double tokens_per_second) {
  if (tokens_per_second >= 1e6) return format("%.2fM", tokens_per_second / 1e6);
  if (tokens_per_second >= 1e3) return format("%.1fk", tokens_per_second / 1e3);
  return format("%.0f", tokens_per_second);
}

// GiB to 0.01, or to two significant digits below that (a small model's bytes are not all "0.00").
std::string gib(int64_t bytes) {
  const double g = double(bytes) / kGiB;
  return bytes == 0 ? "0" : g >= 0.01 ? format("%.2f", g) : format("%.2g", g);
}

std::string parameters(double n) { return n >= 1e9 ? format("%.3gB", n / 1e9) : format("%.3gM", n / 1e6); }

}  // namespace

std::string format_table(const PlanRequest& request, const std::vector<Candidate>& ranked, int rows) {
  const int64_t sequences = sequences_per_rank(request);
  const int64_t tokens = sequences * request.world * request.model.context;
  const size_t considered = enumerate(request).size();
  std::string out;
  out += format("plan: GPT L%.0f", double(request.model.layers)) + format(" H%.0f", double(request.model.heads)) +
         format(" C%.0f", double(request.model.dim)) + format(" T%.0f", double(request.model.context)) +
         format(" V%.0f", double(request.model.vocab)) + " (" + parameters(double(request.model.parameters())) +
         " parameters)" + format(" | %.0f tokens per step", double(tokens)) +
         format(" (%.0f sequences", double(sequences)) + format(" x %.0f ranks)", double(request.world)) + " | " +
         request.machine.name + " | budget " + gib(request.device_budget_bytes) +
         (device_headroom_bytes(request) > 0 ? " GiB - headroom " + gib(device_headroom_bytes(request)) : "") +
         " GiB per rank" +
         (request.host_budget_bytes > 0 ? ", host " + gib(request.host_budget_bytes) + " GiB per node"
                                        : std::string(", host unlimited")) +
         "\n";
  const std::vector<std::string> header{"rank",   "device GiB", "params", "grads",    "optim",
                                        "act+ws", "host GiB",   "step",   "tokens/s", "flags"};
  std::vector<std::vector<std::string>> table{header};
  const size_t shown = std::min(ranked.size(), size_t(std::max(rows, 0)));
  for (size_t i = 0; i < shown; ++i) {
    const Candidate& c = ranked[i];
    const MemoryPrediction& m = c.memory;
    std::string flags;
    for (const std::string& f : c.flags()) flags += (flags.empty() ? "" : " ") + f;
    table.push_back({std::to_string(i + 1) + (i == 0 ? "*" : ""), gib(m.device_peak()), gib(m.parameters),
                     gib(m.gradients), gib(m.optimizer_state), gib(m.activations + m.workspace + m.rounding),
                     gib(m.host), seconds(c.time.total), rate(double(tokens) / c.time.total), flags});
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : table)
    for (size_t j = 0; j < row.size(); ++j) width[j] = std::max(width[j], row[j].size());
  for (const auto& row : table) {
    std::string line;
    for (size_t j = 0; j < row.size(); ++j) {
      const bool last = j + 1 == row.size();
      const std::string pad(width[j] - row[j].size(), ' ');
      line += last ? row[j] : (j == 0 ? row[j] + pad : pad + row[j]);  // numbers right-aligned, flags left
      if (!last) line += "  ";
    }
    out += line + "\n";
  }
  if (!ranked.empty()) out += "* recommended: " + table[1].back() + "\n";
  out += std::to_string(considered) + " configurations considered, " + std::to_string(ranked.size()) + " fit" +
         (shown < ranked.size() ? ", " + std::to_string(shown) + " shown" : std::string()) + "\n";
  return out;
}

}  // namespace hg::plan
