#pragma once
// A dependency-free PNG writer: 8-bit RGB, no filtering, the zlib stream made of stored (uncompressed)
// deflate blocks. Files are larger than a compressing encoder's, but every viewer reads them.
#include <cstdint>
#include <string>
#include <vector>

namespace hg::metrics {

// CRC-32 as PNG and zlib define it (reflected polynomial 0xEDB88320, initial and final xor ~0).
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
// Adler-32 (RFC 1950), the zlib stream's checksum.
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

// The PNG file for a width x height image given as rows of RGB bytes (3 * width * height).
std::vector<uint8_t> encode_png(int width, int height, const std::vector<uint8_t>& rgb);
// Writes encode_png(...) to `path`; throws hg::Error when the file cannot be written.
void write_png(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb);

}  // namespace hg::metrics
