#pragma once
// GPT-2's pre-tokenisation, by hand over UTF-8 bytes (no regex library): the pieces that the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// finds, scanning left to right and taking at each position the first alternative that matches
// (greedy), as Hugging Face `tokenizers` (Oniguruma) does. \p{L}, \p{N} and \s are the Unicode classes
// of text/unicode_tables.h; the contractions are lower-case ASCII only; the optional prefix is U+0020.
// `\s+(?!\S)` backtracks: a whitespace run followed by a non-space character leaves its last
// character to the next piece (so " a" keeps its space), a run at the end of the text is one piece.
//
// Invalid UTF-8: each byte that does not start a well-formed sequence (text/utf8.h) is one character
// of class "other" -- the class of U+FFFD, which is what Hugging Face sees after a lossy conversion --
// so it joins the run of punctuation/symbols around it (and a preceding space). The pieces always
// cover the input exactly, in order, so the byte-level BPE round-trips any byte string.
#include <cstddef>
#include <string_view>
#include <vector>

namespace hg::text {

// Yields the pieces of a text one by one: while (splitter.next(piece)) {...}.
class PieceSplitter {
 public:
  explicit PieceSplitter(std::string_view text) : text_(text) {}
  // The next piece (a view into the text); false at the end.
  bool next(std::string_view& piece);

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

// All pieces of `text`, in order (views into it).
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace hg::text
