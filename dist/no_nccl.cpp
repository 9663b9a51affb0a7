// The NCCL transport in a build without NCCL (no nvcc build, or NCCL not found): CUDA buffers of a
// real GPU cannot be communicated; CPU and emulated-device buffers still go through the host transport.
#include "dist/transport.h"

namespace hg::dist {

std::unique_ptr<DeviceTransport> make_nccl_transport(const ProcessInfo&, int, HostTransport&, std::chrono::milliseconds,
                                                     bool) {
  return nullptr;
}

std::string nccl_unavailable_reason() {
  return "this build has no NCCL (it is used by the nvcc build when the CUDA toolkit's nccl.h and libnccl are found, "
         "and emulated over MPI by the emulated build when it has MPI)";
}

}  // namespace hg::dist
