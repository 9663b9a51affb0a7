// The TCP host transport: what RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT processes (torchrun-style,
// no MPI) use for CPU buffers and for the NCCL unique id.
//
// A star through rank 0. Rank 0 admits one connection from every other rank (the rendezvous,
// dist/rendezvous.h: its own interface only, a handshake per connection, the job secret). A collective
// is: every other rank sends rank 0 a header (op, sequence number, bytes) and its data; rank 0 checks that all ranks
// called the same collective, combines the data in rank order (so the result is deterministic and the
// same bits on every rank), and sends each rank its result. Traffic at rank 0 is O(world x bytes):
// fine for the CPU training this serves (a few ranks on one machine), not a replacement for NCCL.
//
// Failures: every socket wait has the collective's deadline (the communicator's timeout); a peer
// whose connection closes (the process died) is reported by rank; a mismatched call is reported with
// both calls; after a failure the sockets are closed, so every other rank sees the failure at once.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "dist/rendezvous.h"
#include "dist/socket.h"
#include "dist/transport.h"
#include "kernels/error.h"

namespace hg::dist {
namespace {

using Clock = SocketClock;

constexpr uint32_t kMagic = 0x48474454;  // "HGDT"

enum class TcpOp : uint32_t { all_reduce = 2, reduce_scatter, all_gather, broadcast, barrier };

const char* tcp_op_name(uint32_t op) {
  switch (TcpOp(op)) {
    case TcpOp::all_reduce:
      return "all_reduce";
    case TcpOp::reduce_scatter:
      return "reduce_scatter";
    case TcpOp::all_gather:
      return "all_gather";
    case TcpOp::broadcast:
      return "broadcast";
    case TcpOp::barrier:
      return "barrier";
  }
  return "?";
}

struct Header {
  uint32_t magic = kMagic;
  uint32_t op = 0;
  uint64_t sequence = 0;
  uint64_t nbytes = 0;  // what this rank sends after the header
  uint64_t detail = 0;  // broadcast: root; reductions: dtype and op
};

// memmove that accepts empty ranges with null pointers (an empty std::vector's data()).
void copy_bytes(void* dst, const void* src, size_t nbytes) {
  if (nbytes > 0) std::memmove(dst, src, nbytes);
}

template <class T>
void reduce_into(T* acc, const T* x, int64_t n, ReduceOp op) {
  if (op == ReduceOp::max) {
    for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
  }
}

void reduce_into(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return reduce_into(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
    case DType::f64:
      return reduce_into(static_cast<double*>(acc), static_cast<const double*>(x), n, op);
    case DType::i32:
      return reduce_into(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
    case DType::i64:
      return reduce_into(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
    default:
      HG_FAIL("[dist] tcp: cannot reduce ", dtype_name(dtype), " (halves are widened to f32 first)");
  }
}

class TcpTransport final : public HostTransport {
 public:
  TcpTransport(const ProcessInfo& process, std::chrono::milliseconds timeout)
      : rank_(process.rank), world_(process.world_size), timeout_(timeout) {
    const auto deadline = Clock::now() + timeout_;
    const RendezvousOptions options = rendezvous_options(process);
    if (rank_ == 0) {
      peers_ = admit_ranks(options, world_, deadline);
    } else {
      peers_.push_back(join_rendezvous(options, rank_, world_, deadline));
    }
  }

  std::string name() const override { return "tcp"; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    const size_t nbytes = size_t(count) * dtype_size(dtype);
    const uint64_t detail = uint64_t(dtype) << 8 | uint64_t(op);
    run(
        TcpOp::all_reduce, detail, data, nbytes,
        [&](std::vector<std::vector<char>>& from, auto deadline) {
          for (int r = 1; r < world_; ++r) reduce_into(data, from[size_t(r)].data(), count, dtype, op);
          for (int r = 1; r < world_; ++r) send_all(peers_[size_t(r)].fd(), data, nbytes, deadline, peer_name(r));
        },
        [&](auto deadline) { recv_all(root().fd(), data, nbytes, deadline, peer_name(0)); });
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      ReduceOp op) override {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    const size_t element = dtype_size(dtype);
    const uint64_t detail = uint64_t(dtype) << 8 | uint64_t(op);
    run(
        TcpOp::reduce_scatter, detail, send, size_t(total) * element,
        [&](std::vector<std::vector<char>>& from, auto deadline) {
          std::vector<char> acc(static_cast<const char*>(send), static_cast<const char*>(send) + total * element);
          for (int r = 1; r < world_; ++r) reduce_into(acc.data(), from[size_t(r)].data(), total, dtype, op);
          int64_t offset = counts[0];
          copy_bytes(recv, acc.data(), size_t(counts[0]) * element);
          for (int r = 1; r < world_; ++r) {
            send_all(peers_[size_t(r)].fd(), acc.data() + offset * element, size_t(counts[size_t(r)]) * element,
                     deadline, peer_name(r));
            offset += counts[size_t(r)];
          }
        },
        [&](auto deadline) {
          recv_all(root().fd(), recv, size_t(counts[size_t(rank_)]) * element, deadline, peer_name(0));
        });
  }

  void all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype) override {
    const size_t element = dtype_size(dtype);
    int64_t total = 0;
    std::vector<int64_t> offsets(counts.size());
    for (size_t r = 0; r < counts.size(); ++r) {
      offsets[r] = total;
      total += counts[r];
    }
    run(
        TcpOp::all_gather, uint64_t(dtype), send, size_t(counts[size_t(rank_)]) * element,
        [&](std::vector<std::vector<char>>& from, auto deadline) {
          char* out = static_cast<char*>(recv);
          copy_bytes(out, send, size_t(counts[0]) * element);
          for (int r = 1; r < world_; ++r)
            copy_bytes(out + offsets[size_t(r)] * element, from[size_t(r)].data(), from[size_t(r)].size());
          for (int r = 1; r < world_; ++r)
            send_all(peers_[size_t(r)].fd(), out, size_t(total) * element, deadline, peer_name(r));
        },
        [&](auto deadline) {
          // recv may contain send (in place): the root's reply overwrites it with the same bits.
          recv_all(root().fd(), recv, size_t(total) * element, deadline, peer_name(0));
        });
  }

  void broadcast(void* data, size_t nbytes, int root_rank) override {
    run(
        TcpOp::broadcast, uint64_t(root_rank), data, rank_ == root_rank ? nbytes : 0,
        [&](std::vector<std::vector<char>>& from, auto deadline) {
          if (root_rank != 0) copy_bytes(data, from[size_t(root_rank)].data(), nbytes);
          for (int r = 1; r < world_; ++r)
            if (r != root_rank) send_all(peers_[size_t(r)].fd(), data, nbytes, deadline, peer_name(r));
        },
        [&](auto deadline) {
          if (rank_ != root_rank) recv_all(root().fd(), data, nbytes, deadline, peer_name(0));
        });
  }

  void barrier() override {
    char token = 0;
    run(
        TcpOp::barrier, 0, &token, 0,
        [&](std::vector<std::vector<char>>&, auto deadline) {
          for (int r = 1; r < world_; ++r) send_all(peers_[size_t(r)].fd(), &token, 1, deadline, peer_name(r));
        },
        [&](auto deadline) { recv_all(root().fd(), &token, 1, deadline, peer_name(0)); });
  }

  void abort_job() noexcept override {
    // Closing the connections makes every peer's pending or next collective fail at once.
    for (Socket& s : peers_) ::shutdown(s.fd(), SHUT_RDWR);
  }

 private:
  std::string peer_name(int r) const { return "rank " + std::to_string(r) + " of " + std::to_string(world_); }
  Socket& root() { return peers_[0]; }

  // One collective: the header + payload exchange, with `at_root` combining at rank 0 and `at_leaf`
  // receiving the result elsewhere. Any failure closes the connections (see abort_job).
  template <class AtRoot, class AtLeaf>
  void run(TcpOp op, uint64_t detail, const void* payload, size_t nbytes, AtRoot at_root, AtLeaf at_leaf) {
    std::lock_guard lock(mutex_);
    // Names the first failure: the collective that failed may belong to a Work nobody waits on any
    // more (an exception unwound past it), and then this is the error the rank reports.
    HG_CHECK(!failed_, "[dist] tcp: an earlier collective failed (", failure_, "); the connections are closed");
    const auto deadline = Clock::now() + timeout_;
    Header mine;
    mine.op = uint32_t(op);
    mine.sequence = ++sequence_;
    mine.nbytes = nbytes;
    mine.detail = detail;
    try {
      if (rank_ == 0) {
        std::vector<std::vector<char>> from(static_cast<size_t>(world_));
        for (int r = 1; r < world_; ++r) {
          Header theirs;
          recv_all(peers_[size_t(r)].fd(), &theirs, sizeof theirs, deadline, peer_name(r));
          check_same(mine, theirs, r, op == TcpOp::broadcast || op == TcpOp::all_gather);
          from[size_t(r)].resize(theirs.nbytes);
          recv_all(peers_[size_t(r)].fd(), from[size_t(r)].data(), theirs.nbytes, deadline, peer_name(r));
        }
        at_root(from, deadline);
      } else {
        send_all(root().fd(), &mine, sizeof mine, deadline, peer_name(0));
        send_all(root().fd(), payload, nbytes, deadline, peer_name(0));
        at_leaf(deadline);
      }
    } catch (const std::exception& e) {
      failed_ = true;
      failure_ = e.what();
      abort_job();
      throw;
    } catch (...) {
      failed_ = true;
      failure_ = "an unknown exception";
      abort_job();
      throw;
    }
  }

  void check_same(const Header& mine, const Header& theirs, int r, bool sizes_may_differ) const {
    HG_CHECK(theirs.magic == kMagic, "[dist] tcp: garbage from ", peer_name(r), " (not a halfgrad peer?)");
    HG_CHECK(theirs.op == mine.op && theirs.sequence == mine.sequence && theirs.detail == mine.detail &&
                 (sizes_may_differ || theirs.nbytes == mine.nbytes),
             "[dist] tcp: mismatched collectives: rank 0 called ", tcp_op_name(mine.op), " #", mine.sequence, " (",
             mine.nbytes, " bytes) but ", peer_name(r), " called ", tcp_op_name(theirs.op), " #", theirs.sequence, " (",
             theirs.nbytes, " bytes); every rank must make the same collective calls in the same order");
  }

  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  std::vector<Socket> peers_;  // rank 0: one per rank (index 0 unused); others: [0] = rank 0
  std::mutex mutex_;
  uint64_t sequence_ = 0;
  bool failed_ = false;
  std::string failure_;  // the first failure's message
};

}  // namespace

std::shared_ptr<HostTransport> make_tcp_transport(const ProcessInfo& process, std::chrono::milliseconds timeout) {
  // One per process: the rendezvous happens once, later communicators share the connections.
  static std::mutex mutex;
  static std::shared_ptr<HostTransport> transport;
  std::lock_guard lock(mutex);
  if (!transport) transport = std::make_shared<TcpTransport>(process, timeout);
  return transport;
}

}  // namespace hg::dist
