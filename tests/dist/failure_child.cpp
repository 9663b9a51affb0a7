// A small multi-process program that fails on purpose, for tests/dist/check_failure.sh:
//   stall   the last rank stops calling collectives for a while: the others must give up after the
//           communicator's timeout with an error that says so, and exit 1;
//   kill    rank 1 kills itself (SIGKILL) mid-run: the others must stop (exit non-zero) instead of
//           waiting forever.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "dist/communicator.h"

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "stall") != 0 && std::strcmp(mode, "kill") != 0) {
    std::fprintf(stderr, "usage: %s stall|kill\n", argv[0]);
    return 2;
  }
  int rank = -1;
  try {
    hg::dist::Communicator comm;
    rank = comm.rank();
    std::vector<float> data(1000, 1.0f);
    comm.all_reduce(data.data(), int64_t(data.size()), hg::DType::f32, hg::dist::ReduceOp::sum).wait();
    if (std::strcmp(mode, "kill") == 0 && rank == 1) std::raise(SIGKILL);
    if (std::strcmp(mode, "stall") == 0 && rank == comm.world_size() - 1)
      std::this_thread::sleep_for(comm.timeout() * 3);
    for (int step = 0; step < 3; ++step)
      comm.all_reduce(data.data(), int64_t(data.size()), hg::DType::f32, hg::dist::ReduceOp::sum).wait();
    std::printf("rank %d: finished without noticing the failure\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    return 1;
  }
}
