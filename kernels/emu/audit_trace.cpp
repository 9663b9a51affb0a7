// The kernel audit's recording (see audit.h): the compiler's access callbacks, the address
// classification, and the hooks the emulator calls at launch, block, barrier and warp-collective
// boundaries. The analysis of a finished block lives in audit_requests.cpp and audit_races.cpp.
//
// Mechanism: in the audit flavour (HG_EMU_AUDIT) the kernels' translation units are compiled with GCC's
// `-fsanitize=thread --param=tsan-instrument-func-entry-exit=0`, but not linked with its runtime: GCC
// then calls __tsan_readK(address) / __tsan_writeK(address) (K = 1, 2, 4, 8, 16; unaligned variants;
// ranges) before each load and store of memory that may be shared, and __tsan_atomicK_op(...) in place of
// each atomic builtin, from the instruction's own place in the code: the callback's return address
// identifies the access site. The functions below are the whole runtime. (GCC's AddressSanitizer
// instrumentation would do too, but it skips a store to an address the same basic block already
// checked with a load -- right for bounds checking, wrong for counting traffic: an in-place update's
// stores would go unseen.) The rest of the program is not instrumented.
#include <link.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <tuple>

#include "kernels/emu/audit_log.h"
#include "kernels/emu/config.h"
#include "kernels/emu/emu.h"
#include "kernels/emu/launch.h"
#include "kernels/emu/runtime_state.h"


namespace hg::emu::audit {
namespace detail {

bool g_recording = false;
void flush_jsonl();
extern const size_t kJsonlBatchSize;

namespace {

bool g_enabled = false;
uint64_t g_l2_bytes = kH200L2Bytes;
std::mutex g_finished_mutex;
std::vector<LaunchState> g_finished;  // launches finished since the last take_launches

// The launch and block being recorded (blocks run one at a time in the audit flavour).
struct Recorder {
  bool in_launch = false;
  LaunchState launch;
  BlockLog log;
  std::vector<std::pair<uintptr_t, uintptr_t>> device_ranges;  // [start, end), sorted
  size_t last_range = 0;
  // Static __shared__ variables are `static thread_local` (emu.h): they live in the launching thread's
  // TLS block of the module that holds the kernel, next to the emulator's own thread-locals (the
  // built-ins threadIdx & co.), which are not shared memory.
  uintptr_t static_shared_begin = 0, static_shared_end = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> not_shared;
  uintptr_t dynamic_shared_begin = 0, dynamic_shared_end = 0;

  bool is_device(uintptr_t a) {
    if (last_range < device_ranges.size()) {
      const auto& r = device_ranges[last_range];
      if (a >= r.first && a < r.second) return true;
    }
    auto it = std::upper_bound(device_ranges.begin(), device_ranges.end(), a,
                               [](uintptr_t x, const std::pair<uintptr_t, uintptr_t>& r) { return x < r.first; });
    if (it == device_ranges.begin()) return false;
    --it;
    if (a >= it->second) return false;
    last_range = size_t(it - device_ranges.begin());
    return true;
  }
};

// The calling thread's TLS block of the module whose code contains `code`: [begin, end).
std::pair<uintptr_t, uintptr_t> thread_local_block(const void* code) {
  struct Query {
    uintptr_t code;
    std::pair<uintptr_t, uintptr_t> block{0, 0};
  } query{reinterpret_cast<uintptr_t>(code)};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& q = *static_cast<Query*>(data);
        bool contains = false;
        const ElfW(Phdr)* tls = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && q.code >= start && q.code < start + ph.p_memsz) contains = true;
          if (ph.p_type == PT_TLS) tls = &ph;
        }
        if (!contains) return 0;
        if (tls && info->dlpi_tls_data) {
          const uintptr_t begin = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
          q.block = {begin, begin + tls->p_memsz};
        }
        return 1;
      },
      &query);
  return query.block;
}

template <class T>
std::pair<uintptr_t, uintptr_t> range_of(const T& variable) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(&variable);
  return {begin, begin + sizeof(T)};
}

Recorder& recorder() {
  static Recorder r;
  return r;
}

uint32_t running_thread() {
  const uint3 t = ::hg::emu::detail::t_thread->thread_idx;
  const dim3 d = ::hg::emu::detail::t_block_dim;
  return t.x + d.x * (t.y + d.y * t.z);
}

}  // namespace

