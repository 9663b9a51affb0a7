// Reads the launcher's environment (dist/bootstrap.h).
#include "dist/bootstrap.h"

#include <cstdlib>
#include <string>

#include "kernels/error.h"

namespace hg::dist {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

int env_int(const char* name, int fallback, int min_value) {
  const char* value = env(name);
  if (!value) return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  HG_CHECK(end && *end == '\0' && parsed >= min_value && parsed <= (1 << 30), "[dist] environment variable ", name,
           "='", value, "' is not an integer >= ", min_value);
  return int(parsed);
}

}  // namespace

const char* launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::single: return "single process";
    case Launcher::mpirun: return "mpirun";
    case Launcher::env: return "RANK/WORLD_SIZE environment";
  }
  return "?";
}

ProcessInfo detect_process() {
  ProcessInfo p;
  if (env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE")) {
    const bool ompi = env("OMPI_COMM_WORLD_SIZE") != nullptr;
    p.launcher = Launcher::mpirun;
    p.world_size = env_int(ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE", 1, 1);
    p.rank = env_int(ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK", 0, 0);
    p.local_rank = env_int(ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "MPI_LOCALRANKID", 0, 0);
  } else if (env("WORLD_SIZE")) {
    p.launcher = Launcher::env;
    p.world_size = env_int("WORLD_SIZE", 1, 1);
    HG_CHECK(env("RANK"), "[dist] WORLD_SIZE=", p.world_size, " is set but RANK is not: set RANK to 0..",
             p.world_size - 1, " in each process");
    p.rank = env_int("RANK", 0, 0);
    p.local_rank = env_int("LOCAL_RANK", p.rank, 0);
    if (p.world_size > 1) {
      HG_CHECK(env("MASTER_ADDR") && env("MASTER_PORT"), "[dist] WORLD_SIZE=", p.world_size,
               " needs MASTER_ADDR and MASTER_PORT (where rank 0 listens for the rendezvous)");
      p.master_addr = env("MASTER_ADDR");
      p.master_port = env_int("MASTER_PORT", 0, 1);
      HG_CHECK(p.master_port <= 65535, "[dist] MASTER_PORT=", p.master_port, " is not a TCP port (1..65535)");
    }
  }
  HG_CHECK(p.rank < p.world_size, "[dist] rank ", p.rank, " is out of range for world size ", p.world_size,
           " (launcher: ", launcher_name(p.launcher), ")");
  return p;
}

}  // namespace hg::dist
