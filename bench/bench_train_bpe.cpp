// bench_train_bpe: train_bpe's speed (text/bpe_trainer.cpp), one JSON object per line.
//   train_bpe  for each corpus and vocabulary size: seconds for the whole training (cutting special
//              tokens, pre-tokenising and counting the words, then every merge), MB/s of corpus,
//              merges/s, the number of distinct words; best of --repeat runs. Corpora: the committed
//              tests/data/text/corpus.txt (300 KB of varied text) and synthetic text of --mb MB
//              (tests/support/synthetic_text.h, seeded: English-like words, numbers, whitespace runs,
//              other scripts, emoji).
// Single-threaded (train_bpe is). Usage: bench_train_bpe [--quick] [--mb N] [--repeat N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <unordered_set>
#include <vector>

#include "bench_args.h"
#include "json_line.h"
#include "support/synthetic_text.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"

using namespace hg;

namespace {

size_t distinct_words(const std::string& corpus) {
  std::unordered_set<std::string_view> words;
  text::PieceSplitter splitter(corpus);
  std::string_view piece;
  while (splitter.next(piece)) words.insert(piece);
  return words.size();
}

void run(const std::string& name, const std::string& corpus, uint32_t vocab_size, int repeat) {
  text::BpeTrainerOptions options;
  options.vocab_size = vocab_size;
  options.min_frequency = 2;
  double best = 1e30;
  size_t merges = 0, vocab = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const text::Tokenizer tok = text::train_bpe(corpus, options);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    merges = tok.merges();
    vocab = tok.vocab_size();
  }
  bench::JsonLine("train_bpe")
      .add("corpus", name)
      .add("corpus_bytes", (long long)corpus.size())
      .add("distinct_words", (long long)distinct_words(corpus))
      .add("vocab_size", (long long)vocab)
      .add("merges", (long long)merges)
      .add("seconds", best)
      .add("mb_per_s", corpus.size() / best / 1e6)
      .add("merges_per_s", merges / best)
      .add("threads", 1)
      .print();
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_train_bpe [--quick] [--mb N] [--repeat N]\n"
    "train_bpe's speed on one thread, on tests/data/text/corpus.txt and on synthetic text, at\n"
    "vocabularies 2000 and 8000. Prints JSON lines to stdout (\"train_bpe\"): seconds, MB/s, merges/s.\n"
    "  --quick      0.5 MB of synthetic text, one run (smoke runs)\n"
    "  --mb N       MB of synthetic text (default 4)\n"
    "  --repeat N   best of N runs (default 3)\n"
    "  -h, --help   this text\n";

int main(int argc, char** argv) {
  bool quick = false;
  double mb = 4;
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (!std::strcmp(argv[i], "--quick")) {
      quick = true;
    } else if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) {
      mb = std::atof(argv[++i]);
    } else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else {
      hg::bench::exit_unknown_argument("bench_train_bpe", argv[i], kUsage);
    }
  }
  if (quick) {
    mb = 0.5;
    repeat = 1;
  }
  std::ifstream file(HG_TEXT_CORPUS, std::ios::binary);
  if (file.good()) {
    const std::string corpus((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    run("tests/data/text/corpus.txt", corpus, 2000, repeat);
  }
  const std::string synthetic = test::synthetic_text(size_t(mb * 1e6), 19);
  char name[64];
  std::snprintf(name, sizeof name, "synthetic %.1f MB", mb);
  for (uint32_t vocab : {2000u, 8000u}) run(name, synthetic, vocab, repeat);
  return 0;
}
