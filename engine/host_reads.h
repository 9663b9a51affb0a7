#pragma once
// A debug guard for a step that must not read the device from the host (a capturable step:
// train/trainer.h, TrainerOptions::forbid_host_reads). While a HostReadGuard lives on this thread,
// every read of tensor values by the host -- Tensor::item / to_vector (any device) and a copy of a
// CUDA tensor to the host -- throws an hg::Error naming the read and the guarded region. It checks
// the structure on any device, including the CPU, where no runtime counter could see a read.
#include <string>

#include "kernels/error.h"

namespace hg {

namespace detail {
inline thread_local const char* g_host_reads_forbidden_in = nullptr;
}  // namespace detail

class HostReadGuard {
 public:
  // `region` names what is guarded in the message ("a training step that is not logged").
  explicit HostReadGuard(const char* region) : previous_(detail::g_host_reads_forbidden_in) {
    detail::g_host_reads_forbidden_in = region;
  }
  ~HostReadGuard() { detail::g_host_reads_forbidden_in = previous_; }
  HostReadGuard(const HostReadGuard&) = delete;
  HostReadGuard& operator=(const HostReadGuard&) = delete;

 private:
  const char* previous_;
};

// Called by every host read of tensor values (`what`: "Tensor::item", ...).
inline void note_host_read(const std::string& what) {
  if (const char* region = detail::g_host_reads_forbidden_in)
    throw Error(what + ": a host read of device values inside " + region +
                ", which must not read the device (HostReadGuard)");
}

}  // namespace hg
