#include "data/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "engine/tensor.h"

namespace hg::data {

namespace {

constexpr int kMaxRank = 8;

uint32_t big_endian_u32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

bool known_type(uint8_t code) {
  for (IdxType t : {IdxType::u8, IdxType::i8, IdxType::i16, IdxType::i32, IdxType::f32, IdxType::f64})
    if (code == uint8_t(t)) return true;
  return false;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HG_INPUT_CHECK(in.good(), "[read_idx] cannot open '", path, "': ", errno_text(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  HG_INPUT_CHECK(!in.bad(), "[read_idx] reading '", path, "' failed: ", errno_text(errno));
  return bytes;
}

// The gzip stream in `packed`, inflated, at most max_bytes.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& packed, const std::string& path, uint64_t max_bytes) {
  z_stream z{};
  HG_CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK, "[read_idx] zlib's inflateInit2 failed");
  z.next_in = const_cast<Bytef*>(packed.data());
  z.avail_in = uInt(packed.size());
  std::vector<uint8_t> out;
  int status = Z_OK;
  while (status == Z_OK) {
    const size_t done = out.size();
    if (done >= max_bytes) break;
    out.resize(std::min<size_t>(max_bytes, std::max<size_t>(done * 2, 1 << 16)));
    z.next_out = out.data() + done;
    z.avail_out = uInt(out.size() - done);
    status = inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (status == Z_BUF_ERROR && z.avail_in > 0) status = Z_OK;  // the output was full: grow and go on
  }
  const bool ended = status == Z_STREAM_END, trailing = z.avail_in > 0;
  const char* message = z.msg;
  inflateEnd(&z);
  HG_INPUT_CHECK(status != Z_OK || out.size() < max_bytes, "[read_idx] '", path, "' inflates to more than ", max_bytes,
                 " bytes; expected an IDX file below that");
  HG_INPUT_CHECK(ended, "[read_idx] '", path,
                 "' is not a complete gzip stream (zlib: ", message != nullptr ? message : "truncated", ")");
  HG_INPUT_CHECK(!trailing, "[read_idx] '", path, "' has bytes after its gzip stream; expected one gzip member");
  return out;
}

}  // namespace

const char* idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::u8:
      return "u8";
    case IdxType::i8:
      return "i8";
    case IdxType::i16:
      return "i16";
    case IdxType::i32:
      return "i32";
    case IdxType::f32:
      return "f32";
    case IdxType::f64:
      return "f64";
  }
  return "unknown";
}

size_t idx_type_size(IdxType type) {
  switch (type) {
    case IdxType::u8:
    case IdxType::i8:
      return 1;
    case IdxType::i16:
      return 2;
    case IdxType::i32:
    case IdxType::f32:
      return 4;
    case IdxType::f64:
      return 8;
  }
  return 0;
}

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

IdxArray parse_idx(const uint8_t* data, size_t size, const std::string& name, uint64_t max_bytes) {
  HG_INPUT_CHECK(size >= 4, "[read_idx] '", name, "' holds ", size, " bytes; expected an IDX header of at least 4");
  HG_INPUT_CHECK(data[0] == 0 && data[1] == 0, "[read_idx] '", name, "' does not start with two zero bytes (found ",
                 int(data[0]), " ", int(data[1]), "); expected an IDX file (MNIST format)");
  HG_INPUT_CHECK(known_type(data[2]), "[read_idx] '", name, "' has element type code ", int(data[2]),
                 "; expected 8 (u8), 9 (i8), 11 (i16), 12 (i32), 13 (f32) or 14 (f64)");
  const int rank = data[3];
  HG_INPUT_CHECK(rank >= 1 && rank <= kMaxRank, "[read_idx] '", name, "' has rank ", rank, "; expected 1 to ",
                 kMaxRank);
  const size_t header = 4 + 4 * size_t(rank);
  HG_INPUT_CHECK(size >= header, "[read_idx] '", name, "' is truncated in its header: ", size, " bytes, expected ",
                 header, " for rank ", rank);
  IdxArray array;
  array.type = IdxType(data[2]);
  const size_t width = idx_type_size(array.type);
  uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const uint32_t extent = big_endian_u32(data + 4 + 4 * d);
    array.shape.push_back(extent);
    count *= extent;
    HG_INPUT_CHECK(count * width <= max_bytes, "[read_idx] '", name, "' declares more than ", max_bytes,
                   " bytes of elements (sizes so far ", shape_str(array.shape), "); expected less");
  }
  const uint64_t expected = header + count * width;
  HG_INPUT_CHECK(size == expected, "[read_idx] '", name, "' holds ", size, " bytes but its sizes ",
                 shape_str(array.shape), " of ", idx_type_name(array.type), " need ", expected, " (",
                 size < expected ? "truncated" : "trailing bytes", ")");
  array.bytes.assign(data + header, data + size);
  for (size_t i = 0; width > 1 && i < array.bytes.size(); i += width)  // big-endian to host (little-endian)
    std::reverse(array.bytes.begin() + std::ptrdiff_t(i), array.bytes.begin() + std::ptrdiff_t(i + width));
  return array;
}

}  // namespace

IdxArray decode_idx(std::vector<uint8_t> bytes, const std::string& name, uint64_t max_bytes) {
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) bytes = gunzip(bytes, name, max_bytes);
  return parse_idx(bytes.data(), bytes.size(), name, max_bytes);
}

IdxArray read_idx(const std::string& path, uint64_t max_bytes) { return decode_idx(read_file(path), path, max_bytes); }

void write_idx(const std::string& path, const IdxArray& array, bool gzip) {
  const size_t width = idx_type_size(array.type);
  HG_CHECK(width > 0 && !array.shape.empty() && array.shape.size() <= size_t(kMaxRank),
           "[write_idx] expected a known "
           "type and rank 1 to ",
           kMaxRank, ", got ", idx_type_name(array.type), " of rank ", array.shape.size());
  HG_CHECK(array.bytes.size() == size_t(array.numel()) * width, "[write_idx] ", array.bytes.size(), " bytes for sizes ",
           shape_str(array.shape), " of ", idx_type_name(array.type));
  std::vector<uint8_t> file{0, 0, uint8_t(array.type), uint8_t(array.shape.size())};
  for (int64_t extent : array.shape)
    for (int shift = 24; shift >= 0; shift -= 8) file.push_back(uint8_t(uint64_t(extent) >> shift));
  const size_t header = file.size();
  file.insert(file.end(), array.bytes.begin(), array.bytes.end());
  for (size_t i = header; width > 1 && i < file.size(); i += width)
    std::reverse(file.begin() + std::ptrdiff_t(i), file.begin() + std::ptrdiff_t(i + width));
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  gzFile gz = gzip ? gzopen(temp.c_str(), "wb") : nullptr;
  std::FILE* plain = gzip ? nullptr : std::fopen(temp.c_str(), "wb");
  HG_INPUT_CHECK(gz != nullptr || plain != nullptr, "[write_idx] cannot create '", temp, "': ", errno_text(errno));
  const bool written = gzip ? gzwrite(gz, file.data(), unsigned(file.size())) == int(file.size())
                            : std::fwrite(file.data(), 1, file.size(), plain) == file.size();
  const bool closed = gzip ? gzclose(gz) == Z_OK : std::fclose(plain) == 0;
  if (!written || !closed || std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    HG_INPUT_FAIL("[write_idx] writing '", path, "' failed: ", errno_text(errno));
  }
}

}  // namespace hg::data
