#pragma once
// Build-wide facts the emulator's headers and sources agree on.
//
// HG_EMU_ASAN: this translation unit is compiled with AddressSanitizer (GCC's __SANITIZE_ADDRESS__ or
// clang's __has_feature(address_sanitizer)).
//
// HG_EMU_BLOCKS_IN_PARALLEL: whether blocks of a grid run concurrently on OpenMP threads. Static
// __shared__ variables must be private to a block; the rule that makes that true is
//   * all fibers (CUDA threads) of a block run on one OS thread, and
//   * an OS thread runs one block at a time, to completion.
// With blocks in parallel, __shared__ is `static thread_local` (one copy per OS thread). Under
// AddressSanitizer blocks run one at a time (one grid at a time per process) and __shared__ is a plain
// `static`, because ASan puts redzones around statics but not around thread-locals: an out-of-bounds
// index into a static shared array is then reported. Define HG_EMU_SERIAL_BLOCKS to get the serial
// mode without ASan.
#if defined(__SANITIZE_ADDRESS__)
#define HG_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HG_EMU_ASAN 1
#endif
#endif
#ifndef HG_EMU_ASAN
#define HG_EMU_ASAN 0
#endif

// HG_EMU_AUDIT: the kernel-audit flavour (kernels/emu/audit.h; CMake HALFGRAD_EMU_AUDIT). It records
// one block at a time, so it runs blocks serially too.
#ifndef HG_EMU_AUDIT
#define HG_EMU_AUDIT 0
#endif

#if HG_EMU_ASAN || HG_EMU_AUDIT || defined(HG_EMU_SERIAL_BLOCKS)
#define HG_EMU_BLOCKS_IN_PARALLEL 0
#else
#define HG_EMU_BLOCKS_IN_PARALLEL 1
#endif
