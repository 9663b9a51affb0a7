#pragma once
// bench_kernels --audit: the kernel audit's report and gate (docs/kernel_audit.md, "The audit report and
// the gate"). Only in the emulated builds; it records only in the audit flavour (kernels/emu/audit.h).
#include <cstdint>

namespace hg::bench {

struct AuditOptions {
  int64_t rows = 256, cols = 1024;  // the audited size: 262,144 elements per flat op, [256, 1024] per row op
  bool gate = false;                // exit status 1 when the gate finds a violation
  bool gpt_step = true;             // also audit a GPT training step
  const char* only = nullptr;       // audit only the cases whose name contains this
  // The L2 the cases are audited with (kernels/emu/audit.h's model); 0: the H200's 50 MiB scaled by the
  // audited elements over the timed ones (16384 x 4096), so that the audit is a scale model of the size
  // bench_kernels times on a GPU: a kernel that streams its input twice pays for it as it would there.
  int64_t l2_bytes = 0;
  // The nvcc build's ptxas report (build/kernel_resources.txt): joins each kernel's registers, static
  // shared memory, spills and theoretical occupancy at its launch configuration; a spill is a violation.
  const char* resources = nullptr;
};


// Prints one JSON line per (kernel case, dtype), then one for the GPT step, then the gate's summary;
// returns the exit status (1: --gate and a violation; 2: not the audit build).
int run_audit(const AuditOptions& options);

}  // namespace hg::bench
