// data/cifar.h: CIFAR-10 binary files read back to the labels and pixels written (random records, every
// channel plane where it belongs, the per-channel normalisation), the splits of a directory, and hostile
// files -- a partial record, an empty file, a label past 9, a missing file, a (sparse) file of too many
// records -- each a one-line error that
// names the file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "data/cifar.h"
#include "support/check_error.h"
#include "support/temp_dir.h"
#include "support/test_seed.h"

using namespace hg;

namespace {

// `count` random records: labels 0..9, random pixels; the bytes, and the labels and pixels in order.
struct Records {
  std::string bytes;
  std::vector<uint8_t> labels, pixels;
};
Records random_records(int64_t count, std::mt19937& rng) {
  Records r;
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t label = uint8_t(rng() % 10);
    r.bytes.push_back(char(label));
    r.labels.push_back(label);
    for (int64_t b = 0; b < data::kCifarRecordBytes - 1; ++b) {
      const uint8_t v = uint8_t(rng());
      r.bytes.push_back(char(v));
      r.pixels.push_back(v);
    }
  }
  return r;
}

}  // namespace

TEST_CASE("cifar10: records read back, planes in place, normalised per channel") {
  std::mt19937 rng(testing::fresh_seed());
  const test::TempDir dir;
  const Records a = random_records(3, rng), b = random_records(2, rng);
  const auto data = data::read_cifar10({dir.write("a.bin", a.bytes), dir.write("b.bin", b.bytes)});
  REQUIRE(data->count == 5);
  std::vector<uint8_t> labels = a.labels, pixels = a.pixels;
  labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  pixels.insert(pixels.end(), b.pixels.begin(), b.pixels.end());
  CHECK(data->labels == labels);
  CHECK(data->pixels == pixels);

  const data::CifarDataset set(data, 1, 4);
  CHECK(set.size() == 4);
  std::vector<float> image(3 * 32 * 32, NAN);
  int64_t label = -1;
  set.get(2, {image.data(), &label});  // example 3 of the files: b's first record
  CHECK(label == b.labels[0]);
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i : {int64_t(0), int64_t(511), int64_t(1023)}) {
      const double expected =
          (b.pixels[size_t(c * 1024 + i)] / 255.0 - data::kCifarMean[size_t(c)]) / data::kCifarStd[size_t(c)];
      CHECK(std::abs(image[size_t(c * 1024 + i)] - expected) < 1e-5);
    }
}

TEST_CASE("cifar10: a directory's splits and hostile files") {
  std::mt19937 rng(testing::fresh_seed());
  const test::TempDir dir;
  for (int batch = 1; batch <= 5; ++batch)
    dir.write("data_batch_" + std::to_string(batch) + ".bin", random_records(4, rng).bytes);
  CHECK(data::is_cifar10_dir(dir.path.string()));  // what a program taking either format looks for
  const test::TempDir empty;
  CHECK_FALSE(data::is_cifar10_dir(empty.path.string()));
  CHECK_ERROR(data::load_cifar10_splits(dir.path.string(), 5), "no test_batch.bin in '", "no Debian package ships it");
  dir.write("test_batch.bin", random_records(3, rng).bytes);
  const data::CifarSplits splits = data::load_cifar10_splits(dir.path.string(), 5);
  CHECK(splits.train->size() == 15);
  CHECK(splits.validation->size() == 5);
  CHECK(splits.test->size() == 3);
  CHECK_ERROR(data::load_cifar10_splits(dir.path.string(), 20), "validation = 20 of 20 training images");

  std::string partial = random_records(2, rng).bytes;
  partial.pop_back();
  CHECK_ERROR(data::read_cifar10({dir.write("partial.bin", partial)}), "partial.bin' has 6145 bytes",
              "expected a positive multiple of 3073");
  CHECK_ERROR(data::read_cifar10({dir.write("empty.bin", "")}), "empty.bin' has 0 bytes");
  std::string bad_label = random_records(3, rng).bytes;
  bad_label[size_t(2 * data::kCifarRecordBytes)] = char(10);
  CHECK_ERROR(data::read_cifar10({dir.write("label.bin", bad_label)}), "label.bin' record 2 has label 10",
              "expected 0..9");
  CHECK_ERROR(data::read_cifar10({(dir.path / "missing.bin").string()}), "cannot open", "missing.bin");
  CHECK_ERROR(data::read_cifar10({dir.path.string()}), "is not a regular file");
  // A file of more records than any CIFAR file holds is refused before anything is allocated for it.
  const std::string huge = (dir.path / "huge.bin").string();
  {
    FILE* f = std::fopen(huge.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fseek(f, long((data::kCifarMaxRecordsPerFile + 1) * data::kCifarRecordBytes - 1), SEEK_SET) == 0);
    REQUIRE(std::fputc(0, f) == 0);
    std::fclose(f);
  }
  CHECK_ERROR(data::read_cifar10({huge}), "huge.bin' has 100001 records; expected at most 100000");
}
