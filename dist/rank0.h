#pragma once
// on_rank0(comm, what, fn): runs fn on rank 0 only and makes its failure every rank's. Without it a
// rank-0 step that throws (a file it cannot write, a directory it cannot list) would leave the other
// ranks waiting at their next collective until the timeout. Collective over comm's ranks; with comm
// null (one process) it is just fn(). The other ranks' hg::Error names `what` and carries rank 0's text
// (so that every rank can tell what kind of failure it was).
//
// throw_if_any_failed(comm, error): the same for a step every rank makes (each writes its own file):
// every rank passes its error ("" when it succeeded); when any failed, every rank throws hg::Error
// with the lowest failing rank's message (on the other ranks prefixed "rank r: "), so that all ranks
// leave together instead of the healthy ones waiting at the next collective.
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace hg::dist {

namespace detail {
// `text` (of `length` bytes, known on every rank) from `root` to every rank, 8 bytes per element.
inline std::string receive_text(Communicator* comm, int root, const std::string& text, int64_t length) {
  if (length == 0) return "";
  std::vector<int64_t> words(size_t((length + 7) / 8), 0);
  if (comm->rank() == root) std::memcpy(words.data(), text.data(), text.size());
  comm->broadcast(words.data(), int64_t(words.size()), DType::i64, root).wait();
  std::string received(size_t(length), '\0');
  std::memcpy(received.data(), words.data(), size_t(length));
  return received;
}
}  // namespace detail

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
  if (!failed) return;
  int64_t length = comm->rank() == 0 ? int64_t(message.size()) : 0;
  comm->broadcast(&length, 1, DType::i64, 0).wait();
  const std::string text = detail::receive_text(comm, 0, message, length);  // every rank takes part
  if (comm->rank() == 0) throw Error(message);
  throw Error("rank 0 failed to " + what + ": " + text);
}

inline void throw_if_any_failed(Communicator* comm, const std::string& error) {
  if (!comm) {
    if (!error.empty()) throw Error(error);
    return;
  }
  const int world = comm->world_size();
  // The lowest failing rank r as the largest world - r (0: none failed).
  int64_t key = error.empty() ? 0 : int64_t(world - comm->rank());
  comm->all_reduce(&key, 1, DType::i64, ReduceOp::max).wait();
  if (key == 0) return;
  const int root = int(world - key);
  int64_t length = comm->rank() == root ? int64_t(error.size()) : 0;
  comm->broadcast(&length, 1, DType::i64, root).wait();
  const std::string text = detail::receive_text(comm, root, error, length);
  if (comm->rank() == root) throw Error(text);
  throw Error("rank " + std::to_string(root) + ": " + text);
}

}  // namespace hg::dist
