// The NCCL device transport: collectives on CUDA device memory, asynchronous on a communication stream.
//
// Setup: rank 0 creates the NCCL unique id and the host transport (MPI under mpirun, the TCP star
// otherwise) broadcasts it; every rank then calls ncclCommInitRank on its CUDA device, with the
// communicator non-blocking so that initialisation and collectives can be abandoned.
// Stream ordering (dist/transport.h states the rule): before each collective the communication
// stream waits for ONE event recorded on the compute stream at the call (after the work that produced
// its inputs); nothing enqueued later delays it. An event recorded after the NCCL calls is the Work:
// Work::block(compute stream) is how the consumer waits, on the device. Events come from a pool (no
// cudaEventCreate per collective).
// Halves (f16/bf16) are reduced in fp32 by default: up-cast into an fp32 workspace taken from the
// caching allocator on the communication stream, reduced, down-cast into the destination, all on that
// stream (so the workspace is reused only by later work of that stream: no record_stream needed).
// CommunicatorOptions::reduce_halves_in_fp32(false) reduces the halves themselves (half the bytes on
// the wire, each addition rounded to the half type).
// Waiting polls the event and ncclCommGetAsyncError; a timeout or an asynchronous error aborts the
// NCCL communicator (ncclCommAbort) and throws, instead of hanging the process. Work the host never
// waits on -- Work::block, a stream wait: ZeRO stage 3's gathers, the offloaded optimizer's gradient
// stream -- is watched by a dist::Watchdog thread with the same timeout: a peer that died would
// otherwise leave the stream waiting forever and the host blocked in its next synchronize. The
// watchdog aborts the communicator (the pending kernels end, the streams drain) and the next
// collective throws its reason. Every abort goes through NcclHealth, once.
// Uneven reduce_scatter / all_gather (counts that differ by rank) are grouped ncclReduce /
// ncclBroadcast calls, one per rank, as PyTorch does for uneven shards.
// Every NCCL collective call counts RuntimeCounter::collective_calls.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <thread>

#include "dist/transport.h"
#include "dist/watchdog.h"
#include "engine/cuda/cuda_context.h"
#include "kernels/cuda/workspace.h"
#include "kernels/error.h"
#include "kernels/kernels.h"
#include "kernels/runtime_counters.h"

