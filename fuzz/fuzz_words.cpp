// Fuzz target: data/words.h read_words on arbitrary bytes, then the character contexts of what it kept. An
// accepted list holds only words of 'a'..'z' within the length limit, and every context and target id is
// a character id (so a word the filter let through with another byte is a finding).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "data/words.h"
#include "fuzz/fuzz_input.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = hg::fuzz::write_input(data, size);
  try {
    const hg::data::WordList list = hg::data::read_words(path, 16);
    for (const std::string& word : list.words)
      if (word.empty() || word.size() > 16 || word.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos)
        std::abort();
    const hg::data::CharContextDataset set(list.words, 3);
    for (int64_t i = 0; i < set.size(); ++i) {
      int64_t context[3], target;
      set.get(i, {context, &target});
      for (int64_t id : context)
        if (id < 0 || id >= hg::data::kCharVocab) std::abort();
      if (target < 0 || target >= hg::data::kCharVocab) std::abort();
    }
  } catch (const hg::Error& e) {
    if (std::strlen(e.what()) == 0) std::abort();
  }
  return 0;
}
