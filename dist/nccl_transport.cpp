// The NCCL device transport: collectives on CUDA device memory, asynchronous on a communication stream.
//
// Setup: rank 0 creates the NCCL unique id and the host transport (MPI under mpirun, the TCP star
// otherwise) broadcasts it; every rank then calls ncclCommInitRank on CUDA device local_rank, with
// the communicator non-blocking so that initialisation and collectives can be abandoned.
// Each collective: the communication stream waits for the device's compute stream (the data is
// produced there), the NCCL call is enqueued, and an event recorded after it is the Work. Waiting
// polls the event and ncclCommGetAsyncError; a timeout or an asynchronous error aborts the NCCL
// communicator (ncclCommAbort) and throws, instead of hanging the process.
// Uneven reduce_scatter / all_gather (counts that differ by rank) are grouped ncclReduce /
// ncclBroadcast calls, one per rank, as PyTorch does for uneven shards.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <thread>

#include "dist/transport.h"
#include "engine/cuda/cuda_context.h"
#include "kernels/error.h"

namespace hg::dist {
namespace {

using Clock = std::chrono::steady_clock;

#define HG_NCCL_CHECK(call)                                                                          \
  do {                                                                                               \
    const ncclResult_t nccl_status_ = (call);                                                        \
    HG_CHECK(nccl_status_ == ncclSuccess || nccl_status_ == ncclInProgress, "[dist] ", #call,        \
             " failed: ", ncclGetErrorString(nccl_status_));                                         \
  } while (0)

#define HG_CUDA_RT_CHECK(call)                                                                       \
  do {                                                                                               \
    const cudaError_t cuda_status_ = (call);                                                         \
    HG_CHECK(cuda_status_ == cudaSuccess, "[dist] ", #call, " failed: ", cudaGetErrorString(cuda_status_)); \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

// Waits for a non-blocking NCCL call (init, group end) to leave ncclInProgress, with a deadline.
void wait_nccl_ready(ncclComm_t comm, Clock::time_point deadline, const char* what) {
  for (;;) {
    ncclResult_t state = ncclSuccess;
    HG_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      ncclCommAbort(comm);
      HG_FAIL("[dist] NCCL ", what, " failed: ", ncclGetErrorString(state));
    }
    if (Clock::now() > deadline) {
      ncclCommAbort(comm);
      HG_FAIL("[dist] NCCL ", what, " did not complete in time (another rank died or hangs)");
    }
    std::this_thread::yield();
  }
}

class NcclTransport;

class NcclWork final : public detail::WorkState {
 public:
  NcclWork(std::string what, ncclComm_t comm, std::chrono::milliseconds timeout)
      : what_(std::move(what)), comm_(comm), timeout_(timeout) {}
  ~NcclWork() override { cudaEventDestroy(event_); }
  cudaEvent_t& event() { return event_; }

  void wait() override {
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      if (completed()) return;
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        ncclCommAbort(comm_);
        HG_FAIL("[dist] NCCL ", what_, " failed asynchronously: ", ncclGetErrorString(state));
      }
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_);
        HG_FAIL("[dist] NCCL ", what_, " did not complete within ", timeout_.count() / 1000.0,
                " s: another rank has died or hangs (set HALFGRAD_DIST_TIMEOUT to allow longer)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  bool completed() override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    HG_CUDA_RT_CHECK(status);
    return true;
  }
  void block(void* cuda_stream) override {
    HG_CUDA_RT_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda_stream), event_, 0));
  }

 private:
  std::string what_;
  ncclComm_t comm_;
  std::chrono::milliseconds timeout_;
  cudaEvent_t event_ = nullptr;
};