namespace hg::dist {
namespace {

using Clock = std::chrono::steady_clock;

#define HG_NCCL_CHECK(call)                                                                          \
  do {                                                                                               \
    const ncclResult_t nccl_status_ = (call);                                                        \
    HG_CHECK(nccl_status_ == ncclSuccess || nccl_status_ == ncclInProgress, "[dist] ", #call,        \
             " failed: ", ncclGetErrorString(nccl_status_));                                         \
  } while (0)

// An NCCL collective call: counted, then checked.
#define HG_NCCL_COLLECTIVE(call)                       \
  do {                                                 \
    count_runtime(RuntimeCounter::collective_calls);   \
    HG_NCCL_CHECK(call);                               \
  } while (0)

#define HG_CUDA_RT_CHECK(call)                                                                       \
  do {                                                                                               \
    const cudaError_t cuda_status_ = (call);                                                         \
    HG_CHECK(cuda_status_ == cudaSuccess, "[dist] ", #call, " failed: ", cudaGetErrorString(cuda_status_)); \
  } while (0)

// NCCL's own text for the communicator's last failure ("" when it has none), appended to our errors.
std::string nccl_last_error(ncclComm_t comm) {
  const char* text = comm ? ncclGetLastError(comm) : nullptr;
  if (text == nullptr || *text == '\0') return "";
  return std::string(" (NCCL: ") + text + ")";
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8:
    case DType::b8: return ncclUint8;  // bool: one byte, 0 or 1
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

// Waits for a non-blocking NCCL call (init, group end) to leave ncclInProgress, with a deadline. On a
// failure `abort(why)` aborts the communicator (by default ncclCommAbort), then it throws `why`.
void wait_nccl_ready(ncclComm_t comm, Clock::time_point deadline, const char* what,
                     const std::function<void(const std::string&)>& abort = nullptr) {
  const auto fail = [&](const std::string& why) {
    if (abort)
      abort(why);
    else
      ncclCommAbort(comm);
    HG_FAIL(why);
  };
  for (;;) {
    ncclResult_t state = ncclSuccess;
    HG_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress)
      fail(hg::detail::concat("[dist] NCCL ", what, " failed: ", ncclGetErrorString(state), nccl_last_error(comm)));
    if (Clock::now() > deadline)
      fail(hg::detail::concat("[dist] NCCL ", what, " did not complete in time (another rank died or hangs)"));
    std::this_thread::yield();
  }
}

// Completion events, reused: a Work hands its event back when it dies. Re-recording an event that
// an earlier cudaStreamWaitEvent already captured does not affect that wait.
class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  cudaEvent_t take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    HG_CUDA_RT_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void give(cudaEvent_t e) {
    std::lock_guard lock(mutex_);
    free_.push_back(e);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

// The NCCL communicator's one abort, whoever finds the failure first (a host wait, the watchdog),
// and its reason for every later call. `mutex` also serialises the enqueueing thread's NCCL calls
// with an abort from the watchdog's thread.
struct NcclHealth {
  ncclComm_t comm = nullptr;
  std::mutex mutex;
  std::string failure;  // "" while healthy

  void abort(const std::string& why) {
    std::lock_guard lock(mutex);
    abort_locked(why);
  }
  void abort_locked(const std::string& why) {
    if (!failure.empty()) return;
    failure = why;
    ncclCommAbort(comm);
  }
  // The recorded failure if the communicator was aborted, else the asynchronous error NCCL reports
  // ("" for none). Under the mutex: an abort (which frees the communicator) cannot run in between,
  // and an aborted communicator is never asked again.
  std::string async_error() {
    std::lock_guard lock(mutex);
    if (!failure.empty()) return failure;
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm, &state);
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return std::string("[dist] NCCL failed asynchronously: ") + ncclGetErrorString(state) + nccl_last_error(comm);
  }
  bool aborted() {
    std::lock_guard lock(mutex);
    return !failure.empty();
  }
  std::string recorded_failure() {
    std::lock_guard lock(mutex);
    return failure;
  }
};

class NcclWork final : public detail::WorkState, public std::enable_shared_from_this<NcclWork> {
 public:
  NcclWork(std::string what, std::shared_ptr<NcclHealth> health, std::weak_ptr<Watchdog> watchdog,
           std::chrono::milliseconds timeout, std::shared_ptr<EventPool> pool)
      : what_(std::move(what)),
        health_(std::move(health)),
        watchdog_(std::move(watchdog)),
        timeout_(timeout),
        pool_(std::move(pool)),
        event_(pool_->take()) {}
  ~NcclWork() override { pool_->give(event_); }
  cudaEvent_t event() const { return event_; }

  void wait() override {
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      if (completed()) return;
      const std::string aborted = health_->recorded_failure();
      HG_CHECK(aborted.empty(), "[dist] NCCL ", what_, ": the communicator was aborted: ", aborted);
      const std::string error = health_->async_error();
      if (!error.empty()) {
        health_->abort(error);
        HG_FAIL("[dist] NCCL ", what_, " failed asynchronously: ", error);
      }
      if (Clock::now() > deadline) {
        const std::string why = hg::detail::concat("[dist] NCCL ", what_, " did not complete within ",
                                                   timeout_.count() / 1000.0,
                                                   " s: another rank has died or hangs (set HALFGRAD_DIST_TIMEOUT to "
                                                   "allow longer)");
        health_->abort(why);
        HG_FAIL(why);
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
  // A stream wait, and no host wait: the watchdog keeps this work (and its event) until it completed,
  // and aborts the communicator if it has not within the timeout.
  void block(void* cuda_stream) override {
    HG_CUDA_RT_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda_stream), event_, 0));
    if (completed()) return;
    if (const std::shared_ptr<Watchdog> watchdog = watchdog_.lock())
      watchdog->watch("NCCL " + what_, timeout_, [self = shared_from_this()] { return self->completed(); });
  }

 private:
  std::string what_;
  std::shared_ptr<NcclHealth> health_;
  std::weak_ptr<Watchdog> watchdog_;  // weak: the watchdog holds this work while it watches it
  std::chrono::milliseconds timeout_;
  std::shared_ptr<EventPool> pool_;
  cudaEvent_t event_ = nullptr;
};

class NcclTransport final : public DeviceTransport {
 public:
  NcclTransport(const ProcessInfo& process, int device, HostTransport& bootstrap, std::chrono::milliseconds timeout,
                bool reduce_halves_in_fp32)
      : device_(device),
        rank_(process.rank),
        world_(process.world_size),
        timeout_(timeout),
        halves_in_fp32_(reduce_halves_in_fp32) {
    ncclUniqueId id{};
    if (rank_ == 0) HG_NCCL_CHECK(ncclGetUniqueId(&id));
    bootstrap.broadcast(&id, sizeof id, 0);
    HG_CUDA_RT_CHECK(cudaSetDevice(device_));
    HG_CUDA_RT_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    HG_CUDA_RT_CHECK(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    HG_NCCL_CHECK(ncclCommInitRankConfig(&comm_, world_, id, rank_, &config));
    wait_nccl_ready(comm_, Clock::now() + timeout_, "communicator initialisation");
    health_->comm = comm_;
    watchdog_ = std::make_shared<Watchdog>(
        std::chrono::milliseconds(20), [health = health_] { return health->async_error(); },
        [health = health_](const std::string& why) { health->abort(why); });
  }
  ~NcclTransport() override {
    watchdog_.reset();  // first: its thread ends (no abort can start after this); the work it watched is released
    bool abort = abandon_ || health_->aborted();
    if (!abort && stream_) {
      // NCCL work still pending (a peer that never joined it) would make ncclCommDestroy wait forever.
      const cudaError_t pending = cudaStreamQuery(stream_);
      abort = pending != cudaSuccess;
      if (pending != cudaSuccess) (void)cudaGetLastError();
    }
    if (abort)
      health_->abort("[dist] NCCL transport destroyed with its peers unreachable or work pending");  // once
    else if (comm_)
      ncclCommDestroy(comm_);  // an aborted communicator is freed by ncclCommAbort
    if (inputs_ready_) cudaEventDestroy(inputs_ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  bool broken() const override { return health_->aborted(); }
  void abandon() noexcept override { abandon_ = true; }

  std::string name() const override { return "nccl"; }
  void* stream() const override { return stream_; }

  Work all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    if (widen(dtype, count))
      return enqueue("all_reduce", [&] {
        kernels::cuda::Workspace wide(size_t(count) * sizeof(float), stream_);
        kernels::cuda::cast(data, dtype, wide.as<float>(), DType::f32, count, stream_);
        HG_NCCL_COLLECTIVE(
            ncclAllReduce(wide.as<float>(), wide.as<float>(), size_t(count), ncclFloat32, nccl_op(op), comm_, stream_));
        kernels::cuda::cast(wide.as<float>(), DType::f32, data, dtype, count, stream_);
      });
    return enqueue("all_reduce", [&] {
      HG_NCCL_COLLECTIVE(
          ncclAllReduce(data, data, size_t(count), nccl_type(dtype), nccl_op(op), comm_, stream_));
    });
  }

  Work reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      ReduceOp op) override {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    const int64_t mine = counts[size_t(rank_)];
    if (widen(dtype, total))
      return enqueue("reduce_scatter", [&] {
        kernels::cuda::Workspace wide(size_t(total + mine) * sizeof(float), stream_);
        float* wide_send = wide.as<float>();
        float* wide_recv = wide_send + total;
        kernels::cuda::cast(send, dtype, wide_send, DType::f32, total, stream_);
        reduce_scatter_nccl(wide_send, wide_recv, counts, DType::f32, op);
        if (mine > 0) kernels::cuda::cast(wide_recv, DType::f32, recv, dtype, mine, stream_);
      });
    return enqueue("reduce_scatter", [&] { reduce_scatter_nccl(send, recv, counts, dtype, op); });
  }

  Work all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype) override {
    const size_t element = dtype_size(dtype);
    const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    return enqueue("all_gather", [&] {
      if (even) {
        HG_NCCL_COLLECTIVE(ncclAllGather(send, recv, size_t(counts[0]), nccl_type(dtype), comm_, stream_));
        return;
      }
      HG_NCCL_CHECK(ncclGroupStart());
      int64_t offset = 0;
      for (int r = 0; r < world_; ++r) {
        void* slot = static_cast<char*>(recv) + size_t(offset) * element;
        HG_NCCL_COLLECTIVE(ncclBroadcast(r == rank_ ? send : slot, slot, size_t(counts[size_t(r)]), nccl_type(dtype),
                                         r, comm_, stream_));
        offset += counts[size_t(r)];
      }
      HG_NCCL_CHECK(ncclGroupEnd());
    });
  }

