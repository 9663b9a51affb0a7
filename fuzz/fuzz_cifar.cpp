// Fuzz target: data/cifar.h read_cifar10 on arbitrary bytes, then every example of what it read. An accepted
// file holds whole records with labels 0..9, and every example's label and normalised pixels are those of
// its own record's bytes (so a record read out of place or a byte past the end is a finding).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "data/cifar.h"
#include "fuzz/fuzz_input.h"
#include "kernels/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = hg::fuzz::write_input(data, size);
  try {
    const auto cifar = hg::data::read_cifar10({path});
    if (cifar->count * hg::data::kCifarRecordBytes != int64_t(size)) std::abort();
    const hg::data::CifarDataset set(cifar, 0, cifar->count);
    std::vector<float> image(size_t(3 * 32 * 32));
    for (int64_t i = 0; i < set.size(); ++i) {
      int64_t label = -1;
      set.get(i, {image.data(), &label});
      if (label < 0 || label > 9 || label != int64_t(data[size_t(i * hg::data::kCifarRecordBytes)])) std::abort();
      const uint8_t* pixels = data + i * hg::data::kCifarRecordBytes + 1;  // the record's own bytes, plane by plane
      for (size_t k = 0; k < image.size(); ++k) {
        const size_t c = k / 1024;
        const double expected = (pixels[k] / 255.0 - hg::data::kCifarMean[c]) / hg::data::kCifarStd[c];
        if (!std::isfinite(image[k]) || std::abs(image[k] - expected) > 1e-5) std::abort();
      }
    }
  } catch (const hg::Error& e) {
    if (std::strlen(e.what()) == 0) std::abort();
  }
  return 0;
}
