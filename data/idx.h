#pragma once
// IDX files: the MNIST format, in which Fashion-MNIST ships (Debian's dataset-fashion-mnist installs
// train-images-idx3-ubyte.gz and the others under /usr/share/datasets/fashion-mnist/).
//
// Layout (big-endian):
//   2 bytes   zero
//   1 byte    element type: 0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32, 0x0E f64
//   1 byte    rank (1 .. 8)
//   rank x u32  the sizes, outermost first
//   the elements, row-major
// A file that starts with the gzip magic (1f 8b) is decompressed with zlib as it is read. The reader checks
// every field and that the file holds exactly the elements the sizes promise (no fewer, no trailing
// bytes), with a decompressed-size limit, and throws hg::Error naming the file, what was found and what
// was expected. Elements are returned in host byte order.
#include <cstdint>
#include <string>
#include <vector>

namespace hg::data {

enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };
const char* idx_type_name(IdxType type);
size_t idx_type_size(IdxType type);

struct IdxArray {
  IdxType type = IdxType::u8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel * idx_type_size(type), host byte order
  int64_t numel() const;
};

// The largest decompressed file read_idx accepts by default (a guard against gzip bombs): 1 GiB.
inline constexpr uint64_t kIdxMaxBytes = uint64_t(1) << 30;

IdxArray read_idx(const std::string& path, uint64_t max_bytes = kIdxMaxBytes);
// Decodes a file's bytes already in memory (gzip-compressed or not), as read_idx does; `name` is used in the
// messages (the fuzz target's entry).
IdxArray decode_idx(std::vector<uint8_t> bytes, const std::string& name, uint64_t max_bytes = kIdxMaxBytes);
// Writes `array` as an IDX file, gzip-compressed when `gzip` (tests, fuzz seeds); atomic (temporary file
// then rename).
void write_idx(const std::string& path, const IdxArray& array, bool gzip);

}  // namespace hg::data
