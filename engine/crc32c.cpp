// CRC32C (engine/crc32c.h): the SSE4.2 instruction over three interleaved lanes joined by a shift
// table, or a slicing-by-8 table. Internally the "register" r is the CRC state between the initial and
// final inversion (crc32c() inverts on the way in and out), which is linear in its input:
// update(r, A || B) = update(update(r, A), B) and update(r, B) = update(0, B) xor shift_|B|(r).
#include "engine/crc32c.h"

#include <array>
#include <bit>
#include <cstring>
#include <vector>

// The slicing tables read 8 bytes as one little-endian word.
static_assert(std::endian::native == std::endian::little, "crc32c.cpp assumes a little-endian host");

// _mm_crc32_u64 exists on x86-64 only (32-bit x86 takes the table path).
#if defined(__x86_64__)
#include <nmmintrin.h>
#define HG_CRC32C_X86 1
#endif

namespace hg {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

using Tables = std::array<std::array<uint32_t, 256>, 8>;

const Tables& slicing_tables() {
  static const Tables tables = [] {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t r = i;
      for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ (kPolynomial & (0u - (r & 1u)));
      t[0][i] = r;
    }
    for (size_t k = 1; k < 8; ++k)
      for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFFu];
    return t;
  }();
  return tables;
}

uint64_t load_u64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);  // little-endian host (asserted above)
  return w;
}

uint32_t update_portable(uint32_t r, const unsigned char* p, size_t n) {
  const Tables& t = slicing_tables();
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t w = load_u64(p) ^ r;
    r = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
        t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
  }
  for (; n > 0; --n, ++p) r = (r >> 8) ^ t[0][(r ^ *p) & 0xFF];
  return r;
}

#if HG_CRC32C_X86
constexpr size_t kLane = 4096;  // bytes per lane; a block is three lanes

// shift_kLane(r) = update(r, kLane zero bytes), a linear map of r, as four byte-indexed tables.
struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> t{};
  uint32_t operator()(uint32_t r) const {
    return t[0][r & 0xFF] ^ t[1][(r >> 8) & 0xFF] ^ t[2][(r >> 16) & 0xFF] ^ t[3][r >> 24];
  }
};

const ShiftTables& lane_shift() {
  static const ShiftTables shift = [] {
    const std::vector<unsigned char> zeros(kLane, 0);
    uint32_t column[32];  // the image of each basis vector 1 << j
    for (int j = 0; j < 32; ++j) column[j] = update_portable(1u << j, zeros.data(), zeros.size());
    ShiftTables s;
    for (int k = 0; k < 4; ++k)
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t image = 0;
        for (int b = 0; b < 8; ++b)
          if (v & (1u << b)) image ^= column[8 * k + b];
        s.t[size_t(k)][v] = image;
      }
    return s;
  }();
  return shift;
}

__attribute__((target("sse4.2"))) uint32_t update_sse42(uint32_t r, const unsigned char* p, size_t n) {
  if (n >= 3 * kLane) {
    const ShiftTables& shift = lane_shift();
    for (; n >= 3 * kLane; n -= 3 * kLane, p += 3 * kLane) {
      uint64_t a = r, b = 0, c = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        a = _mm_crc32_u64(a, load_u64(p + i));
        b = _mm_crc32_u64(b, load_u64(p + kLane + i));
        c = _mm_crc32_u64(c, load_u64(p + 2 * kLane + i));
      }
      r = shift(shift(uint32_t(a)) ^ uint32_t(b)) ^ uint32_t(c);
    }
  }
  uint64_t r64 = r;
  for (; n >= 8; n -= 8, p += 8) r64 = _mm_crc32_u64(r64, load_u64(p));
  r = uint32_t(r64);
  for (; n > 0; --n, ++p) r = _mm_crc32_u8(r, *p);
  return r;
}

bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  return ~update_portable(~crc, static_cast<const unsigned char*>(data), size);
}

uint32_t crc32c_hardware(const void* data, size_t size, uint32_t crc) {
#if HG_CRC32C_X86
  if (cpu_has_sse42()) return ~update_sse42(~crc, static_cast<const unsigned char*>(data), size);
#endif
  return crc32c_portable(data, size, crc);
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) { return crc32c_hardware(data, size, crc); }

const char* crc32c_implementation() {
#if HG_CRC32C_X86
  if (cpu_has_sse42()) return "sse4.2";
#endif
  return "table";
}

}  // namespace hg
