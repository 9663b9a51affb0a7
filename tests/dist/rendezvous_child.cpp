// One rank of an env-launched job for tests/dist/check_rendezvous.sh: joins the TCP transport's
// rendezvous (dist/rendezvous.h), all-reduces rank + 1 over 1,000 floats, and prints
// "rank R of W: sum S". Exit 0; 2 when the rendezvous refused it (a RendezvousRefused, its message on
// stderr); 1 on any other error.
#include <cstdio>
#include <vector>

#include "dist/communicator.h"
#include "dist/job_secret.h"

int main() {
  try {
    hg::dist::Communicator comm;
    std::vector<float> data(1000, float(comm.rank() + 1));
    comm.all_reduce(data.data(), int64_t(data.size()), hg::DType::f32, hg::dist::ReduceOp::sum).wait();
    std::printf("rank %d of %d: sum %g\n", comm.rank(), comm.world_size(), double(data[999]));
    return 0;
  } catch (const hg::dist::RendezvousRefused& e) {
    std::fprintf(stderr, "refused: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
