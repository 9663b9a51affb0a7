#pragma once
// The world of a multi-process test (tests/CMakeLists.txt halfgrad_dist_test: one process, mpirun -np
// 2 and 4, or RANK/WORLD_SIZE over TCP): the launcher's communicator, made on first use by every rank
// (a 60 s timeout, so that a test that loses a rank fails instead of hanging), and the CUDA device a
// rank uses (the emulator has one device, which every rank may share: its memory is host memory).
#include <chrono>

#include "dist/communicator.h"
#include "engine/cuda/cuda_context.h"

namespace hg::test {

inline dist::Communicator& comm() {
  static dist::Communicator instance(dist::CommunicatorOptions().timeout(std::chrono::seconds(60)));
  return instance;
}

inline Device rank_cuda_device() {
  return Device::cuda(cuda::is_emulated() ? comm().local_rank() % cuda::device_count() : comm().local_rank());
}

}  // namespace hg::test
