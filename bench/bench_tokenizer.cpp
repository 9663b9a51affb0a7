// bench_tokenizer: the byte-level BPE tokenizer (text/) on one thread, one JSON object per line.
//   tokenizer_vocab   the vocabulary: merges of frequent pairs learned in rounds on a synthetic
//                     corpus (tests/support/synthetic_text.h; GPT-2's own 50k vocabulary is not
//                     available offline), with the seconds it took to build.
//   tokenizer_encode  encode() MB/s and tokens/s over a few MB of varied synthetic text (English-like
//                     words, numbers, punctuation, whitespace runs, other scripts and emoji), held
//                     out from the corpus the vocabulary was learned on (another seed); also a
//                     Unicode-heavy text and random bytes (the worst case: nothing merges, no piece
//                     repeats). Best of three runs; each run is one encode() call (its piece cache
//                     starts empty).
//                     mb_per_s is wall time, mb_per_cpu_s the thread's CPU time (the same on an idle
//                     machine; on a shared one the CPU figure is the tokenizer's own speed).
//   tokenizer_decode  decode() MB/s of the same ids.
// With --text FILE and one or more --tokenizer FILE (tokenizer.json, vocab.json, a directory): real
// text instead, encoded by each tokenizer as prepare_data encodes it -- in calls of 16 MiB (each call's
// piece cache starts empty), one thread; "text" is the file's name, "tokenizer" the tokenizer's.
// Nothing synthetic is run then. docs/text.md "Speed" gives the figures and how they were made.
// Usage: bench_tokenizer [--quick] [--merges N] [--mb M] | --text FILE --tokenizer FILE [--tokenizer FILE ...]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench_args.h"
#include "json_line.h"
#include "timing.h"
#include "support/synthetic_text.h"
#include "text/tokenizer.h"

using hg::bench::Clock;
using hg::bench::seconds_since;

