// Safe cuts for chunked BPE encoding (samples/text_cuts.h states the rules and why they hold).
#include "samples/text_cuts.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "kernels/error.h"

namespace hg::samples {

namespace {

bool printable(char c) { return c >= 0x21 && c <= 0x7E; }
bool ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }  // space, \t \n \v \f \r

// Whether a proper prefix of s equals its suffix of the same length (then two occurrences may overlap).
bool has_border(const std::string& s) {
  for (size_t k = 1; k < s.size(); ++k)
    if (s.compare(0, k, s, s.size() - k, k) == 0) return true;
  return false;
}

}  // namespace

// Kind 1 at p: text[p] is ASCII whitespace, text[p + 1] printable and not where a special token may
// start (a special token there would end the whitespace's segment: the whole's last piece of it would
// be the run R, not R less its last byte), text[p - 1] ASCII.
bool TextCuts::whitespace_cut(std::string_view text, size_t p) const {
  if (!(p >= 1 && p + 1 < text.size() && ascii_space(text[p]) && printable(text[p + 1]) &&
        static_cast<unsigned char>(text[p - 1]) < 0x80))
    return false;
  const std::string_view rest = text.substr(p + 1);
  for (const std::string& s : specials_)  // also a special token the text's end may cut short
    if (rest.substr(0, s.size()) == std::string_view(s).substr(0, rest.size())) return false;
  return true;
}

TextCuts::TextCuts(const std::vector<std::string>& special_tokens) : specials_(special_tokens) {
  for (const std::string& s : special_tokens)
    if (std::any_of(s.begin(), s.end(), ascii_space)) whitespace_cuts_ = false;
  if (special_tokens.size() == 1 && !special_tokens[0].empty() && !has_border(special_tokens[0]))
    special_ = special_tokens[0];
}

bool TextCuts::is_cut(std::string_view text, size_t p) const {
  if (p == 0 || p > text.size()) return false;
  if (whitespace_cuts_ && whitespace_cut(text, p)) return true;
  return !special_.empty() && p >= special_.size() && text.substr(p - special_.size(), special_.size()) == special_;
}

size_t TextCuts::last_cut(std::string_view text) const { return last_cut(text, 0); }

size_t TextCuts::last_cut(std::string_view text, size_t settled) const {
  // A cut at p reads text[p - special.size(), p + 1 + longest special): below `low` nothing it reads
  // has changed since the settled text, which had no cut.
  size_t longest = special_.size();
  for (const std::string& s : specials_) longest = std::max(longest, s.size());
  const size_t low = settled > longest + 2 ? settled - longest - 2 : 0;
  size_t best = 0;
  if (!special_.empty()) {
    const size_t from = low > special_.size() ? low - special_.size() : 0;
    const size_t at = text.substr(std::min(from, text.size())).rfind(special_);
    if (at != std::string_view::npos) best = from + at + special_.size();
  }
  if (whitespace_cuts_)
    for (size_t p = text.size() < 2 ? 0 : text.size() - 2; p > std::max(best, low); --p)
      if (whitespace_cut(text, p)) return p;
  return best;
}

uint64_t for_each_chunk(std::istream& in, const std::string& name, size_t block_bytes, const TextCuts* cuts,
                        const std::function<void(std::string_view)>& chunk) {
  HG_CHECK(block_bytes >= 1, "[for_each_chunk] block_bytes must be >= 1");
  std::string pending;  // starts at a safe cut
  size_t settled = 0;   // pending's first `settled` bytes hold no cut (scanned already)
  std::vector<char> block(block_bytes);
  uint64_t bytes = 0;
  while (in) {
    in.read(block.data(), std::streamsize(block.size()));
    HG_CHECK(!in.bad(), "reading \"", name, "\" failed: ", std::strerror(errno));
    const size_t n = size_t(in.gcount());
    pending.append(block.data(), n);
    bytes += n;
    const size_t cut = cuts ? cuts->last_cut(pending, settled) : pending.size();
    if (cut == 0) {
      settled = pending.size();
      continue;
    }
    chunk(std::string_view(pending).substr(0, cut));
    pending.erase(0, cut);
    settled = 0;
  }
  if (!pending.empty()) chunk(pending);
  return bytes;
}

}  // namespace hg::samples