class NcclTransport final : public DeviceTransport {
 public:
  NcclTransport(const ProcessInfo& process, HostTransport& bootstrap, std::chrono::milliseconds timeout)
      : device_(process.local_rank), rank_(process.rank), world_(process.world_size), timeout_(timeout) {
    ncclUniqueId id{};
    if (rank_ == 0) HG_NCCL_CHECK(ncclGetUniqueId(&id));
    bootstrap.broadcast(&id, sizeof id, 0);
    HG_CUDA_RT_CHECK(cudaSetDevice(device_));
    HG_CUDA_RT_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    HG_NCCL_CHECK(ncclCommInitRankConfig(&comm_, world_, id, rank_, &config));
    wait_nccl_ready(comm_, Clock::now() + timeout_, "communicator initialisation");
  }
  ~NcclTransport() override {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "nccl"; }

  Work all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    return enqueue("all_reduce", [&] {
      HG_NCCL_CHECK(ncclAllReduce(data, data, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream_));
    });
  }

  Work reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      ReduceOp op) override {
    const size_t element = dtype_size(dtype);
    const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    return enqueue("reduce_scatter", [&] {
      if (even) {
        HG_NCCL_CHECK(
            ncclReduceScatter(send, recv, size_t(counts[0]), nccl_type(dtype), nccl_op(op), comm_, stream_));
        return;
      }
      HG_NCCL_CHECK(ncclGroupStart());
      int64_t offset = 0;
      for (int r = 0; r < world_; ++r) {
        const void* slice = static_cast<const char*>(send) + size_t(offset) * element;
        HG_NCCL_CHECK(ncclReduce(slice, r == rank_ ? recv : nullptr, size_t(counts[size_t(r)]), nccl_type(dtype),
                                 nccl_op(op), r, comm_, stream_));
        offset += counts[size_t(r)];
      }
      HG_NCCL_CHECK(ncclGroupEnd());
    });
  }

  Work all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype) override {
    const size_t element = dtype_size(dtype);
    const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    return enqueue("all_gather", [&] {
      if (even) {
        HG_NCCL_CHECK(ncclAllGather(send, recv, size_t(counts[0]), nccl_type(dtype), comm_, stream_));
        return;
      }
      HG_NCCL_CHECK(ncclGroupStart());
      int64_t offset = 0;
      for (int r = 0; r < world_; ++r) {
        void* slot = static_cast<char*>(recv) + size_t(offset) * element;
        HG_NCCL_CHECK(ncclBroadcast(r == rank_ ? send : slot, slot, size_t(counts[size_t(r)]), nccl_type(dtype), r,
                                    comm_, stream_));
        offset += counts[size_t(r)];
      }
      HG_NCCL_CHECK(ncclGroupEnd());
    });
  }

  Work broadcast(void* data, int64_t count, DType dtype, int root) override {
    return enqueue("broadcast", [&] {
      HG_NCCL_CHECK(ncclBroadcast(data, data, size_t(count), nccl_type(dtype), root, comm_, stream_));
    });
  }

 private:
  template <class Call>
  Work enqueue(const char* op, Call call) {
    HG_CUDA_RT_CHECK(cudaSetDevice(device_));
    // The data is produced on the device's compute stream: order the collective after it.
    cudaEvent_t ready = nullptr;
    HG_CUDA_RT_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    HG_CUDA_RT_CHECK(cudaEventRecord(ready, static_cast<cudaStream_t>(cuda::compute_stream(device_))));
    HG_CUDA_RT_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    call();
    wait_nccl_ready(comm_, Clock::now() + timeout_, op);
    auto work = std::make_shared<NcclWork>(
        hg::detail::concat(op, " (collective #", ++sequence_, " on rank ", rank_, " of ", world_, ", nccl)"), comm_,
        timeout_);
    HG_CUDA_RT_CHECK(cudaEventCreateWithFlags(&work->event(), cudaEventDisableTiming));
    HG_CUDA_RT_CHECK(cudaEventRecord(work->event(), stream_));
    return Work(work);
  }

  int device_;
  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  uint64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<DeviceTransport> make_nccl_transport(const ProcessInfo& process, HostTransport& bootstrap,
                                                     std::chrono::milliseconds timeout) {
  return std::make_unique<NcclTransport>(process, bootstrap, timeout);
}

std::string nccl_unavailable_reason() { return ""; }

}  // namespace hg::dist
