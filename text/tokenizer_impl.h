#pragma once
// Internal to text/: the tokenizer's tables (Tokenizer::Impl) and the one function that builds and
// checks them, shared by from_parts() (tokenizer.cpp) and the file loaders (tokenizer_files.cpp).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/merge_table.h"
#include "text/tokenizer.h"

namespace hg::text {

struct Tokenizer::Impl {
  std::vector<std::string> tokens;  // bytes by id ("" for an id no token has)
  std::vector<uint8_t> present;     // whether an id has a token
  std::unordered_map<std::string, uint32_t> id_of;               // bytes -> id, every token
  std::vector<std::pair<uint32_t, uint32_t>> merge_pairs;        // (left id, right id) by rank
  MergeTable merge_table;                                        // (left, right) -> rank, merged id
  std::array<uint32_t, 256> byte_id{};                           // the single-byte tokens
  std::vector<SpecialToken> specials;                            // as given
  std::vector<uint32_t> specials_longest_first;                  // indices into specials
  std::optional<uint32_t> end_of_text;
};

// Largest number of ids without a token that a vocabulary may have (a file claiming id 4e9 must not
// make us allocate 4e9 entries).
inline constexpr size_t kMaxIdHoles = 65536;

// Builds the tables from `tokens` (bytes by id; nullopt for a hole), `merges` (rank order, as byte
// pairs) and `specials`, checking every rule of Tokenizer::from_parts (and that all 256 single bytes
// have tokens). Throws hg::Error naming the first inconsistency.
std::unique_ptr<Tokenizer::Impl> build_tokenizer(std::vector<std::optional<std::string>> tokens,
                                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                                 std::vector<SpecialToken> specials);

// Bytes shown in an error message: printable ASCII as is, other bytes as \xNN, quoted, cut at 60.
std::string quote_bytes(std::string_view bytes);

}  // namespace hg::text
