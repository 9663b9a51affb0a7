// tokenize: the BPE tokenizer (text/tokenizer.h) from the command line, in three modes.
//   tokenize --tokenizer FILE < text        the ids of stdin's bytes, space-separated on one line
//   tokenize --tokenizer FILE --decode < ids  the bytes of whitespace-separated ids, to stdout
//   tokenize --train CORPUS --vocab-size N -o OUT [--min-frequency M] [--special TOKEN]...
//                                            trains (train_bpe) and writes OUT: tokenizer.json, or
//                                            vocab.json + merges.txt when OUT is a directory
// Strategy: whole stdin read at once (encode is not streaming); ids printed with std::to_chars into
// one buffer. Bad input -- a file that does not load, an id that is not a number or not in the
// vocabulary -- is one line "tokenize: error: ..." naming the culprit, exit code 2.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "app/cli.h"
#include "text/tokenizer.h"

using namespace hg;

namespace {

constexpr const char* kProgram = "tokenize";

std::string read_stdin() {
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) text.append(buffer, n);
  if (std::ferror(stdin)) throw Error("tokenize: cannot read stdin");
  return text;
}

void write_stdout(const std::string& bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0)
    throw Error("tokenize: cannot write stdout");
}

// Whitespace-separated decimal ids; the first that is not one, or is not below vocab_size, is a
// usage error naming it, its position (1-based) and its byte offset in the input.
std::vector<uint32_t> parse_ids(const std::string& text, uint32_t vocab_size) {
  std::vector<uint32_t> ids;
  size_t pos = 0;
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (true) {
    while (pos < text.size() && space(text[pos])) ++pos;
    if (pos == text.size()) return ids;
    size_t end = pos;
    while (end < text.size() && !space(text[end])) ++end;
    const std::string item = text.substr(pos, end - pos);
    const std::string where = "item " + std::to_string(ids.size() + 1) + " (byte " + std::to_string(pos) + ")";
    uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && ptr == item.data() + item.size() && value >= vocab_size))
      app::exit_with_usage_error(kProgram, "--decode: id " + item + " at " + where + " is not in the vocabulary (" +
                                                   std::to_string(vocab_size) + " tokens: ids 0.." +
                                                   std::to_string(vocab_size - 1) + ")");
    if (ec != std::errc() || ptr != item.data() + item.size())
      app::exit_with_usage_error(kProgram, "--decode: \"" + item.substr(0, 40) + "\" at " + where +
                                                   " is not a token id; expected whitespace-separated decimal ids");
    ids.push_back(uint32_t(value));
    pos = end;
  }
}

std::string join_ids(const std::vector<uint32_t>& ids) {
  std::string out;
  out.reserve(ids.size() * 6 + 1);
  char digits[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ' ';
    const auto r = std::to_chars(digits, digits + sizeof digits, ids[i]);
    out.append(digits, r.ptr);
  }
  out += '\n';
  return out;
}

// "a,b" and repeated --special flags (gathered by main) -> the list; "" -> none.
std::vector<std::string> split_specials(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma == start) app::exit_with_usage_error(kProgram, "--special \"" + list + "\" has an empty token");
    out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

