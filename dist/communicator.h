#pragma once
// Communicator: the collectives of data-parallel training across processes ("ranks"), one process per
// device. Every collective is asynchronous: it is queued on the communicator's communication stream
// and returns a Work, a completion event the caller waits on (or polls) when it needs the result.
//
//   all_reduce(x, op)             every rank ends with op over the ranks of x (sum, avg = sum / N, max)
//   reduce_scatter(s, r, counts)  rank k receives the sum (or avg/max) over ranks of its slice of s:
//                                 counts[k] elements at offset counts[0] + ... + counts[k-1]
//   all_gather(s, r, counts)      r = the concatenation over ranks k of their s (counts[k] elements)
//   broadcast(x, root)            every rank ends with root's x
//   barrier()                     completes when every rank has reached it
//
// Counts may differ between ranks (and be 0), so buffers whose size the world size does not divide
// need no padding; shard_of() gives the usual balanced split. Buffers are f32, f16 or bf16 (f64, i32
// and i64 too, except that reductions of integers other than sum/max are rejected). Half reductions
// are accumulated in fp32 (the fp32-accumulation rule), then rounded once: always by the host
// transports; by NCCL unless CommunicatorOptions::reduce_halves_in_fp32(false) (then NCCL reduces
// the halves themselves: half the bytes on the wire, a rounding to the half type at every addition).
//
// Backends (chosen per call by where the buffer lives; see dist/transport.h):
//   - CUDA buffers on a real GPU: NCCL, on a communication stream that waits for an event recorded on
//     the device's compute stream at the call (the stream ordering rule of dist/transport.h);
//     Work::block(stream) orders later compute after the collective without a host wait.
//   - CPU buffers, and CUDA buffers of the emulated device (host memory): a host transport — MPI under
//     mpirun, a TCP star through rank 0 under the RANK/WORLD_SIZE environment, or nothing at world
//     size 1 — run by one communication thread per communicator, in the order the calls were made.
//   - In the emulated build with MPI, HALFGRAD_EMULATED_NCCL=1 sends the emulated device's buffers
//     through the NCCL transport instead, over the emulated NCCL (dist/emu/nccl.cpp; mpirun only), so
//     that nccl_transport.cpp runs in CI.
//
// CONVENTION
//   - Every rank makes the same collective calls in the same order (as with MPI and NCCL).
//   - A buffer must stay alive and untouched until its Work completed.
//   - Failures surface as hg::Error from Work::wait(): a collective that has not completed within the
//     timeout (a rank that hangs), a peer that died (TCP: its connection closed; mpirun itself stops
//     the job when a rank is killed), an NCCL asynchronous error. After a failure the communicator is
//     broken: later calls throw at once, and at exit it aborts the job rather than hang.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/bootstrap.h"
#include "engine/device.h"
#include "engine/tensor.h"
#include "kernels/dtype.h"
#include "kernels/options.h"

namespace hg::dist {

enum class ReduceOp : uint8_t { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

// A contiguous slice [offset, offset + count) of a buffer.
struct Shard {
  int64_t offset = 0;
  int64_t count = 0;
};
// The balanced split of n elements over world ranks: the first n % world ranks get one more.
Shard shard_of(int64_t n, int rank, int world);
std::vector<int64_t> shard_counts(int64_t n, int world);

namespace detail {
class WorkState;
}

// The completion event of one queued collective.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  // Blocks until the collective completed; throws hg::Error if it failed or timed out.
  void wait();
  // Non-blocking: whether it completed (successfully or not).
  bool completed() const;
  // Makes CUDA `stream` wait for the collective without blocking the host (NCCL work); for host
  // work it is wait().
  void block(void* cuda_stream);
  bool defined() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

// CommunicatorOptions().timeout(std::chrono::seconds(60)).this_process_only(true)
struct CommunicatorOptions {
  // How long a collective may take before Work::wait() gives up. Default (0): $HALFGRAD_DIST_TIMEOUT
  // seconds when set, otherwise 300 s.
  HG_OPTION(CommunicatorOptions, std::chrono::milliseconds, timeout, std::chrono::milliseconds(0));
  // A communicator of this process alone (world size 1), whatever the launcher says: e.g. to resume a
  // sharded checkpoint in one process, or to compare against single-process training.
  HG_OPTION(CommunicatorOptions, bool, this_process_only, false);
  // NCCL: reduce f16/bf16 buffers in fp32 (up-cast into an fp32 workspace, reduce, down-cast), as
  // the host transports always do. false reduces the halves themselves: half the communication
  // volume, but every addition rounds to the half type (bf16 keeps 8 bits: a sum over many ranks
  // loses small gradients).
  HG_OPTION(CommunicatorOptions, bool, reduce_halves_in_fp32, true);
};

class HostTransport;
class DeviceTransport;

class Communicator {
 public:
  // The process group this process was launched into (dist/bootstrap.h reads the environment):
  // mpirun (OMPI_COMM_WORLD_*), torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or a single
  // process. Collective across ranks: every rank constructs one, in the same order.
  explicit Communicator(CommunicatorOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int local_rank() const { return local_rank_; }
  // "mpi", "tcp" or "single" (+ "+nccl" once CUDA buffers went through NCCL, which starts at the
  // first collective on a CUDA buffer).
  std::string backend() const;
  std::chrono::milliseconds timeout() const { return timeout_; }

  // ---- raw buffers (contiguous, `count` elements of `dtype` on `device`) ----
  Work all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Device device = kCPU);
  Work reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype, ReduceOp op,
                      Device device = kCPU);
  Work all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype, Device device = kCPU);
  Work broadcast(void* data, int64_t count, DType dtype, int root, Device device = kCPU);
  Work barrier();

  // ---- tensors (contiguous; in place where the collective allows) ----
  Work all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum);
  // recv gets this rank's shard_of(send.numel()) of the reduction.
  Work reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op = ReduceOp::sum);
  // recv (numel = sum of every rank's send.numel(), split as shard_of) gets the concatenation.
  Work all_gather(const Tensor& send, const Tensor& recv);
  Work broadcast(const Tensor& t, int root);

  // Marks the caching-allocator block that starts at `base` (a device allocation of `device`) as used
  // by the collectives enqueued so far, so that freeing it does not hand it out again before they
  // completed (CudaCachingAllocator::record_stream on the communication stream). Nothing to do for
  // host transports, whose Work::block waits on the host.
  void record_stream(void* base, Device device);

  // Whether a collective has failed or the device transport (NCCL) was aborted (then every later call
  // throws).
  bool broken() const;
  // Whether this build has NCCL (CUDA buffers of a real GPU need it).
  static bool nccl_available();

 private:
  void check_counts(const char* op, const std::vector<int64_t>& counts) const;
  bool use_device_transport(const Device& device);
  Work enqueue_host(const char* op, const Device& device, std::function<void(HostTransport&)> run);

  int rank_ = 0;
  int world_ = 1;
  int local_rank_ = 0;
  ProcessInfo process_;
  std::chrono::milliseconds timeout_;
  bool reduce_halves_in_fp32_ = true;
  HostTransport* host_ = nullptr;  // owned through host_shared_ (the TCP transport is per process)
  std::unique_ptr<DeviceTransport> device_;
  struct Stream;
  std::unique_ptr<Stream> stream_;
  std::shared_ptr<HostTransport> host_shared_;
};

}  // namespace hg::dist
