// Fuzz target: data/token_shard.h TokenShard on arbitrary bytes. An accepted shard has every token
// read (so a count past the mapping is an ASan finding) and checked against its vocabulary
// (check_tokens), and windows are drawn through TokenWindowDataset as train_gpt does.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "data/token_shard.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = hg::fuzz::write_input(data, size);
  try {
    auto shard = std::make_shared<const hg::data::TokenShard>(path);
    shard->check_tokens();
    uint64_t sum = 0;
    for (int64_t i = 0; i < shard->size(); ++i) sum += (*shard)[i];
    if (shard->size() >= 2) {
      const int64_t context = 1 + int64_t(sum % uint64_t(shard->size() - 1));
      hg::data::TokenWindowDataset windows({hg::data::whole(shard)}, context, 1 + int64_t(sum % 3));
      std::vector<int64_t> ids(static_cast<size_t>(context)), targets(static_cast<size_t>(context));
      for (int64_t w : {int64_t(0), windows.size() - 1}) {
        windows.get(w, {ids.data(), targets.data()});
        for (int64_t t : ids)
          if (t < 0 || uint64_t(t) >= shard->vocab_size()) std::abort();  // check_tokens let it through
      }
    }
  } catch (const hg::Error& e) {
    if (std::strlen(e.what()) == 0) std::abort();
  }
  return 0;
}
