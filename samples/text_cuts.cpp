// Safe cuts for chunked BPE encoding (samples/text_cuts.h states the rules and why they hold).
#include "samples/text_cuts.h"

#include <algorithm>

namespace hg::samples {

namespace {

bool printable(char c) { return c >= 0x21 && c <= 0x7E; }

// Whether a proper prefix of s equals its suffix of the same length (then two occurrences may overlap).
bool has_border(const std::string& s) {
  for (size_t k = 1; k < s.size(); ++k)
    if (s.compare(0, k, s, s.size() - k, k) == 0) return true;
  return false;
}

}  // namespace

TextCuts::TextCuts(const std::vector<std::string>& special_tokens) {
  for (const std::string& s : special_tokens)
    if (s.find('\n') != std::string::npos) newline_cuts_ = false;
  if (special_tokens.size() == 1 && !special_tokens[0].empty() && !has_border(special_tokens[0]))
    special_ = special_tokens[0];
}

bool TextCuts::is_cut(std::string_view text, size_t p) const {
  if (p == 0 || p > text.size()) return false;
  if (newline_cuts_ && p >= 2 && p < text.size() && text[p - 1] == '\n' && printable(text[p - 2]) &&
      printable(text[p]))
    return true;
  return !special_.empty() && p >= special_.size() && text.substr(p - special_.size(), special_.size()) == special_;
}

size_t TextCuts::last_cut(std::string_view text) const {
  size_t best = 0;
  if (!special_.empty()) {
    const size_t at = text.rfind(special_);
    if (at != std::string_view::npos) best = at + special_.size();
  }
  if (newline_cuts_)
    for (size_t p = text.size() - std::min<size_t>(text.size(), 1); p >= 2 && p > best; --p)
      if (text[p - 1] == '\n' && printable(text[p - 2]) && printable(text[p])) return p;
  return best;
}

}  // namespace hg::samples
