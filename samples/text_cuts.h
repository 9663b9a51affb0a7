#pragma once
// Where a text may be cut so that a byte-level BPE tokenizer (text/tokenizer.h) encodes the parts to
// ids that concatenate to the ids of the whole: prepare_data encodes a large file chunk by chunk.
//
// The tokenizer cuts out special tokens first (leftmost, longest), splits the rest by GPT-2's
// pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ and merges within
// each piece, so a cut is safe when the pieces (and special tokens) on both sides are the whole's.
// Two kinds of cut are (tests/test_text_cuts.cpp checks chunked == whole on real and adversarial
// text):
//   1. between "X\n" and "Y", X and Y printable ASCII other than space (0x21-0x7E), when no special
//      token contains a newline. No piece crosses "\nY": only ` ?\p{L}+`-like alternatives take a
//      prefix and that prefix is a space, never a newline; and the newline is a piece of its own on
//      both sides: in the whole, \s+(?!\S) fails before Y and \s+ takes "\n"; at the end of the left
//      part, \s+(?!\S) takes "\n" (the lookahead succeeds at the end). X, not whitespace, stops
//      every piece before the newline identically (the pattern looks ahead only in \s+(?!\S)).
//      "X \nY" is NOT safe (the left part would end in the piece " \n", the whole has " " and "\n"),
//      nor is "\r\nY" (the same); neither needs handling beyond not cutting there.
//   2. right after an occurrence of the tokenizer's one special token S (e.g. "<|endoftext|>"), when S
//      is the only special token and no proper prefix of S is also its suffix: occurrences of S then
//      never overlap, so every occurrence is one of the tokenizer's matches, and the text on each
//      side of a special token is split and merged on its own.
// Anything else (other special tokens that contain a newline, several special tokens) only turns
// off the kind of cut it could break; a text without a safe cut is encoded whole.
#include <cstddef>
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
  // Whether cutting `text` at p is safe by the rules above (kind 1 needs text[p], so p < text.size()).
  bool is_cut(std::string_view text, size_t p) const;

 private:
  bool newline_cuts_ = true;  // kind 1: no special token contains '\n'
  std::string special_;       // kind 2: the only special token, if it has no border (else empty)
};

}  // namespace hg::samples
