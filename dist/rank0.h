#pragma once
// on_rank0(comm, what, fn): runs fn on rank 0 only and makes its failure every rank's. Without it a
// rank-0 step that throws (a file it cannot write, a directory it cannot list) would leave the other
// ranks waiting at their next collective until the timeout. Collective over comm's ranks; with comm
// null (one process) it is just fn(). The other ranks' hg::Error names `what` and points at rank 0's.
#include <cstdint>
#include <exception>
#include <string>

#include "dist/communicator.h"

namespace hg::dist {

template <class Fn>
void on_rank0(Communicator* comm, const std::string& what, Fn&& fn) {
  if (!comm) return fn();
  int64_t failed = 0;
  std::string message;
  if (comm->rank() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      failed = 1;
      message = e.what();
    }
  }
  comm->broadcast(&failed, 1, DType::i64, 0).wait();
  if (comm->rank() == 0 && failed) throw Error(message);
  HG_CHECK(!failed, "rank 0 failed to ", what, " (its error says why)");
}

}  // namespace hg::dist