int train(const std::string& corpus_path, const std::string& output, int64_t vocab_size, int64_t min_frequency,
          const std::string& specials) {
  text::BpeTrainerOptions options;
  options.vocab_size = uint32_t(vocab_size);
  options.min_frequency = uint64_t(min_frequency);
  options.special_tokens = split_specials(specials);
  if (uint64_t(vocab_size) < 256 + options.special_tokens.size())
    app::exit_with_usage_error(kProgram, "--vocab-size " + std::to_string(vocab_size) + " is below 256 bytes + " +
                                                 std::to_string(options.special_tokens.size()) +
                                                 " special token(s); expected at least " +
                                                 std::to_string(256 + options.special_tokens.size()));
  std::ifstream file(corpus_path, std::ios::binary);
  if (!file.good()) app::exit_with_usage_error(kProgram, "cannot read --train \"" + corpus_path + "\"");
  const std::string corpus((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto start = std::chrono::steady_clock::now();
  const text::Tokenizer tok = app::or_usage_error(kProgram, [&] { return text::train_bpe(corpus, options); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string wrote;
  app::or_usage_error(kProgram, "-o " + output, [&] {
    if (std::filesystem::is_directory(output)) {
      const std::string vocab = (std::filesystem::path(output) / "vocab.json").string();
      const std::string merges = (std::filesystem::path(output) / "merges.txt").string();
      tok.save_vocab_merges(vocab, merges);
      wrote = vocab + " and " + merges;
    } else {
      tok.save_json(output);
      wrote = output;
    }
  });
  std::printf("tokenize: trained %u tokens (%zu merges, %zu special) on %zu bytes of %s in %.2f s; wrote %s\n",
              tok.vocab_size(), tok.merges(), tok.special_tokens().size(), corpus.size(), corpus_path.c_str(), seconds,
              wrote.c_str());
  return 0;
}

// Repeated --special flags become one comma-separated value and -o becomes --output (Flags knows
// only --name and keeps the last of a repeated flag).
std::vector<std::string> normalize_args(int argc, char** argv) {
  std::vector<std::string> args{argv[0]}, specials;
  bool special_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-o") arg = "--output";
    if (arg.rfind("-o=", 0) == 0) arg = "--output=" + arg.substr(3);
    if (arg == "--special" && i + 1 < argc) {
      special_given = true;
      specials.push_back(argv[++i]);
      continue;
    }
    if (arg.rfind("--special=", 0) == 0) {
      special_given = true;
      specials.push_back(arg.substr(10));
      continue;
    }
    args.push_back(arg);
  }
  if (special_given) {
    std::string joined;
    for (size_t i = 0; i < specials.size(); ++i) joined += (i ? "," : "") + specials[i];
    args.push_back("--special=" + joined);
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  return app::guarded_main(kProgram, [&] {
    app::Flags flags(kProgram,
                         "Byte-level BPE tokens from the command line (GPT-2's scheme; text/tokenizer.h).\n"
                         "  tokenize --tokenizer FILE < text.txt          prints the ids, space-separated, on one line\n"
                         "  tokenize --tokenizer FILE --decode < ids.txt  writes the bytes of the ids (whitespace-separated)\n"
                         "  tokenize --train CORPUS --vocab-size N -o OUT  trains a tokenizer on CORPUS and writes OUT:\n"
                         "      Hugging Face's tokenizer.json, or GPT-2's vocab.json + merges.txt when OUT is an\n"
                         "      existing directory. The merges equal Hugging Face tokenizers' BpeTrainer's.\n"
                         "FILE: tokenizer.json, vocab.json or merges.txt (with the other beside it), or a directory.");
    auto& tokenizer_path = flags.add_string("tokenizer", "", "the tokenizer to encode or decode with");
    auto& decode = flags.add_bool("decode", false, "read ids from stdin and write their bytes (with --tokenizer)");
    auto& corpus = flags.add_string("train", "", "train on this text file instead (with --vocab-size and -o)");
    auto& vocab_size = flags.add_int("vocab-size", 4096, "--train: tokens in the vocabulary, special ones included",
                                     1, int64_t(1) << 24);
    auto& min_frequency = flags.add_int("min-frequency", 2, "--train: a pair seen fewer times is not merged", 0);
    auto& specials = flags.add_string("special", "<|endoftext|>",
                                      "--train: special tokens, comma-separated or one per --special (ids 0, 1, ...; "
                                      "cut out of the corpus before counting); \"\" for none");
    auto& output = flags.add_string("output", "", "--train: where to write (-o): a file -> tokenizer.json, "
                                                   "a directory -> vocab.json + merges.txt in it");
    flags.after_parse([&] {
      const bool training = !corpus.empty();
      if (training && !tokenizer_path.empty())
        app::exit_with_usage_error(kProgram, "--train and --tokenizer exclude each other; expected one mode");
      if (training && decode) app::exit_with_usage_error(kProgram, "--decode needs --tokenizer, not --train");
      if (!training && tokenizer_path.empty())
        app::exit_with_usage_error(kProgram, "expected --tokenizer FILE (encode, --decode) or --train CORPUS");
      if (training && output.empty()) app::exit_with_usage_error(kProgram, "--train needs -o OUT (file or directory)");
      if (!training && (flags.given("output") || flags.given("vocab-size") || flags.given("min-frequency") ||
                        flags.given("special")))
        app::exit_with_usage_error(kProgram, "-o, --vocab-size, --min-frequency and --special go with --train");
      if (training) app::check_readable_file(kProgram, "train", corpus);
    });
    std::vector<std::string> args = normalize_args(argc, argv);
    std::vector<char*> arg_pointers;
    for (std::string& a : args) arg_pointers.push_back(a.data());
    flags.parse(int(arg_pointers.size()), arg_pointers.data());

    if (!corpus.empty()) return train(corpus, output, vocab_size, min_frequency, specials);
    const text::Tokenizer tok = app::or_usage_error(kProgram, "--tokenizer " + tokenizer_path,
                                                    [&] { return text::Tokenizer::load(tokenizer_path); });
    const std::string input = read_stdin();
    if (decode) {
      const std::vector<uint32_t> ids = parse_ids(input, tok.vocab_size());
      write_stdout(app::or_usage_error(kProgram, "--decode", [&] { return tok.decode(ids); }));
    } else {
      write_stdout(join_ids(tok.encode(input)));
    }
    return 0;
  });
}