// The hot path: one call per load or store of instrumented code.
void record(uintptr_t address, unsigned size, Kind kind, uintptr_t pc) {
  if (!g_recording || !::hg::emu::detail::t_thread) return;
  Recorder& r = recorder();
  if (!r.in_launch) return;
  Space space;
  if (address >= r.static_shared_begin && address < r.static_shared_end) {
    for (const auto& [begin, end] : r.not_shared) {
      if (address >= begin && address < end) return;
    }
    space = Space::shared;
  } else if (address >= r.dynamic_shared_begin && address < r.dynamic_shared_end) {
    space = Space::shared;
  } else if (r.is_device(address)) {
    space = Space::global;
  } else {
    return;  // a local, a kernel parameter, the emulator's own state
  }
  Entry e;
  e.address = address;
  e.pc = pc;
  e.thread = running_thread();
  e.size = uint16_t(std::min(size, 0xffffu));
  e.type = EntryType::access;
  e.space = space;
  e.kind = kind;
  r.log.entries.push_back(e);
}

void begin_launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes) {
  if (!g_recording) return;
  Recorder& r = recorder();
  r.in_launch = true;
  r.launch = LaunchState{};
  r.launch.audit.kernel = ::hg::emu::detail::kernel_name(kernel);
  r.launch.audit.grid = grid;
  r.launch.audit.block = block;
  r.launch.audit.dynamic_shared_bytes = dynamic_shared_bytes;
  r.launch.l2_capacity_sectors = std::max<uint64_t>(g_l2_bytes / 32, 1);
  r.device_ranges.clear();
  {
    internal::State& s = internal::state();
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const auto& [start, bytes] : s.device) r.device_ranges.emplace_back(start, start + bytes);
  }
  r.last_range = 0;
  std::tie(r.static_shared_begin, r.static_shared_end) = thread_local_block(kernel);
  namespace emu = ::hg::emu::detail;
  r.not_shared = {range_of(emu::t_thread), range_of(emu::t_block_idx), range_of(emu::t_block_dim),
                  range_of(emu::t_grid_dim), range_of(emu::t_dynamic_shared)};
}

void begin_block(uint3 block, dim3 block_dim) {
  Recorder& r = recorder();
  if (!g_recording || !r.in_launch) return;
  r.log.entries.clear();
  r.log.block = block;
  r.log.block_dim = block_dim;
  r.dynamic_shared_begin = reinterpret_cast<uintptr_t>(::hg::emu::detail::t_dynamic_shared);
  r.dynamic_shared_end = r.dynamic_shared_begin + r.launch.audit.dynamic_shared_bytes;
}

void on_barrier() {
  Recorder& r = recorder();
  if (!g_recording || !r.in_launch) return;
  Entry e;
  e.type = EntryType::barrier;
  r.log.entries.push_back(e);
}

void on_warp_sync(uint32_t warp, unsigned lanes) {
  Recorder& r = recorder();
  if (!g_recording || !r.in_launch) return;
  Entry e;
  e.type = EntryType::warp_sync;
  e.thread = warp;
  e.address = lanes;
  r.log.entries.push_back(e);
}

void end_block() {
  Recorder& r = recorder();
  if (!g_recording || !r.in_launch) return;
  add_requests(r.log, r.launch);
  add_races(r.log, r.launch);
  r.log.entries.clear();
}

void abort_launch() {
  Recorder& r = recorder();
  r.in_launch = false;
  r.log.entries.clear();
  r.launch = LaunchState{};
}

void end_launch() {
  Recorder& r = recorder();
  if (!r.in_launch) return;
  r.in_launch = false;
  r.log.entries.clear();
  size_t pending = 0;
  {
    std::lock_guard<std::mutex> lock(g_finished_mutex);
    g_finished.push_back(std::move(r.launch));
    pending = g_finished.size();
  }
  r.launch = LaunchState{};
  if (pending >= kJsonlBatchSize) flush_jsonl();
}

// HG_EMU_AUDIT_JSONL=path: record from start-up and append every launch to `path` as a JSON line
// (in batches and at exit), so any program of the audit build can be audited unchanged.
namespace {
const char* jsonl_path() {
  static const char* path = std::getenv("HG_EMU_AUDIT_JSONL");
  return path && *path ? path : nullptr;
}
}  // namespace
extern const size_t kJsonlBatchSize = 256;

void flush_jsonl() {
  const char* path = jsonl_path();
  if (!path) return;
  const std::vector<LaunchAudit> launches = take_launches();
  if (launches.empty()) return;
  FILE* out = std::fopen(path, "a");
  if (!out) {
    std::fprintf(stderr, "[emu] HG_EMU_AUDIT_JSONL: cannot open %s for appending\n", path);
    return;
  }
  for (const LaunchAudit& launch : launches) std::fprintf(out, "%s\n", to_json(launch).c_str());
  std::fclose(out);
}

namespace {
const bool g_jsonl_started = [] {
  if (!jsonl_path() || !available()) return false;
  set_enabled(true);
  std::atexit(flush_jsonl);
  return true;
}();
}  // namespace

std::vector<LaunchState> take_finished() {
  std::lock_guard<std::mutex> lock(g_finished_mutex);
  return std::exchange(g_finished, {});
}

}  // namespace detail

