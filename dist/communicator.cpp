// dist::Communicator (dist/communicator.h): picks the transports for this process, runs host
// collectives on one communication thread, widens halves to fp32 for reductions, and turns a
// collective that does not finish into an error instead of a hang.
#include "dist/communicator.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "dist/transport.h"
#include "engine/cuda/cuda_allocator.h"
#include "engine/cuda/cuda_context.h"
#include "kernels/error.h"
#include "kernels/kernels.h"

namespace hg::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
  }
  return "?";
}

Shard shard_of(int64_t n, int rank, int world) {
  HG_CHECK(n >= 0 && world >= 1 && rank >= 0 && rank < world, "[dist] shard_of(n=", n, ", rank=", rank,
           ", world=", world, "): expected n >= 0 and 0 <= rank < world");
  const int64_t base = n / world;
  const int64_t extra = n % world;
  return Shard{rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

std::vector<int64_t> shard_counts(int64_t n, int world) {
  std::vector<int64_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[size_t(r)] = shard_of(n, r, world).count;
  return counts;
}

// ---- Work ----------------------------------------------------------------------------------------

void Work::wait() {
  if (state_) state_->wait();
}
bool Work::completed() const { return !state_ || state_->completed(); }
void Work::block(void* cuda_stream) {
  if (state_) state_->block(cuda_stream);
}

namespace {

std::chrono::milliseconds default_timeout() {
  if (const char* text = std::getenv("HALFGRAD_DIST_TIMEOUT"); text && *text) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    HG_CHECK(end && *end == '\0' && seconds > 0, "[dist] HALFGRAD_DIST_TIMEOUT='", text,
             "' is not a positive number of seconds");
    return std::chrono::milliseconds(int64_t(seconds * 1000));
  }
  return std::chrono::seconds(300);
}

// Whether a host collective has failed or timed out, and the first such failure's message: every
// later call names it, so the error a rank reports is the cause even when the first exception was
// caught on its way out (a cleanup that issued another collective) and a later one reached main.
struct BrokenState {
  std::atomic<bool> flag{false};
  std::mutex mutex;
  std::string cause;

  void mark(const std::string& why) {
    std::lock_guard lock(mutex);
    if (cause.empty()) cause = why;
    flag.store(true);
  }
  std::string first_cause() {
    std::lock_guard lock(mutex);
    return cause;
  }
};

// A host collective: done by the communication thread, waited on with the communicator's timeout.
class HostWork final : public detail::WorkState {
 public:
  HostWork(std::string what, std::chrono::milliseconds timeout, std::shared_ptr<BrokenState> broken)
      : what_(std::move(what)), timeout_(timeout), broken_(std::move(broken)) {}

  void finish(std::string error) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }

  void wait() override {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, timeout_, [&] { return done_; })) {
      const std::string message = hg::detail::concat(
          "[dist] ", what_, " did not complete within ", double(timeout_.count()) / 1000.0,
          " s: another rank has died, hangs, or called a different collective (set HALFGRAD_DIST_TIMEOUT to "
          "allow longer)");
      broken_->mark(message);
      HG_FAIL(message);
    }
    if (!error_.empty()) {
      const std::string message = hg::detail::concat("[dist] ", what_, " failed: ", error_);
      broken_->mark(message);
      HG_FAIL(message);
    }
  }

  bool completed() override {
    std::lock_guard lock(mutex_);
    return done_;
  }

 private:
  std::string what_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<BrokenState> broken_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

// Reductions reach the transports as sum/max over f32/f64/i32/i64; halves are widened here.
bool needs_widening(DType dtype) { return is_half(dtype); }

}  // namespace

// The communication thread: runs queued host collectives one after another.
struct Communicator::Stream {
  std::thread thread;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stop = false;
  uint64_t sequence = 0;
  std::shared_ptr<BrokenState> broken = std::make_shared<BrokenState>();

  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  }
};

