// bench_generate: decoding speed with and without the KV cache, one JSON object per line.
//
// For each sequence length T (256 and 1024 by default) and each path, the model decodes `tokens` new
// tokens (greedy) after a random prompt of T - tokens ids, so the last token decoded sits at position
// T - 1 and every one sees about T positions:
//   cached    a prefill of the prompt (timed apart: prefill_ms), then one GPT::forward(token, cache) per
//             token: the projections and MLP of one token plus attention over the cached keys, O(T);
//   uncached  one GPT::forward over the whole window per token (what generate(use_cache false) runs):
//             O(T^2) per token (the projections of all T tokens and T x T attention).
// Each decode step includes what generation does per token: the copy of the last logits row to the
// host and the argmax. Reported: tokens/s and ms/token (median of `reps` runs), the speed-up of the cache,
// and the cache's bytes. The model is stated in every line: by default a GPT of L4 H4 C256 (3.49 M
// parameters with the byte-level vocabulary of 256), context 1024, fp32, the weights N(0, 0.02).
// Usage: bench_generate [--device cpu|cuda] [--dtype f32|bf16] [--layers L] [--heads H] [--dim C]
//                       [--vocab V] [--tokens N] [--reps R] [--lengths 256,1024] [--threads N]
//                       [--cached-only | --uncached-only]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_args.h"
#include "engine/autograd.h"
#include "engine/cuda/cuda_context.h"
#include "engine/random.h"
#include "json_line.h"
#include "timing.h"
#include "layers/generate.h"
#include "layers/kv_cache.h"
#include "layers/nn.h"

using namespace hg;
using hg::bench::Clock;
using hg::bench::median;
using hg::bench::seconds_since;

