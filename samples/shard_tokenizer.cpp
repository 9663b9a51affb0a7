#include "samples/shard_tokenizer.h"

#include <memory>

#include "text/tokenizer.h"

namespace hg::samples {

ShardTokenizer load_shard_tokenizer(const std::string& path) {
  auto tokenizer = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(path));
  std::vector<uint32_t> lengths(tokenizer->vocab_size(), 0);
  for (uint32_t id = 0; id < lengths.size(); ++id) {
    try {
      lengths[id] = uint32_t(tokenizer->token_bytes(id).size());
    } catch (const Error&) {  // an id a loaded vocabulary skips: it never occurs in prepare_data's shards
    }
  }
  std::vector<std::string> specials;
  for (const text::SpecialToken& s : tokenizer->special_tokens()) specials.push_back(s.content);
  return ShardTokenizer{path, TokenBytes(std::move(lengths)),
                        [tokenizer](std::span<const uint32_t> ids) { return tokenizer->decode(ids); },
                        [tokenizer](std::string_view text) { return tokenizer->encode(text); }, std::move(specials)};
}

}  // namespace hg::samples
