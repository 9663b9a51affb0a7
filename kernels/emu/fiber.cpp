// Fiber stacks and the context switch (see fiber.h).
#include "kernels/emu/fiber.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "kernels/error.h"

#if HG_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !HG_EMU_UCONTEXT
// hg_emu_switch_context(void** save_sp, void* load_sp): pushes the callee-saved registers of the
// System V x86-64 ABI (rbp, rbx, r12-r15), stores rsp into *save_sp, loads load_sp into rsp, pops the
// registers saved there and returns into that context. MXCSR and the x87 control word are not saved:
// no kernel changes the floating-point environment, and all fibers of a thread share it.
// hg_emu_fiber_trampoline: where a fresh fiber's first "return" lands: calls entry(arg), with entry in
// r13 and arg in r12 as prepare() laid them out; entry never returns.
asm(R"(
  .text
  .p2align 4
  .globl hg_emu_switch_context
  .type hg_emu_switch_context, @function
hg_emu_switch_context:
  .cfi_startproc
  endbr64
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size hg_emu_switch_context, .-hg_emu_switch_context

  .p2align 4
  .globl hg_emu_fiber_trampoline
  .type hg_emu_fiber_trampoline, @function
hg_emu_fiber_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  endbr64
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size hg_emu_fiber_trampoline, .-hg_emu_fiber_trampoline
  .section .note.GNU-stack,"",@progbits
  .text
)");
extern "C" void hg_emu_switch_context(void** save_sp, void* load_sp);
extern "C" void hg_emu_fiber_trampoline();
#endif

namespace hg::emu::detail {
namespace {

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

#if HG_EMU_UCONTEXT
// makecontext passes int arguments only: the entry and its argument travel as 32-bit halves.
void ucontext_entry(unsigned entry_hi, unsigned entry_lo, unsigned arg_hi, unsigned arg_lo) {
  auto join = [](unsigned hi, unsigned lo) { return (uintptr_t(hi) << 32) | uintptr_t(lo); };
  auto entry = reinterpret_cast<void (*)(void*)>(join(entry_hi, entry_lo));
  entry(reinterpret_cast<void*>(join(arg_hi, arg_lo)));
}
#endif

}  // namespace

Stack allocate_stack(size_t size) {
  const size_t guard = page_size();
  size = (size + guard - 1) / guard * guard;
  void* region = mmap(nullptr, size + guard, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  HG_CHECK(region != MAP_FAILED, "[emu] cannot map a fiber stack of ", size, " bytes: ", std::strerror(errno));
  HG_CHECK(mprotect(region, guard, PROT_NONE) == 0,
           "[emu] cannot protect a fiber stack's guard page: ", std::strerror(errno));
  return Stack{static_cast<char*>(region) + guard, size};
}

void free_stack(Stack stack) {
  if (stack.base) munmap(stack.base - page_size(), stack.size + page_size());
}

void unpoison_stack(Stack stack) {
#if HG_EMU_ASAN
  __asan_unpoison_memory_region(stack.base, stack.size);
#else
  (void)stack;
#endif
}

void init_thread_context(Context& self) {
  pthread_attr_t attr;
  void* base = nullptr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
  }
  self.stack = Stack{static_cast<char*>(base), size};
}

// Writes into a stack that may hold stale AddressSanitizer poison from an earlier fiber; the top of
// the stack is unpoisoned explicitly instead.
#if HG_EMU_ASAN
__attribute__((no_sanitize_address))
#endif
void prepare(Context& fiber, void (*entry)(void*), void* arg) {
#if HG_EMU_UCONTEXT
  getcontext(&fiber.uc);
  fiber.uc.uc_stack.ss_sp = fiber.stack.base;
  fiber.uc.uc_stack.ss_size = fiber.stack.size;
  fiber.uc.uc_link = nullptr;
  const auto e = reinterpret_cast<uintptr_t>(entry), a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&fiber.uc, reinterpret_cast<void (*)()>(&ucontext_entry), 4, unsigned(e >> 32), unsigned(e),
              unsigned(a >> 32), unsigned(a));
#else
  // Top of the stack, 16-byte aligned: [top-8] the trampoline (the switch's `ret` target), then the
  // six registers the switch pops: rbp = 0 (ends frame-pointer walks), rbx, r12 = arg, r13 = entry,
  // r14, r15. After the pops and the ret, rsp == top, 16-byte aligned for the trampoline's call.
  auto top = reinterpret_cast<uintptr_t>(fiber.stack.base + fiber.stack.size) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = reinterpret_cast<void*>(&hg_emu_fiber_trampoline);
  *--sp = nullptr;                         // rbp
  *--sp = nullptr;                         // rbx
  *--sp = arg;                             // r12
  *--sp = reinterpret_cast<void*>(entry);  // r13
  *--sp = nullptr;                         // r14
  *--sp = nullptr;                         // r15
  fiber.sp = sp;
#endif
  fiber.asan_fake_stack = nullptr;
}

void switch_context(Context& from, Context& to) {
#if HG_EMU_ASAN
  __sanitizer_start_switch_fiber(&from.asan_fake_stack, to.stack.base, to.stack.size);
#endif
#if HG_EMU_UCONTEXT
  swapcontext(&from.uc, &to.uc);
#else
  hg_emu_switch_context(&from.sp, to.sp);
#endif
#if HG_EMU_ASAN
  __sanitizer_finish_switch_fiber(from.asan_fake_stack, nullptr, nullptr);
#endif
}

void exit_to(Context& from, Context& to) {
#if HG_EMU_ASAN
  // A null fake-stack slot tells ASan this fiber is finished (its fake frames are released).
  __sanitizer_start_switch_fiber(nullptr, to.stack.base, to.stack.size);
#endif
#if HG_EMU_UCONTEXT
  (void)from;
  setcontext(&to.uc);
#else
  hg_emu_switch_context(&from.sp, to.sp);
#endif
  __builtin_unreachable();
}

void on_fiber_start(Context& self) {
#if HG_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  (void)self;
}

}  // namespace hg::emu::detail
