#pragma once
// CRC32C (Castagnoli; polynomial 0x1EDC6F41, reflected 0x82F63B78, init and final xor 0xFFFFFFFF):
// the checksum safetensors::save writes for every tensor and load verifies (engine/safetensors.h).
// CRC32C("123456789") = 0xE3069283.
//
// STRATEGY
//   - x86-64 with SSE4.2 (checked at run time): the crc32 instruction, 8 bytes at a time, over three
//     independent lanes of kLane bytes each (the instruction's latency is 3 cycles, its throughput
//     one per cycle: three chains keep it busy). The lanes are joined by the CRC's linearity:
//     crc(A || B) = shift_|B|(crc(A)) xor crc0(B), where shift_n (n zero bytes through the register)
//     is a 32x32 GF(2) matrix, applied as four 256-entry table lookups (built once).
//   - elsewhere: a slicing-by-8 table (eight 256-entry tables, 8 bytes per step).
// Both paths give the same value for every input (tests/test_checksum.cpp checks them against each
// other and against known answers).
#include <cstddef>
#include <cstdint>

namespace hg {

// The CRC32C of `size` bytes at `data`, continuing from `crc` (the value of the bytes before: 0 for
// none), so crc32c(b, nb, crc32c(a, na)) == crc32c(a || b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The two implementations, for tests and the benchmark (crc32c picks the first when the CPU has it).
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);
uint32_t crc32c_hardware(const void* data, size_t size, uint32_t crc = 0);  // the portable one without SSE4.2
// Whether crc32c() runs on the CPU's instruction ("sse4.2") or the table ("table").
const char* crc32c_implementation();

}  // namespace hg
