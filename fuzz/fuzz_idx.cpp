// Fuzz target: data/idx.h read_idx on arbitrary bytes, plain or gzip-compressed (the seeds have both). An
// accepted file must hold exactly the elements its sizes promise, and every element is read (so a size
// past the buffer is an ASan finding).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "data/idx.h"
#include "fuzz/fuzz_input.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = hg::fuzz::write_input(data, size);
  try {
    const hg::data::IdxArray array = hg::data::read_idx(path);
    if (array.bytes.size() != size_t(array.numel()) * hg::data::idx_type_size(array.type)) std::abort();
    uint64_t sum = 0;
    for (uint8_t b : array.bytes) sum += b;
    if (sum == 1) std::abort();  // never: keeps the reads
  } catch (const hg::Error& e) {
    if (std::strlen(e.what()) == 0) std::abort();
  }
  return 0;
}
