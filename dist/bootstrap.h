#pragma once
// Where this process sits in the job, read from the environment its launcher set:
//   mpirun:    OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (Open MPI), or PMI_RANK / PMI_SIZE (MPICH);
//   torchrun:  RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT;
//   nothing:   a single process (rank 0 of 1).
// One process per device: a process drives CUDA device local_rank.
#include <string>

namespace hg::dist {

enum class Launcher { single, mpirun, env };

struct ProcessInfo {
  Launcher launcher = Launcher::single;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;  // env launcher only
  int master_port = 0;
};

// Reads and validates the environment; a malformed or inconsistent variable is an hg::Error naming it.
ProcessInfo detect_process();
const char* launcher_name(Launcher launcher);

}  // namespace hg::dist
