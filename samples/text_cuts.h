#pragma once
// Where a text may be cut so that a byte-level BPE tokenizer (text/tokenizer.h) encodes the parts to
// ids that concatenate to the ids of the whole: prepare_data encodes a large file chunk by chunk.
//
// The tokenizer cuts out special tokens first (leftmost, longest), splits the rest by GPT-2's
// pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ and merges within
// each piece, so a cut is safe when the pieces (and special tokens) on both sides are the whole's.
// Two kinds of cut are (tests/test_text_cuts.cpp checks chunked == whole on real and adversarial
// text):
//   1. before an ASCII whitespace byte W (space, \t, \n, \v, \f, \r) that a printable ASCII byte Y
//      (0x21-0x7E) follows and an ASCII byte precedes, when no special token contains ASCII
//      whitespace and none starts at Y (then the whitespace would end its segment, and the whole's
//      \s+(?!\S) would take all of the run): "word| word", "line.|\nNext", "a  | b". W is the last byte of its whitespace run R
//      (Y is not whitespace). Before R stands a non-whitespace character or the start of the text,
//      and no alternative of the pattern takes whitespace after its non-space characters, so a piece
//      ends there on both sides. In the whole, \s+(?!\S) takes R less its last byte (the lookahead fails
//      before Y) and W starts the next piece (alone, or " Y..." through ` ?\p{L}+` and its kin); at the
//      end of the left part, \s+(?!\S) takes R less W too (the lookahead succeeds at the end); the right
//      part starts with W Y as the whole does there. The pattern looks ahead only in \s+(?!\S), so
//      nothing else sees across the cut. (Cutting AFTER W instead is not safe: "a \n|b" would end the
//      left part in the piece " \n", where the whole has " " and "\n".)
//   2. right after an occurrence of the tokenizer's one special token S (e.g. "<|endoftext|>"), when S
//      is the only special token and no proper prefix of S is also its suffix: occurrences of S then
//      never overlap, so every occurrence is one of the tokenizer's matches, and the text on each
//      side of a special token is split and merged on its own.
// Anything else (special tokens that contain whitespace, several special tokens) only turns off the
// kind of cut it could break; a text without a safe cut is encoded whole. Both kinds need the cut's
// neighbours to be ASCII, so a cut never splits a UTF-8 sequence (valid or not).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace hg::samples {

class TextCuts {
 public:
  // The tokenizer's special tokens' contents.
  explicit TextCuts(const std::vector<std::string>& special_tokens);
  // The last position p, 0 < p <= text.size(), at which `text` may be cut whatever bytes follow it
  // (its start must itself be a safe cut: the start of the input or a cut returned before); 0 for none.
  size_t last_cut(std::string_view text) const;
  // The same, for a text whose first `settled` bytes were a text with no cut (last_cut gave 0): only the
  // positions the new bytes can change are looked at (those within the longest special token's length
  // of `settled`), so a stream without cuts is scanned once, not once per block.
  size_t last_cut(std::string_view text, size_t settled) const;
  // Whether cutting `text` at p (between text[p - 1] and text[p]) is safe by the rules above (kind 1
  // needs text[p + 1], so p + 1 < text.size()).
  bool is_cut(std::string_view text, size_t p) const;

 private:
  bool whitespace_cut(std::string_view text, size_t p) const;

  std::vector<std::string> specials_;
  bool whitespace_cuts_ = true;  // kind 1: no special token contains ASCII whitespace
  std::string special_;       // kind 2: the only special token, if it has no border (else empty)
};

// Reads `in` in blocks of `block_bytes` and hands `chunk` consecutive pieces of it, each ending at a
// safe cut of `cuts` (the bytes after a block's last cut wait for the next block; the rest of the input
// ends the last piece), so encoding the pieces one by one gives the ids of the whole input. Null
// `cuts`: every position is a cut (byte-level tokens). Returns the bytes read; throws hg::Error naming
// `name` when reading fails.
uint64_t for_each_chunk(std::istream& in, const std::string& name, size_t block_bytes, const TextCuts* cuts,
                        const std::function<void(std::string_view)>& chunk);

}  // namespace hg::samples