bool available() { return HG_EMU_AUDIT != 0; }

void set_enabled(bool enabled) {
  detail::g_enabled = enabled && available();
  detail::g_recording = detail::g_enabled;
}

bool enabled() { return detail::g_enabled; }

void set_l2_bytes(uint64_t bytes) { detail::g_l2_bytes = bytes; }
uint64_t l2_bytes() { return detail::g_l2_bytes; }

}  // namespace hg::emu::audit

#if HG_EMU_AUDIT
// The instrumentation's entry points: GCC's ThreadSanitizer calls, without its runtime. Plain accesses
// are recorded; atomic read-modify-writes (and atomic stores) are performed here, as the runtime would,
// and recorded as atomics. Atomic loads are performed and not recorded: the emulator's atomics built on
// a compare-and-swap loop (emu.h) start with one, so each CUDA atomic counts once.
#define HG_AUDIT_ACCESS(bytes)                                                                       \
  extern "C" __attribute__((noinline)) void __tsan_read##bytes(void* address) {                      \
    hg::emu::audit::detail::record(reinterpret_cast<uintptr_t>(address), bytes, hg::emu::audit::Kind::load, \
                                   reinterpret_cast<uintptr_t>(__builtin_return_address(0)));        \
  }                                                                                                  \
  extern "C" __attribute__((noinline)) void __tsan_write##bytes(void* address) {                     \
    hg::emu::audit::detail::record(reinterpret_cast<uintptr_t>(address), bytes, hg::emu::audit::Kind::store, \
                                   reinterpret_cast<uintptr_t>(__builtin_return_address(0)));        \
  }                                                                                                  \
  extern "C" __attribute__((noinline)) void __tsan_unaligned_read##bytes(void* address) {            \
    hg::emu::audit::detail::record(reinterpret_cast<uintptr_t>(address), bytes, hg::emu::audit::Kind::load, \
                                   reinterpret_cast<uintptr_t>(__builtin_return_address(0)));        \
  }                                                                                                  \
  extern "C" __attribute__((noinline)) void __tsan_unaligned_write##bytes(void* address) {           \
    hg::emu::audit::detail::record(reinterpret_cast<uintptr_t>(address), bytes, hg::emu::audit::Kind::store, \
                                   reinterpret_cast<uintptr_t>(__builtin_return_address(0)));        \
  }
HG_AUDIT_ACCESS(1)
HG_AUDIT_ACCESS(2)
HG_AUDIT_ACCESS(4)
HG_AUDIT_ACCESS(8)
HG_AUDIT_ACCESS(16)
#undef HG_AUDIT_ACCESS
extern "C" __attribute__((noinline)) void __tsan_read_range(void* address, unsigned long bytes) {
  hg::emu::audit::detail::record(reinterpret_cast<uintptr_t>(address), unsigned(bytes), hg::emu::audit::Kind::load,
                                 reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}
extern "C" __attribute__((noinline)) void __tsan_write_range(void* address, unsigned long bytes) {
  hg::emu::audit::detail::record(reinterpret_cast<uintptr_t>(address), unsigned(bytes), hg::emu::audit::Kind::store,
                                 reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}
extern "C" void __tsan_init() {}
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_vptr_update(void**, void*) {}
extern "C" void __tsan_vptr_read(void**) {}

// Atomics: the memory order argument is C++'s (relaxed 0 ... seq_cst 5); performed sequentially
// consistent, which every weaker order allows.
#define HG_AUDIT_NOTE_ATOMIC(a)                                                                    \
  hg::emu::audit::detail::record(reinterpret_cast<uintptr_t>(a), sizeof(*(a)), hg::emu::audit::Kind::atomic, \
                                 reinterpret_cast<uintptr_t>(__builtin_return_address(0)))
#define HG_AUDIT_ATOMICS(bits, T)                                                                                   \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_load(const volatile T* a, int) {                    \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                                    \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) void __tsan_atomic##bits##_store(volatile T* a, T v, int) {                 \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                       \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) {                 \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) {                \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) {                \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) {                \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) {                 \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                               \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) {                \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) {               \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, \
                                                                                      int, int) {                  \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                         \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v,   \
                                                                                    int, int) {                    \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                          \
  }                                                                                                                 \
  extern "C" __attribute__((noinline)) T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int,  \
                                                                                  int) {                           \
    HG_AUDIT_NOTE_ATOMIC(a);                                                                                        \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                               \
    return c;                                                                                                       \
  }
HG_AUDIT_ATOMICS(8, uint8_t)
HG_AUDIT_ATOMICS(16, uint16_t)
HG_AUDIT_ATOMICS(32, uint32_t)
HG_AUDIT_ATOMICS(64, uint64_t)
#undef HG_AUDIT_ATOMICS
#undef HG_AUDIT_NOTE_ATOMIC
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#endif
