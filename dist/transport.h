#pragma once
// The backends under dist::Communicator (dist/communicator.h), each a blocking transport. Which ones
// exist is decided by CMake: a backend whose library is absent is replaced by a stub translation unit
// (no_mpi.cpp, no_nccl.cpp) whose factory says why it is unavailable.
//
//   HostTransport    moves host memory: MPI (mpi_transport.cpp), TCP (tcp_transport.cpp), or nothing at
//                    world size 1 (local_transport.cpp). Called from the communicator's one
//                    communication thread, never concurrently for one transport object.
//                    Reductions arrive here only as sum or max on f32/f64/i32/i64: the communicator
//                    widens halves to f32 and turns avg into sum followed by a division.
//   DeviceTransport  moves CUDA device memory with NCCL (nccl_transport.cpp; in the emulated build the
//                    same file over the emulated NCCL, dist/emu/nccl.cpp), asynchronously on its own
//                    stream; returns Work whose completion is a CUDA event.
//
// STREAM ORDERING RULE (DeviceTransport)
//   - A collective's inputs, and the last readers of its output buffer's previous contents, are
//     compute-stream work enqueued before the call. The communication stream waits for an event
//     recorded on the compute stream at the call, and for nothing enqueued later: compute keeps
//     running while the collective is in flight.
//   - Whoever consumes the result makes its stream wait for the collective's event: Work::block(stream)
//     (a device-side wait, no host wait). Work::wait() is for the host reading the result.
//   - Memory: a buffer the collective reads or writes must not be reused before it completed. A
//     caching-allocator block freed while a collective may still use it must be marked with
//     record_stream(ptr, device, transport.stream()) first (Communicator::record_stream), so the
//     allocator hands it out again only after the communication stream passed that point. Blocks the
//     transport itself takes (the fp32 workspace of half reductions) belong to the communication stream.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/bootstrap.h"
#include "dist/communicator.h"

namespace hg::dist {

class HostTransport {
 public:
  virtual ~HostTransport() = default;
  virtual std::string name() const = 0;
  virtual void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                              ReduceOp op) = 0;
  virtual void all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype) = 0;
  virtual void broadcast(void* data, size_t nbytes, int root) = 0;
  virtual void barrier() = 0;
  // After a failed collective: called when the communicator is destroyed and again at process exit.
  // By the second call at the latest, end the whole job (every rank) instead of hanging in a
  // finalisation that waits for peers. The default does nothing.
  virtual void abort_job() noexcept {}
};

class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;
  virtual std::string name() const = 0;
  virtual Work all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual Work reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                              ReduceOp op) = 0;
  virtual Work all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype) = 0;
  virtual Work broadcast(void* data, int64_t count, DType dtype, int root) = 0;
  // The communication stream (a cudaStream_t).
  virtual void* stream() const = 0;
  // Whether the transport was aborted (a timeout, an asynchronous error): every later call throws.
  virtual bool broken() const { return false; }
  // Called before destruction when the host side is broken (a peer is gone): the transport must then
  // end without waiting for its peers (NCCL: ncclCommAbort, not ncclCommDestroy).
  virtual void abandon() noexcept {}
};

// World size 1: every collective is a copy (or nothing).
std::shared_ptr<HostTransport> make_local_transport();
// MPI over a duplicate of MPI_COMM_WORLD (initialises MPI once per process). Stub: throws.
std::shared_ptr<HostTransport> make_mpi_transport(const ProcessInfo& process);
bool mpi_available();
// The TCP star through rank 0 at MASTER_ADDR:MASTER_PORT, one per process (later calls return it).
std::shared_ptr<HostTransport> make_tcp_transport(const ProcessInfo& process, std::chrono::milliseconds timeout);
// NCCL on CUDA device `device` (the local rank; on the emulated device, its one device); the unique id
// travels over `bootstrap` (MPI or TCP). Halves are reduced in fp32 unless reduce_halves_in_fp32 is
// false. Stub: returns nullptr (nccl_unavailable_reason() says why).
std::unique_ptr<DeviceTransport> make_nccl_transport(const ProcessInfo& process, int device, HostTransport& bootstrap,
                                                     std::chrono::milliseconds timeout, bool reduce_halves_in_fp32);
std::string nccl_unavailable_reason();

namespace detail {

// The state behind a Work.
class WorkState {
 public:
  virtual ~WorkState() = default;
  virtual void wait() = 0;
  virtual bool completed() = 0;
  virtual void block(void* cuda_stream) { wait(); }
};

}  // namespace detail
}  // namespace hg::dist
