// The MPI transport in a build without MPI (HALFGRAD_MPI=OFF, or AUTO without libopenmpi-dev).
#include "dist/transport.h"
#include "kernels/error.h"

namespace hg::dist {

bool mpi_available() { return false; }

std::shared_ptr<HostTransport> make_mpi_transport(const ProcessInfo&) {
  HG_FAIL("[dist] this build has no MPI (install libopenmpi-dev and configure with -DHALFGRAD_MPI=ON)");
}

}  // namespace hg::dist
