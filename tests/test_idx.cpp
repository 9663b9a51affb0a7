// IDX files (data/idx.h) and the MNIST-format datasets (data/mnist.h), on generated files: every element
// type round-trips, plain and gzip-compressed, big-endian on disk; hostile files (truncated, foreign,
// unknown type, bad rank, trailing bytes, a damaged or trailing-garbage gzip stream, a size bomb) are one
// error naming the file; the datasets serve normalised images and labels over their splits.
#include <doctest/doctest.h>

#include <zlib.h>

#include <cmath>
#include <cstring>

#include "data/idx.h"
#include "data/mnist.h"
#include "support/check_error.h"
#include "support/temp_dir.h"

using namespace hg;
using namespace hg::data;

namespace {

IdxArray array_of(IdxType type, std::vector<int64_t> shape, uint32_t seed) {
  IdxArray a;
  a.type = type;
  a.shape = std::move(shape);
  a.bytes.resize(size_t(a.numel()) * idx_type_size(type));
  for (size_t i = 0; i < a.bytes.size(); ++i) a.bytes[i] = uint8_t((i * 2654435761u + seed) >> 13);
  return a;
}

std::string gzipped(const std::string& raw) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, uLong(raw.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = uInt(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// An IDX header for `code` and `shape`, big-endian sizes.
std::string header(uint8_t code, std::vector<uint32_t> shape) {
  std::string h{'\0', '\0', char(code), char(shape.size())};
  for (uint32_t s : shape)
    for (int shift = 24; shift >= 0; shift -= 8) h += char(uint8_t(s >> shift));
  return h;
}

}  // namespace

TEST_CASE("IDX files round-trip every element type, plain and gzip-compressed, big-endian on disk") {
  test::TempDir dir;
  uint32_t seed = 1;
  for (IdxType type : {IdxType::u8, IdxType::i8, IdxType::i16, IdxType::i32, IdxType::f32, IdxType::f64}) {
    for (bool gzip : {false, true}) {
      INFO(idx_type_name(type) << (gzip ? " gzip" : " plain"));
      const IdxArray a = array_of(type, {3, 2, 5}, seed++);
      const std::string path = (dir.path / "a.idx").string();
      write_idx(path, a, gzip);
      const IdxArray b = read_idx(path);
      CHECK(int(b.type) == int(a.type));
      CHECK(b.shape == a.shape);
      CHECK(b.bytes == a.bytes);
    }
  }
  // The on-disk byte order: an i32 1 is 00 00 00 01 after the header, and a f32 -2.5 is c0 20 00 00.
  IdxArray one;
  one.type = IdxType::i32;
  one.shape = {2};
  const int32_t values[2] = {1, -2};
  one.bytes.assign(reinterpret_cast<const uint8_t*>(values), reinterpret_cast<const uint8_t*>(values) + 8);
  const std::string path = (dir.path / "one.idx").string();
  write_idx(path, one, false);
  std::ifstream in(path, std::ios::binary);
  const std::string disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(disk == header(0x0C, {2}) + std::string("\0\0\0\x01\xff\xff\xff\xfe", 8));
  const IdxArray f = read_idx(dir.write("f.idx", header(0x0D, {1}) + std::string("\xc0\x20\x00\x00", 4)));
  float value = 0;
  std::memcpy(&value, f.bytes.data(), 4);
  CHECK(value == -2.5f);
}

TEST_CASE("hostile IDX files are one error naming the file and what was expected") {
  test::TempDir dir;
  const std::string good = header(0x08, {2, 3}) + std::string(6, '\x07');
  CHECK(read_idx(dir.write("good.idx", good)).numel() == 6);
  CHECK_ERROR(read_idx((dir.path / "absent.idx").string()), "cannot open", "absent.idx");
  CHECK_ERROR(read_idx(dir.write("empty.idx", "")), "empty.idx' holds 0 bytes", "expected an IDX header");
  CHECK_ERROR(read_idx(dir.write("text.idx", "hello world")), "does not start with two zero bytes", "MNIST format");
  CHECK_ERROR(read_idx(dir.write("type.idx", header(0x0A, {1}) + "x")), "element type code 10", "expected 8 (u8)");
  CHECK_ERROR(read_idx(dir.write("rank0.idx", header(0x08, {}))), "rank 0; expected 1 to 8");
  CHECK_ERROR(read_idx(dir.write("rank9.idx", header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1}))), "rank 9");
  CHECK_ERROR(read_idx(dir.write("header.idx", header(0x08, {2, 3}).substr(0, 9))), "truncated in its header");
  CHECK_ERROR(read_idx(dir.write("short.idx", good.substr(0, good.size() - 1))), "holds 17 bytes",
              "need 18 (truncated)");
  CHECK_ERROR(read_idx(dir.write("long.idx", good + "z")), "need 18 (trailing bytes)");
  CHECK_ERROR(read_idx(dir.write("huge.idx", header(0x0E, {65536, 65536}))), "declares more than 1073741824 bytes");
  const std::string packed = gzipped(good);
  CHECK(read_idx(dir.write("good.idx.gz", packed)).bytes == std::vector<uint8_t>(6, 7));
  CHECK_ERROR(read_idx(dir.write("cut.gz", packed.substr(0, packed.size() - 9))), "cut.gz' is not a complete gzip");
  CHECK_ERROR(read_idx(dir.write("tail.gz", packed + "junk")), "bytes after its gzip stream");
  std::string damaged = packed;
  damaged[12] = char(damaged[12] ^ 0x5a);
  CHECK_THROWS_AS(read_idx(dir.write("damaged.gz", damaged)), Error);
  // A gzip bomb: 2 MiB + 1 of zeros against a 1 MiB limit (read_idx's default is 1 GiB) is refused while
  // inflating, before it is all held.
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string bomb(4 << 20, '\0'), zeros(1 << 20, '\0');
  z.next_out = reinterpret_cast<Bytef*>(bomb.data());
  z.avail_out = uInt(bomb.size());
  for (int mib = 0; mib <= 2; ++mib) {
    z.next_in = reinterpret_cast<Bytef*>(zeros.data());
    z.avail_in = uInt(mib == 2 ? 1 : zeros.size());
    REQUIRE(deflate(&z, mib == 2 ? Z_FINISH : Z_NO_FLUSH) != Z_STREAM_ERROR);
  }
  bomb.resize(z.total_out);
  deflateEnd(&z);
  CHECK_ERROR(read_idx(dir.write("bomb.gz", bomb), 1 << 20), "inflates to more than 1048576 bytes");
}