  Work broadcast(void* data, int64_t count, DType dtype, int root) override {
    return enqueue("broadcast", [&] {
      HG_NCCL_COLLECTIVE(ncclBroadcast(data, data, size_t(count), nccl_type(dtype), root, comm_, stream_));
    });
  }

 private:
  bool widen(DType dtype, int64_t count) const { return halves_in_fp32_ && is_half(dtype) && count > 0; }

  void reduce_scatter_nccl(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                           ReduceOp op) {
    const size_t element = dtype_size(dtype);
    const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    if (even) {
      HG_NCCL_COLLECTIVE(
          ncclReduceScatter(send, recv, size_t(counts[0]), nccl_type(dtype), nccl_op(op), comm_, stream_));
      return;
    }
    HG_NCCL_CHECK(ncclGroupStart());
    int64_t offset = 0;
    for (int r = 0; r < world_; ++r) {
      const void* slice = static_cast<const char*>(send) + size_t(offset) * element;
      HG_NCCL_COLLECTIVE(ncclReduce(slice, r == rank_ ? recv : nullptr, size_t(counts[size_t(r)]), nccl_type(dtype),
                                    nccl_op(op), r, comm_, stream_));
      offset += counts[size_t(r)];
    }
    HG_NCCL_CHECK(ncclGroupEnd());
  }