namespace {

// This thread's CPU time: the figure that stays meaningful when the machine is shared.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

constexpr size_t kCallBytes = size_t(16) << 20;  // prepare_data's block

// encode() in calls of at most `call_bytes` (cut anywhere: the speed, not the ids, is measured).
std::vector<uint32_t> encode_in_calls(const hg::text::Tokenizer& tok, const std::string& text, size_t call_bytes) {
  std::vector<uint32_t> ids;
  for (size_t at = 0; at < text.size(); at += call_bytes) {
    const std::vector<uint32_t> part = tok.encode(std::string_view(text).substr(at, call_bytes));
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

void bench_encode(const hg::text::Tokenizer& tok, const std::string& kind, const std::string& text,
                  const std::string& tokenizer_name = "synthetic", size_t call_bytes = SIZE_MAX) {
  double best = 1e30, best_cpu = 1e30;
  std::vector<uint32_t> ids;
  for (int run = 0; run < 3; ++run) {
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_seconds();
    ids = encode_in_calls(tok, text, call_bytes);
    best = std::min(best, seconds_since(start));
    best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
  }
  const double mb = double(text.size()) / 1e6;
  hg::bench::JsonLine("tokenizer_encode")
      .add("text", kind)
      .add("tokenizer", tokenizer_name)
      .add("mb", mb)
      .add("call_mib", call_bytes == SIZE_MAX ? -1.0 : double(call_bytes) / double(1 << 20))
      .add("vocab", long(tok.vocab_size()))
      .add("seconds", best)
      .add("mb_per_s", mb / best)
      .add("cpu_seconds", best_cpu)
      .add("mb_per_cpu_s", mb / best_cpu)
      .add("tokens_per_s", double(ids.size()) / best)
      .add("bytes_per_token", double(text.size()) / double(ids.size()))
      .add("threads", 1)
      .print();
  best = 1e30;
  bool same = true;
  for (int run = 0; run < 3; ++run) {
    const auto start = Clock::now();
    const std::string back = tok.decode(ids);
    best = std::min(best, seconds_since(start));
    same = same && back == text;
  }
  hg::bench::JsonLine("tokenizer_decode").add("text", kind).add("tokenizer", tokenizer_name).add("mb", mb).add("mb_per_s", mb / best).add("round_trip", same).print();
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_tokenizer [--quick] [--merges N] [--mb M] | --text FILE --tokenizer FILE [--tokenizer FILE ...]\n"
    "The byte-level BPE tokenizer on one thread. Prints JSON lines to stdout: tokenizer_vocab (the\n"
    "vocabulary learned on synthetic text), tokenizer_encode and tokenizer_decode (MB/s, tokens/s).\n"
    "  --quick           a smaller vocabulary and text (smoke runs)\n"
    "  --merges N        merges to learn (default 32000)\n"
    "  --mb M            MB of synthetic text to encode (default 4)\n"
    "  --text FILE       real text instead of synthetic (needs --tokenizer; nothing synthetic runs)\n"
    "  --tokenizer FILE  a tokenizer.json, vocab.json or directory to encode --text with (repeatable)\n"
    "  -h, --help        this text\n";

int main(int argc, char** argv) {
  bool quick = false;
  size_t merges = 32000;
  double text_mb = 4;
  std::string text_file;
  std::vector<std::string> tokenizer_files;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (!std::strcmp(argv[i], "--text") && i + 1 < argc) {
      text_file = argv[++i];
    } else if (!std::strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
      tokenizer_files.push_back(argv[++i]);
    } else if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--merges") && i + 1 < argc) {
      merges = std::strtoul(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) {
      text_mb = std::strtod(argv[++i], nullptr);
    } else {
      hg::bench::exit_unknown_argument("bench_tokenizer", argv[i], kUsage);
    }
  }
  if (!text_file.empty() || !tokenizer_files.empty()) {
    if (text_file.empty() || tokenizer_files.empty()) {
      std::fprintf(stderr, "bench_tokenizer: --text and --tokenizer go together\n");
      return 2;
    }
    try {
      std::ifstream in(text_file, std::ios::binary);
      if (!in) throw std::runtime_error("cannot read --text " + text_file);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (const std::string& file : tokenizer_files) {
        const hg::text::Tokenizer tok = hg::text::Tokenizer::load(file);
        bench_encode(tok, std::filesystem::path(text_file).filename().string(), text,
                     std::filesystem::path(file).filename().string(), kCallBytes);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
      return 1;
    }
    return 0;
  }
  if (quick) {
    merges = std::min<size_t>(merges, 2000);
    text_mb = std::min(text_mb, 0.5);
  }
  const auto start = Clock::now();
  const std::string corpus = hg::test::synthetic_text(size_t(text_mb * 2e6), 1);
  const hg::text::Tokenizer tok = hg::test::synthetic_tokenizer(corpus, merges, std::max<size_t>(1, merges / 25));
  hg::bench::JsonLine("tokenizer_vocab")
      .add("corpus_mb", double(corpus.size()) / 1e6)
      .add("merges", long(tok.merges()))
      .add("vocab", long(tok.vocab_size()))
      .add("build_seconds", seconds_since(start))
      .print();

  const size_t bytes = size_t(text_mb * 1e6);
  bench_encode(tok, "synthetic_mixed", hg::test::synthetic_text(bytes, 2));
  std::string unicode;
  static const char* words[] = {"λόγος", "αλήθεια", "слово", "правда", "日本語", "テキスト", "東京", "café", "naïve",
                                "😀", "👋🏽", "مرحبا", "שלום", "हिन्दी", "한국어", "١٢٣", "e\u0301"};
  std::mt19937_64 rng(3);
  while (unicode.size() < bytes / 4) {
    unicode += words[rng() % std::size(words)];
    unicode += rng() % 5 ? " " : "\n";
  }
  bench_encode(tok, "unicode_heavy", unicode);
  std::string random(bytes / 4, '\0');
  for (char& c : random) c = char(rng());
  bench_encode(tok, "random_bytes", random);
  return 0;
}
