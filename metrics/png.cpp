// PNG = signature, IHDR, IDAT (zlib: 2-byte header, stored deflate blocks of <= 65535 bytes, Adler-32),
// IEND; each chunk = length, type, data, CRC-32 of type + data (big-endian integers throughout).
#include "metrics/png.h"

#include <algorithm>
#include <array>
#include <fstream>

#include "kernels/error.h"

namespace hg::metrics {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

void chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put32(out, crc32(out.data() + start, out.size() - start));
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  const auto& table = crc_table();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  // 5552 bytes is the most that can be summed before b can overflow 32 bits (zlib's NMAX).
  while (n > 0) {
    const size_t block = std::min<size_t>(n, 5552);
    for (size_t i = 0; i < block; ++i) {
      a += data[i];
      b += a;
    }
    a %= 65521;
    b %= 65521;
    data += block;
    n -= block;
  }
  return (b << 16) | a;
}

std::vector<uint8_t> encode_png(int width, int height, const std::vector<uint8_t>& rgb) {
  HG_CHECK(width > 0 && height > 0, "[png] image size must be positive, got ", width, "x", height);
  HG_CHECK(rgb.size() == size_t(width) * size_t(height) * 3, "[png] expected ", size_t(width) * size_t(height) * 3,
           " RGB bytes for ", width, "x", height, ", got ", rgb.size());
  // Scanlines, each led by filter type 0 (None).
  std::vector<uint8_t> raw;
  raw.reserve(size_t(height) * (size_t(width) * 3 + 1));
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + ptrdiff_t(size_t(y) * size_t(width) * 3),
               rgb.begin() + ptrdiff_t(size_t(y + 1) * size_t(width) * 3));
  }
  // zlib: CMF 0x78 (deflate, 32K window), FLG 0x01 (no dictionary, fastest; 0x7801 % 31 == 0).
  std::vector<uint8_t> z{0x78, 0x01};
  size_t at = 0;
  do {
    const size_t n = std::min<size_t>(raw.size() - at, 65535);
    const bool last = at + n == raw.size();
    z.push_back(last ? 1 : 0);  // BFINAL, BTYPE 00 (stored)
    z.push_back(uint8_t(n));
    z.push_back(uint8_t(n >> 8));
    z.push_back(uint8_t(~n));
    z.push_back(uint8_t(~n >> 8));
    z.insert(z.end(), raw.begin() + ptrdiff_t(at), raw.begin() + ptrdiff_t(at + n));
    at += n;
  } while (at < raw.size());
  put32(z, adler32(raw.data(), raw.size()));

  std::vector<uint8_t> png{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put32(ihdr, uint32_t(width));
  put32(ihdr, uint32_t(height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8 bits per sample, RGB, deflate, adaptive filters, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  const std::vector<uint8_t> bytes = encode_png(width, height, rgb);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  HG_CHECK(file.is_open(), "[png] cannot open \"", path, "\" for writing");
  file.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  file.close();
  HG_CHECK(!file.fail(), "[png] writing \"", path, "\" failed (disk full?)");
}

}  // namespace hg::metrics
