// prepare_data: turns text into token shards for train_gpt --data (data/token_shard.h).
//
// Byte-level by default: token = byte value (0..255), vocabulary 256, no merges, so any file
// round-trips exactly. With --tokenizer FILE the text is encoded by that byte-level BPE
// (text/tokenizer.h) and the shards' header carries the tokenizer's vocabulary. The file is read in
// blocks and encoded up to the last safe cut of each (samples/text_cuts.h: the ids of the parts
// concatenate to those of the whole), so memory holds a block and one shard, not the file's ids. The
// tokens are cut into shards of at most --shard-tokens, written atomically as PREFIX_000000.bin,
// PREFIX_000001.bin, ...; u16 when every id fits (a vocabulary of at most 65,536), u32 otherwise.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>

#include "app/cli.h"
#include "data/token_shard.h"
#include "samples/text_cuts.h"
#include "text/tokenizer.h"

using namespace hg;

namespace {

constexpr uint64_t kU16Vocab = 65536;  // ids 0..65535 fit a u16
constexpr size_t kBlockBytes = size_t(16) << 20;

// Collects tokens and writes each full shard of `shard_tokens` as it fills.
class ShardWriter {
 public:
  ShardWriter(std::string prefix, int64_t shard_tokens, data::TokenDType dtype, uint64_t vocab)
      : prefix_(std::move(prefix)), shard_tokens_(size_t(shard_tokens)), dtype_(dtype), vocab_(vocab) {}
  void add(const std::vector<uint32_t>& tokens) {
    for (uint32_t t : tokens) {
      pending_.push_back(t);
      if (pending_.size() == shard_tokens_) flush();
    }
    total_ += tokens.size();
  }
  void flush() {
    if (pending_.empty()) return;
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "_%06lld.bin", (long long)shards_);
    const std::string path = prefix_ + suffix;
    data::write_token_shard(path, pending_, dtype_, vocab_);
    std::printf("wrote %s: %zu %s tokens\n", path.c_str(), pending_.size(), data::token_dtype_name(dtype_));
    pending_.clear();
    ++shards_;
  }
  uint64_t total() const { return total_; }
  int64_t shards() const { return shards_; }

 private:
  std::string prefix_;
  size_t shard_tokens_;
  data::TokenDType dtype_;
  uint64_t vocab_;
  std::vector<uint32_t> pending_;
  uint64_t total_ = 0;
  int64_t shards_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  app::Flags flags("prepare_data",
                       "Turns a text file into token shards for train_gpt --data: byte-level (one token per byte,\n"
                       "vocabulary 256), or encoded by a BPE tokenizer with --tokenizer. Writes PREFIX_000000.bin, ...");
  auto& input = flags.add_string("input", "", "the text file to tokenize (required)");
  auto& output = flags.add_string("output", "", "path prefix of the shards (required)");
  auto& shard_tokens = flags.add_int("shard-tokens", 100'000'000, "tokens per shard at most", 1);
  auto& dtype_name = flags.add_string(
      "dtype", "auto", "token dtype on disk: u16, u32 or auto (u16 when the vocabulary fits, at most 65536 ids)");
  auto& tokenizer_path = flags.add_string("tokenizer", "",
                                          "BPE tokenizer file (tokenizer.json or vocab.json + merges.txt; "
                                          "text/tokenizer.h) instead of one token per byte");
  // The checks parse() cannot make, run by parse() before --print-config prints.
  flags.after_parse([&] {
    if (input.empty()) app::exit_with_usage_error("prepare_data", "--input FILE is required");
    if (output.empty()) app::exit_with_usage_error("prepare_data", "--output PREFIX is required");
    if (dtype_name != "u16" && dtype_name != "u32" && dtype_name != "auto")
      app::exit_with_usage_error("prepare_data",
                                     "unknown --dtype \"" + dtype_name +
                                                         "\"; expected u16 or u32, or auto (u16 when the ids fit)");
    app::check_readable_file("prepare_data", "input", input);
    const std::string output_dir =
        output.find('/') == std::string::npos ? "." : output.substr(0, output.rfind('/') + 1);
    if (::access(output_dir.c_str(), W_OK) != 0)
      app::exit_with_usage_error("prepare_data", "--output " + output + ": the directory \"" + output_dir +
                                                         "\" is not writable (" + std::strerror(errno) +
                                                         "); expected an existing, writable directory");
  });
  flags.parse(argc, argv);

  return app::guarded_main("prepare_data", [&] {
    std::optional<text::Tokenizer> tokenizer;
    if (!tokenizer_path.empty())
      tokenizer = app::or_usage_error("prepare_data", "--tokenizer " + tokenizer_path,
                                          [&] { return text::Tokenizer::load(tokenizer_path); });
    const uint64_t vocab = tokenizer ? tokenizer->vocab_size() : 256;
    if (dtype_name == "u16" && vocab > kU16Vocab)
      app::exit_with_usage_error("prepare_data", "--dtype u16 cannot hold the ids of --tokenizer " +
                                                         tokenizer_path + " (a vocabulary of " +
                                                         std::to_string(vocab) + " ids, u16 holds at most " +
                                                         std::to_string(kU16Vocab) + "); use --dtype u32 or auto");
    const data::TokenDType dtype = dtype_name == "u32" || (dtype_name == "auto" && vocab > kU16Vocab)
                                       ? data::TokenDType::u32
                                       : data::TokenDType::u16;

    std::ifstream file(input, std::ios::binary);
    if (!file.good())
      app::exit_with_usage_error("prepare_data", "cannot read --input \"" + input + "\": " + std::strerror(errno));
    std::vector<std::string> specials;
    if (tokenizer)
      for (const text::SpecialToken& s : tokenizer->special_tokens()) specials.push_back(s.content);
    const samples::TextCuts cuts(specials);
    ShardWriter shards(output, shard_tokens, dtype, vocab);
    auto encode = [&](std::string_view text) {
      if (tokenizer) {
        shards.add(tokenizer->encode(text));
      } else {
        shards.add(std::vector<uint32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                         reinterpret_cast<const unsigned char*>(text.data()) + text.size()));
      }
    };
    const uint64_t bytes = samples::for_each_chunk(file, input, kBlockBytes, tokenizer ? &cuts : nullptr, encode);
    if (bytes == 0) app::exit_with_usage_error("prepare_data", "--input \"" + input + "\" is empty");
    shards.flush();
    const std::string scheme = tokenizer ? "BPE tokenizer " + tokenizer_path : std::string("byte-level tokens");
    std::printf("prepare_data: %llu bytes of %s -> %llu tokens (%.3f bytes/token), %lld %s shard(s), %s "
                "(vocabulary %llu)\n",
                (unsigned long long)bytes, input.c_str(), (unsigned long long)shards.total(),
                double(bytes) / double(std::max<uint64_t>(shards.total(), 1)), (long long)shards.shards(),
                data::token_dtype_name(dtype), scheme.c_str(), (unsigned long long)vocab);
    return 0;
  });
}
