// prepare_data: turns text into token shards for train_gpt --data (data/token_shard.h).
//
// Tokenization is byte-level: token = byte value (0..255), vocabulary 256, the same as train_gpt's
// model; no merges, so any file round-trips exactly. The input is cut into shards of at most
// --shard-tokens tokens, written atomically as PREFIX_000000.bin, PREFIX_000001.bin, ...
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "data/token_shard.h"
#include "samples/cli.h"

using namespace hg;

namespace {
int run(int argc, char** argv);
}

// Nothing escapes: a usage or input error exits 2, any other error 1, on one line (samples/cli.h).
int main(int argc, char** argv) {
  return samples::guarded_main("prepare_data", [&] { return run(argc, argv); });
}

namespace {
int run(int argc, char** argv) {
  samples::Flags flags("prepare_data",
                       "Turns a text file into token shards for train_gpt --data (byte-level: one token per byte,\n"
                       "vocabulary 256). Writes PREFIX_000000.bin, PREFIX_000001.bin, ...");
  auto& input = flags.add_string("input", "", "the text file to tokenize (required)");
  auto& output = flags.add_string("output", "", "path prefix of the shards (required)");
  auto& shard_tokens = flags.add_int("shard-tokens", 100'000'000, "tokens per shard at most", 1);
  auto& dtype_name = flags.add_string("dtype", "u16", "token dtype on disk: u16 or u32");
  auto& tokenizer = flags.add_string("tokenizer", "",
                                     "BPE tokenizer file (tokenizer.json or vocab.json + merges.txt; text/tokenizer.h) "
                                     "instead of one token per byte");
  (void)tokenizer;  // issue 19: wired by the text-data work
  // The checks parse() cannot make, run by parse() before --print-config prints.
  flags.after_parse([&] {
    if (input.empty()) samples::exit_with_usage_error("prepare_data", "--input FILE is required");
    if (output.empty()) samples::exit_with_usage_error("prepare_data", "--output PREFIX is required");
    if (dtype_name != "u16" && dtype_name != "u32")
      samples::exit_with_usage_error("prepare_data", "unknown --dtype \"" + dtype_name + "\"; expected u16 or u32");
    samples::check_readable_file("prepare_data", "input", input);
    const std::string output_dir =
        output.find('/') == std::string::npos ? "." : output.substr(0, output.rfind('/') + 1);
    if (::access(output_dir.c_str(), W_OK) != 0)
      samples::exit_with_usage_error("prepare_data", "--output " + output + ": the directory \"" + output_dir +
                                                         "\" is not writable (" + std::strerror(errno) +
                                                         "); expected an existing, writable directory");
  });
  flags.parse(argc, argv);
  const data::TokenDType dtype = dtype_name == "u16" ? data::TokenDType::u16 : data::TokenDType::u32;

  std::ifstream file(input, std::ios::binary);
  if (!file.good())
    samples::exit_with_usage_error("prepare_data", "cannot read --input \"" + input + "\": " + std::strerror(errno));
  std::vector<uint32_t> tokens;
  for (auto it = std::istreambuf_iterator<char>(file); it != std::istreambuf_iterator<char>(); ++it)
    tokens.push_back((unsigned char)*it);
  if (tokens.empty()) samples::exit_with_usage_error("prepare_data", "--input \"" + input + "\" is empty");

  try {
    int64_t shard = 0;
    for (size_t start = 0; start < tokens.size(); start += size_t(shard_tokens), ++shard) {
      const size_t end = std::min(tokens.size(), start + size_t(shard_tokens));
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, "_%06lld.bin", (long long)shard);
      const std::string path = output + suffix;
      data::write_token_shard(path, std::vector<uint32_t>(tokens.begin() + long(start), tokens.begin() + long(end)),
                              dtype, 256);
      std::printf("wrote %s: %zu %s tokens\n", path.c_str(), end - start, dtype_name.c_str());
    }
    std::printf("prepare_data: %zu bytes of %s -> %lld shard(s), byte-level tokens (vocabulary 256)\n", tokens.size(),
                input.c_str(), (long long)shard);
  } catch (const Error& e) {
    std::fprintf(stderr, "prepare_data: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
}  // namespace