  template <class Call>
  Work enqueue(const char* op, Call call) {
    std::lock_guard lock(health_->mutex);  // no abort from the watchdog in the middle of these calls
    HG_CHECK(health_->failure.empty(), "[dist] NCCL ", op, " (rank ", rank_, " of ", world_,
             "): the communicator was aborted by an earlier failure: ", health_->failure);
    HG_CUDA_RT_CHECK(cudaSetDevice(device_));
    // The inputs were produced (and the output's previous contents last read) by compute-stream work
    // enqueued before this call: wait for exactly that, through one reused event.
    HG_CUDA_RT_CHECK(cudaEventRecord(inputs_ready_, static_cast<cudaStream_t>(cuda::compute_stream(device_))));
    HG_CUDA_RT_CHECK(cudaStreamWaitEvent(stream_, inputs_ready_, 0));
    call();
    wait_nccl_ready(comm_, Clock::now() + timeout_, op, [&](const std::string& why) { health_->abort_locked(why); });
    auto work = std::make_shared<NcclWork>(
        hg::detail::concat(op, " (collective #", ++sequence_, " on rank ", rank_, " of ", world_, ", nccl)"), health_,
        watchdog_, timeout_, events_);
    HG_CUDA_RT_CHECK(cudaEventRecord(work->event(), stream_));
    return Work(work);
  }

  int device_;
  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  bool halves_in_fp32_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;
  std::shared_ptr<EventPool> events_ = std::make_shared<EventPool>();
  std::shared_ptr<NcclHealth> health_ = std::make_shared<NcclHealth>();
  std::shared_ptr<Watchdog> watchdog_;
  uint64_t sequence_ = 0;
  bool abandon_ = false;  // the host side is broken: end with ncclCommAbort, never ncclCommDestroy
};

}  // namespace

std::unique_ptr<DeviceTransport> make_nccl_transport(const ProcessInfo& process, int device, HostTransport& bootstrap,
                                                     std::chrono::milliseconds timeout, bool reduce_halves_in_fp32) {
  return std::make_unique<NcclTransport>(process, device, bootstrap, timeout, reduce_halves_in_fp32);
}

std::string nccl_unavailable_reason() { return ""; }

}  // namespace hg::dist