Communicator::Communicator(CommunicatorOptions options)
    : timeout_(options.timeout().count() > 0 ? options.timeout() : default_timeout()),
      reduce_halves_in_fp32_(options.reduce_halves_in_fp32()),
      stream_(std::make_unique<Stream>()) {
  const ProcessInfo process = options.this_process_only() ? ProcessInfo{} : detect_process();
  rank_ = process.rank;
  world_ = process.world_size;
  local_rank_ = process.local_rank;
  if (process.launcher == Launcher::mpirun) {
    HG_CHECK(mpi_available(), "[dist] this process was launched by mpirun (rank ", rank_, " of ", world_,
             ") but halfgrad was built without MPI: install libopenmpi-dev and reconfigure with HALFGRAD_MPI=ON, "
             "or launch with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT instead");
    host_shared_ = make_mpi_transport(process);
  } else if (world_ > 1) {
    host_shared_ = make_tcp_transport(process, timeout_);
  } else {
    host_shared_ = make_local_transport();
  }
  host_ = host_shared_.get();
  stream_->thread = std::thread([s = stream_.get()] { s->loop(); });
  process_ = process;
}

namespace {
// Transports of communicators destroyed after a failure: kept alive (their communication thread
// may still be inside them) and told to end the job when the process exits — after the caller has
// had the chance to report the error.
std::mutex g_failed_mutex;
std::vector<std::shared_ptr<HostTransport>>* g_failed = nullptr;

void abort_failed_transports() {
  std::lock_guard lock(g_failed_mutex);
  if (g_failed)
    for (auto& t : *g_failed) t->abort_job();
}
}  // namespace

Communicator::~Communicator() {
  if (stream_->broken->flag.load()) {
    if (device_) device_->abandon();  // its peers are unreachable too: abort, do not wait for them
    // A collective failed or timed out: the communication thread may be stuck inside the transport
    // waiting for a peer that will never answer, so it cannot be joined. Leave it (and the
    // transport) running and end the job at exit (MPI_Abort; TCP: close the connections at once).
    host_->abort_job();  // TCP: peers fail now; MPI: nothing yet (see abort_failed_transports)
    stream_->thread.detach();
    (void)stream_.release();
    std::lock_guard lock(g_failed_mutex);
    if (!g_failed) {
      g_failed = new std::vector<std::shared_ptr<HostTransport>>();
      std::atexit(abort_failed_transports);
    }
    g_failed->push_back(std::move(host_shared_));
    return;
  }
  {
    std::lock_guard lock(stream_->mutex);
    stream_->stop = true;
  }
  stream_->cv.notify_all();
  stream_->thread.join();
}

std::string Communicator::backend() const {
  std::string name = host_->name();
  if (device_) name.append("+").append(device_->name());  // (not "+" + ...: a GCC 12 -Wrestrict false positive)
  return name;
}

bool Communicator::broken() const { return stream_->broken->flag.load() || (device_ && device_->broken()); }

bool Communicator::nccl_available() { return nccl_unavailable_reason().empty(); }

namespace {
// HALFGRAD_EMULATED_NCCL=1: the emulated device's buffers go through the NCCL transport.
bool emulated_nccl_requested() {
  const char* text = std::getenv("HALFGRAD_EMULATED_NCCL");
  return text && std::string(text) == "1";
}
}  // namespace

bool Communicator::use_device_transport(const Device& device) {
  if (!device.is_cuda()) return false;
  if (cuda::is_emulated()) {
    if (!emulated_nccl_requested()) return false;
    HG_CHECK(nccl_available(), "[dist] HALFGRAD_EMULATED_NCCL=1 but this build has no emulated NCCL: ",
             nccl_unavailable_reason());
    HG_CHECK(process_.launcher == Launcher::mpirun,
             "[dist] HALFGRAD_EMULATED_NCCL=1: the emulated NCCL moves data with MPI, launch the ranks with mpirun");
  } else {
    HG_CHECK(nccl_available(), "[dist] a collective on a ", device.str(),
             " buffer needs NCCL, which is unavailable: ", nccl_unavailable_reason());
  }
  // One process per device, device = local rank (the emulated device: each process has its own one).
  const int expected = cuda::is_emulated() ? local_rank_ % cuda::device_count() : local_rank_;
  HG_CHECK(device.index == expected, "[dist] rank ", rank_, " drives cuda:", expected,
           " (one process per device, device = local rank) but the buffer is on ", device.str());
  if (!device_) {
    // NCCL starts at the first CUDA collective (every rank reaches it in the same order), so CPU-only
    // jobs never initialise it. The unique id travels over the host transport: drain the
    // communication thread first, so that the bootstrap is the only host collective in flight.
    barrier().wait();
    device_ = make_nccl_transport(process_, expected, *host_, timeout_, reduce_halves_in_fp32_);
  }
  return true;
}