TEST_CASE("MNIST-format data: images normalised, labels, splits, and the files' errors") {
  test::TempDir dir;
  const auto write_pair = [&](const std::string& stem, int64_t count, uint32_t seed) {
    IdxArray images = array_of(IdxType::u8, {count, 4, 3}, seed), labels = array_of(IdxType::u8, {count}, seed + 9);
    for (uint8_t& l : labels.bytes) l %= 10;
    write_idx((dir.path / (stem + "-images-idx3-ubyte.gz")).string(), images, true);
    write_idx((dir.path / (stem + "-labels-idx1-ubyte.gz")).string(), labels, true);
    return std::pair{images, labels};
  };
  const auto [train_images, train_labels] = write_pair("train", 10, 3);
  const auto [test_images, test_labels] = write_pair("t10k", 4, 5);
  const MnistSplits splits = load_mnist_splits(dir.path.string(), 3, 0.5, 0.25);
  CHECK(splits.train->size() == 7);
  CHECK(splits.validation->size() == 3);
  CHECK(splits.test->size() == 4);
  const std::vector<Field> fields = splits.train->fields();
  REQUIRE(fields.size() == 2);
  CHECK(fields[0].shape == Shape{1, 4, 3});
  CHECK(fields[1].dtype == DType::i64);
  for (const auto& [set, first, images, labels] : {std::tuple{splits.validation, 7, &train_images, &train_labels},
                                                   std::tuple{splits.test, 0, &test_images, &test_labels}}) {
    for (int64_t i = 0; i < set->size(); ++i) {
      float image[12];
      int64_t label = -1;
      set->get(i, {image, &label});
      CHECK(label == labels->bytes[size_t(first + i)]);
      for (int p = 0; p < 12; ++p)
        CHECK(image[p] == doctest::Approx((images->bytes[size_t((first + i) * 12 + p)] / 255.0 - 0.5) / 0.25));
    }
  }
  // Errors: a label file of another count, a file of the wrong rank, a missing file (the Debian package
  // named for the default directory).
  IdxArray few = array_of(IdxType::u8, {9}, 1);
  write_idx((dir.path / "few.idx").string(), few, false);
  CHECK_ERROR(read_mnist((dir.path / "train-images-idx3-ubyte.gz").string(), (dir.path / "few.idx").string()),
              "has 10 images but", "has 9 labels");
  CHECK_ERROR(read_mnist((dir.path / "few.idx").string(), (dir.path / "few.idx").string()),
              "expected u8 images [N, rows, cols]");
  CHECK_ERROR(load_mnist_splits(dir.path.string(), 10), "validation = 10 of 10 training examples");
  test::TempDir empty;
  CHECK_ERROR(load_mnist_splits(empty.path.string()), "no train-images-idx3-ubyte(.gz) in");
  if (::access(kFashionMnistDir, F_OK) != 0) CHECK_ERROR(load_mnist_splits(), "install Debian's dataset-fashion-mnist");
}
