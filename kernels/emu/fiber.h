#pragma once
// Fibers: user-space execution contexts for the SIMT emulator. Every CUDA thread of a block runs on
// its own fiber (its own stack). A fiber runs until it reaches a barrier, a warp collective or its end,
// then switches to another fiber of the same block, on the same OS thread.
//
// A switch saves the callee-saved registers on the current stack and swaps stack pointers: on x86-64
// six pushes, a store, a load, six pops and a return (a few ns; ucontext's swapcontext makes a system
// call per switch, ~3 us). Other architectures fall back to ucontext (slow but correct).
//
// AddressSanitizer: every switch is announced with __sanitizer_start_switch_fiber /
// __sanitizer_finish_switch_fiber, so ASan knows which stack is current (no false reports, and
// overflows of a kernel's local arrays are still found).
#include <cstddef>

#include "kernels/emu/config.h"

#if !defined(__x86_64__) || defined(HG_EMU_FORCE_UCONTEXT)
#define HG_EMU_UCONTEXT 1
#include <ucontext.h>
#else
#define HG_EMU_UCONTEXT 0
#endif

namespace hg::emu::detail {

// A fiber stack: [base, base + size) is usable; a PROT_NONE guard page lies just below `base`, so an
// overflow faults instead of silently corrupting the neighbouring stack.
struct Stack {
  char* base = nullptr;
  size_t size = 0;
};

Stack allocate_stack(size_t size);
void free_stack(Stack stack);
// Forgets whatever AddressSanitizer recorded about frames on `stack` (needed after a fiber is
// abandoned mid-kernel: its frames never returned, so their redzones are still poisoned).
void unpoison_stack(Stack stack);

// A suspended execution context. For a fiber, `stack` is its stack; for the OS thread's own context
// (the scheduler) it is the thread's stack as reported by pthread_getattr_np.
struct Context {
#if HG_EMU_UCONTEXT
  ucontext_t uc;
#else
  void* sp = nullptr;  // the saved stack pointer; the registers are saved on that stack
#endif
  Stack stack;
  void* asan_fake_stack = nullptr;
};

// The calling OS thread's stack, as a Context to switch back to.
void init_thread_context(Context& self);
// Makes the first switch to `fiber` call entry(arg) at the top of fiber.stack. entry must never
// return: it ends with exit_to().
void prepare(Context& fiber, void (*entry)(void*), void* arg);
// Saves the running context into `from` and resumes `to`; returns when something switches back.
void switch_context(Context& from, Context& to);
// Resumes `to` from a fiber that will never run again; does not return. Deliberately not declared
// [[noreturn]]: ASan instruments a call to a noreturn function with __asan_handle_no_return, which
// clears the shadow of the whole fiber stack and makes a system call, at every fiber's end (10x the
// cost of the rest of a thread). The fiber's frames have all returned by then, so nothing needs it.
void exit_to(Context& from, Context& to);
// The first call on a new fiber (completes the AddressSanitizer switch).
void on_fiber_start(Context& self);

}  // namespace hg::emu::detail