void Communicator::record_stream(void* base, Device device) {
  if (!device_ || !device.is_cuda() || base == nullptr) return;
  cuda::record_stream(base, device.index, static_cast<cuda::Stream>(device_->stream()));
}

void Communicator::check_counts(const char* op, const std::vector<int64_t>& counts) const {
  HG_CHECK(int(counts.size()) == world_, "[dist] ", op, ": expected one count per rank (", world_, "), got ",
           counts.size());
  for (int64_t c : counts) HG_CHECK(c >= 0, "[dist] ", op, ": negative count ", c);
}

Work Communicator::enqueue_host(const char* op, const Device& device, std::function<void(HostTransport&)> run) {
  if (broken()) {
    const std::string cause = stream_->broken->first_cause();
    HG_FAIL("[dist] ", op, ": the communicator is broken by an earlier failed collective (rank ", rank_, " of ",
            world_, ")", cause.empty() ? "" : ": ", cause);
  }
  // Emulated CUDA memory is host memory; the emulator finishes work before returning, but order
  // after the device's stream anyway.
  if (device.is_cuda()) cuda::synchronize(device.index);
  const uint64_t number = ++stream_->sequence;
  auto work = std::make_shared<HostWork>(
      hg::detail::concat(op, " (collective #", number, " on rank ", rank_, " of ", world_, ", ", host_->name(), ")"),
      timeout_, stream_->broken);
  {
    std::lock_guard lock(stream_->mutex);
    stream_->queue.push_back([work, run = std::move(run), host = host_] {
      std::string error;
      try {
        run(*host);
      } catch (const std::exception& e) {
        error = e.what();
      }
      work->finish(std::move(error));
    });
  }
  stream_->cv.notify_all();
  return Work(work);
}

namespace {

void check_reduce(const char* op, DType dtype, ReduceOp reduce) {
  HG_CHECK(is_floating(dtype) || reduce != ReduceOp::avg, "[dist] ", op, ": avg of ", dtype_name(dtype),
           " is not defined (use sum, or a floating dtype)");
}

// dst[i] /= world, in the dtype of the buffer.
void divide(void* data, int64_t n, DType dtype, int world) {
  if (dtype == DType::f32) {
    auto* p = static_cast<float*>(data);
    for (int64_t i = 0; i < n; ++i) p[i] /= float(world);
  } else {
    auto* p = static_cast<double*>(data);
    for (int64_t i = 0; i < n; ++i) p[i] /= double(world);
  }
}

ReduceOp transport_op(ReduceOp op) { return op == ReduceOp::max ? ReduceOp::max : ReduceOp::sum; }

}  // namespace

Work Communicator::all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Device device) {
  HG_CHECK(count >= 0 && (data || count == 0), "[dist] all_reduce: bad buffer (count ", count, ")");
  check_reduce("all_reduce", dtype, op);
  if (use_device_transport(device)) return device_->all_reduce(data, count, dtype, op);
  const int world = world_;
  return enqueue_host("all_reduce", device, [=](HostTransport& t) {
    if (needs_widening(dtype)) {
      std::vector<float> wide(static_cast<size_t>(count));
      kernels::cpu::cast(data, dtype, wide.data(), DType::f32, count);
      t.all_reduce(wide.data(), count, DType::f32, transport_op(op));
      if (op == ReduceOp::avg) divide(wide.data(), count, DType::f32, world);
      kernels::cpu::cast(wide.data(), DType::f32, data, dtype, count);
    } else {
      t.all_reduce(data, count, dtype, transport_op(op));
      if (op == ReduceOp::avg) divide(data, count, dtype, world);
    }
  });
}

