// Fuzz target: engine/safetensors.h load() on arbitrary bytes. An accepted file's tensors are read
// in full (every byte of every view, so a view past the mapping is an ASan finding) and written back
// with save(), and that file must load to the same names, shapes, dtypes and bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/safetensors.h"
#include "fuzz/fuzz_input.h"

namespace {

uint64_t checksum(const hg::Tensor& t) {
  const hg::Tensor c = t.contiguous();
  const unsigned char* p = static_cast<const unsigned char*>(c.data_ptr());
  uint64_t sum = 0;
  for (size_t i = 0; i < size_t(c.numel()) * c.element_size(); ++i) sum = sum * 31 + p[i];
  return sum;
}

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = hg::fuzz::write_input(data, size);
  hg::safetensors::File file;
  try {
    file = hg::safetensors::load(path);
  } catch (const hg::Error& e) {
    require(std::strlen(e.what()) > 0, "an empty error message");
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  std::vector<uint64_t> sums;
  for (const auto& [name, tensor] : file.tensors) sums.push_back(checksum(tensor));
  // Round trip: what was accepted is written and read back unchanged.
  const std::string copy = path + ".copy";
  hg::safetensors::save(copy, file.tensors, file.metadata);
  const hg::safetensors::File again = hg::safetensors::load(copy);
  ::unlink(copy.c_str());
  require(again.tensors.size() == file.tensors.size() && again.metadata == file.metadata,
          "round trip changed the file");
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const hg::Tensor* t = again.find(file.tensors[i].first);
    require(
        t != nullptr && t->shape() == file.tensors[i].second.shape() && t->dtype() == file.tensors[i].second.dtype(),
        "round trip lost a tensor or changed its shape or dtype");
    require(checksum(*t) == sums[i], "round trip changed a tensor's bytes");
  }
  return 0;
}
