// Fuzz target: text/tokenizer.h Tokenizer::load() on arbitrary bytes as a tokenizer.json. A file is
// either refused with an hg::Error or loads, and then round-trips a fixed text and survives
// save_json -> load unchanged (fuzz/tokenizer_fuzz_check.h).
#include <cstdint>
#include <cstring>

#include "fuzz/fuzz_input.h"
#include "fuzz/tokenizer_fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = hg::fuzz::write_input(data, size);
  hg::text::Tokenizer tok;
  try {
    tok = hg::text::Tokenizer::load(path);
  } catch (const hg::Error& e) {
    hg::fuzz::require_tokenizer(std::strlen(e.what()) > 0, "an empty error message");
    return 0;
  }
  hg::fuzz::check_loaded_tokenizer(tok, path + ".saved.json");
  return 0;
}