Work Communicator::reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                                  ReduceOp op, Device device) {
  check_counts("reduce_scatter", counts);
  check_reduce("reduce_scatter", dtype, op);
  if (use_device_transport(device)) return device_->reduce_scatter(send, recv, counts, dtype, op);
  const int world = world_;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const int64_t mine = counts[size_t(rank_)];
  return enqueue_host("reduce_scatter", device, [=](HostTransport& t) {
    if (needs_widening(dtype)) {
      std::vector<float> wide_send(static_cast<size_t>(total)), wide_recv(static_cast<size_t>(mine));
      kernels::cpu::cast(send, dtype, wide_send.data(), DType::f32, total);
      t.reduce_scatter(wide_send.data(), wide_recv.data(), counts, DType::f32, transport_op(op));
      if (op == ReduceOp::avg) divide(wide_recv.data(), mine, DType::f32, world);
      kernels::cpu::cast(wide_recv.data(), DType::f32, recv, dtype, mine);
    } else {
      t.reduce_scatter(send, recv, counts, dtype, transport_op(op));
      if (op == ReduceOp::avg) divide(recv, mine, dtype, world);
    }
  });
}

Work Communicator::all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                              Device device) {
  check_counts("all_gather", counts);
  if (use_device_transport(device)) return device_->all_gather(send, recv, counts, dtype);
  return enqueue_host("all_gather", device, [=](HostTransport& t) { t.all_gather(send, recv, counts, dtype); });
}

Work Communicator::broadcast(void* data, int64_t count, DType dtype, int root, Device device) {
  HG_CHECK(root >= 0 && root < world_, "[dist] broadcast: root ", root, " is not a rank of a world of ", world_);
  if (use_device_transport(device)) return device_->broadcast(data, count, dtype, root);
  const size_t nbytes = size_t(count) * dtype_size(dtype);
  return enqueue_host("broadcast", device, [=](HostTransport& t) { t.broadcast(data, nbytes, root); });
}

Work Communicator::barrier() {
  return enqueue_host("barrier", kCPU, [](HostTransport& t) { t.barrier(); });
}

// ---- tensor forms -----------------------------------------------------------------------------------

namespace {
void check_tensor(const char* op, const char* role, const Tensor& t) {
  HG_CHECK(t.defined() && t.is_contiguous(), "[dist] ", op, ": the ", role, " tensor must be defined and contiguous",
           t.defined() ? ", got " + t.describe() : std::string());
}
}  // namespace

Work Communicator::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", "", t);
  return all_reduce(t.data_ptr(), t.numel(), t.dtype(), op, t.device());
}

Work Communicator::reduce_scatter(const Tensor& send, const Tensor& recv, ReduceOp op) {
  check_tensor("reduce_scatter", "send", send);
  check_tensor("reduce_scatter", "recv", recv);
  const std::vector<int64_t> counts = shard_counts(send.numel(), world_);
  HG_CHECK(recv.numel() == counts[size_t(rank_)] && recv.dtype() == send.dtype() && recv.device() == send.device(),
           "[dist] reduce_scatter: rank ", rank_, " receives ", counts[size_t(rank_)], " elements of ",
           send.describe(), " but recv is ", recv.describe());
  return reduce_scatter(send.data_ptr(), recv.data_ptr(), counts, send.dtype(), op, send.device());
}

Work Communicator::all_gather(const Tensor& send, const Tensor& recv) {
  check_tensor("all_gather", "send", send);
  check_tensor("all_gather", "recv", recv);
  const std::vector<int64_t> counts = shard_counts(recv.numel(), world_);
  HG_CHECK(send.numel() == counts[size_t(rank_)] && recv.dtype() == send.dtype() && recv.device() == send.device(),
           "[dist] all_gather: rank ", rank_, " contributes shard_of(", recv.numel(), ") = ", counts[size_t(rank_)],
           " elements to ", recv.describe(), " but send is ", send.describe());
  return all_gather(send.data_ptr(), recv.data_ptr(), counts, send.dtype(), send.device());
}

Work Communicator::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", "", t);
  return broadcast(t.data_ptr(), t.numel(), t.dtype(), root, t.device());
}

}  // namespace hg::dist