namespace {

struct Settings {
  Device device = kCPU;
  DType dtype = f32;
  int64_t layers = 4, heads = 4, dim = 256, vocab = 256, tokens = 16, reps = 3;
  std::vector<int64_t> lengths{256, 1024};
  bool run_cached = true, run_uncached = true;
};

void sync(const Device& device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

int64_t argmax_of_last_row(const Tensor& logits) { return nn::greedy_token(logits.select(1, -1).to_vector<float>()); }

Tensor row(const std::vector<int64_t>& ids, const Device& device) {
  return from_vector(ids, {1, int64_t(ids.size())}, i64, device);
}

// Seconds to decode s.tokens tokens after `prompt` (and the prefill's seconds, for the cache).
std::pair<double, double> decode(nn::GPT& model, std::vector<int64_t> sequence, int64_t tokens, bool cached) {
  const Device device = model.wte->weight.device();
  double prefill = 0;
  std::optional<nn::KVCache> cache;
  int64_t next = 0;
  if (cached) {
    cache.emplace(model, 1);
    const auto start = Clock::now();
    next = argmax_of_last_row(model.forward(row(sequence, device), *cache));
    prefill = seconds_since(start);
  } else {
    next = argmax_of_last_row(model.forward(row(sequence, device)));
  }
  sequence.push_back(next);
  const auto start = Clock::now();
  for (int64_t i = 1; i < tokens; ++i) {
    const Tensor logits =
        cached ? model.forward(row({sequence.back()}, device), *cache) : model.forward(row(sequence, device));
    sequence.push_back(argmax_of_last_row(logits));
  }
  sync(device);
  return {seconds_since(start), prefill};
}

DType parse_dtype(const std::string& name) {
  for (DType t : {f32, bf16, f16}) {
    if (name == dtype_name(t)) return t;
  }
  throw std::invalid_argument("expected f32, bf16 or f16, got \"" + name + "\"");
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_generate [--device cpu|cuda] [--dtype f32|bf16|f16] [--layers L] [--heads H] [--dim C]\n"
    "                      [--vocab V] [--tokens N] [--reps R] [--lengths 256,1024] [--threads N]\n"
    "                      [--cached-only | --uncached-only]\n"
    "Decoding tokens/s with and without the KV cache at each sequence length T. Prints JSON lines to\n"
    "stdout: tokens/s, ms/token, the cache's speed-up and bytes.\n"
    "  --device cpu|cuda       where the model runs (default cpu)\n"
    "  --dtype f32|bf16|f16    the model's dtype (default f32)\n"
    "  --layers L              transformer blocks (default 4)\n"
    "  --heads H               attention heads (default 4)\n"
    "  --dim C                 embedding width (default 256)\n"
    "  --vocab V               vocabulary size (default 256)\n"
    "  --tokens N              tokens decoded per run (default 16)\n"
    "  --reps R                runs per figure, the median reported (default 3)\n"
    "  --lengths T1,T2,...     sequence lengths (default 256,1024)\n"
    "  --threads N             OpenMP threads\n"
    "  --cached-only           only the KV-cache path\n"
    "  --uncached-only         only the full-window path\n"
    "  -h, --help              this text\n";

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    try {
      if (arg == "--device" && has_value)
        s.device = Device::parse(argv[++i]);
      else if (arg == "--dtype" && has_value)
        s.dtype = parse_dtype(argv[++i]);  // f32, bf16 or f16
      else if (arg == "--layers" && has_value)
        s.layers = std::stoll(argv[++i]);
      else if (arg == "--heads" && has_value)
        s.heads = std::stoll(argv[++i]);
      else if (arg == "--dim" && has_value)
        s.dim = std::stoll(argv[++i]);
      else if (arg == "--vocab" && has_value)
        s.vocab = std::stoll(argv[++i]);
      else if (arg == "--tokens" && has_value)
        s.tokens = std::stoll(argv[++i]);
      else if (arg == "--reps" && has_value)
        s.reps = std::stoll(argv[++i]);
      else if (arg == "--cached-only")
        s.run_uncached = false;
      else if (arg == "--uncached-only")
        s.run_cached = false;
      else if (arg == "--threads" && has_value)
        omp_set_num_threads(int(std::stoll(argv[++i])));
      else if (arg == "--lengths" && has_value)
        s.lengths = parse_list(argv[++i]);
      else {
        hg::bench::exit_unknown_argument("bench_generate", argv[i], kUsage);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_generate: bad value for %s: %s\n", arg.c_str(), e.what());
      return 2;
    }
  }
  try {
    const int64_t context = *std::max_element(s.lengths.begin(), s.lengths.end());
    manual_seed(1);
    nn::GPT model(nn::GPTConfig().vocab_size(s.vocab).context(context).n_layer(s.layers).n_head(s.heads).n_embd(s.dim));
    model.eval();
    model.to(s.dtype);
    model.to(s.device);
    NoGradGuard no_grad;
    std::ostringstream name;
    name << 'L' << s.layers << " H" << s.heads << " C" << s.dim << " V" << s.vocab;
    const std::string model_name = name.str();
    std::mt19937 rng(7);
    for (int64_t T : s.lengths) {
      HG_CHECK(T > s.tokens, "bench_generate: length ", T, " must exceed --tokens ", s.tokens);
      std::vector<int64_t> prompt(static_cast<size_t>(T - s.tokens));
      for (auto& id : prompt) id = int64_t(rng() % uint64_t(s.vocab));
      double per_token[2] = {0, 0};
      for (bool cached : {false, true}) {
        if (!(cached ? s.run_cached : s.run_uncached)) continue;
        std::vector<double> decode_s, prefill_s;
        (void)decode(model, prompt, std::min<int64_t>(s.tokens, 2), cached);  // warm-up: allocator, plans
        for (int64_t r = 0; r < s.reps; ++r) {
          const auto [d, p] = decode(model, prompt, s.tokens, cached);
          decode_s.push_back(d);
          prefill_s.push_back(p);
        }
        // tokens - 1 steps are timed (the first token comes from the prompt's forward).
        const double seconds = median(decode_s) / double(s.tokens - 1);
        per_token[cached] = seconds;
        bench::JsonLine line("generate");
        line.add("device", s.device.str())
            .add("dtype", dtype_name(s.dtype))
            .add("model", model_name)
            .add("parameters", (long long)model.parameter_count())
            .add("threads", omp_get_max_threads())
            .add("T", (long long)T)
            .add("kv_cache", cached)
            .add("tokens_timed", (long long)(s.tokens - 1))
            .add("ms_per_token", seconds * 1e3)
            .add("tokens_per_s", 1.0 / seconds);
        if (cached) {
          if (s.run_uncached) line.add("speedup_vs_uncached", per_token[0] / per_token[1]);
          line.add("prefill_ms", median(prefill_s) * 1e3)
              .add("cache_bytes", (long long)(2 * s.layers * context * s.dim * int64_t(dtype_size(s.dtype))));
        }
        line.print();
      }
    }
  } catch (const Error& e) {
    bench::JsonLine("generate").add("device", s.device.str()).add("error", e.what()).print();
    return 1;
  }
  return 0;
}
