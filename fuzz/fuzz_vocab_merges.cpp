// Fuzz target: text/tokenizer.h Tokenizer::load_vocab_merges() on arbitrary bytes split at the first
// NUL byte into a vocab.json (before) and a merges.txt (after; empty when there is no NUL). Either
// refused with an hg::Error, or loaded, and then a fixed text round-trips and save_json -> load keeps
// the encoding (fuzz/tokenizer_fuzz_check.h). Seeds: fuzz/corpus/fuzz_vocab_merges/ (vocab, NUL, merges).
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz/fuzz_input.h"
#include "fuzz/tokenizer_fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const size_t nul = bytes.find('\0');
  const std::string_view vocab = bytes.substr(0, nul), merges = nul == bytes.npos ? "" : bytes.substr(nul + 1);
  // Two files of this process's own, beside the input file of fuzz_input.h.
  const std::string& base = hg::fuzz::write_input(reinterpret_cast<const uint8_t*>(vocab.data()), vocab.size());
  const std::string merges_path = base + ".merges.txt";
  {
    hg::fuzz::write_input(reinterpret_cast<const uint8_t*>(merges.data()), merges.size());
    ::unlink(merges_path.c_str());
    if (::rename(base.c_str(), merges_path.c_str()) != 0) std::abort();
    hg::fuzz::write_input(reinterpret_cast<const uint8_t*>(vocab.data()), vocab.size());
  }
  hg::text::Tokenizer tok;
  try {
    tok = hg::text::Tokenizer::load_vocab_merges(base, merges_path);
  } catch (const hg::Error& e) {
    hg::fuzz::require_tokenizer(std::strlen(e.what()) > 0, "an empty error message");
    ::unlink(merges_path.c_str());
    return 0;
  }
  ::unlink(merges_path.c_str());
  hg::fuzz::check_loaded_tokenizer(tok, base + ".saved.json");
  return 0;
}
