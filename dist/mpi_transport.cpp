// The MPI host transport (Open MPI from Debian): every collective is the matching blocking MPI call on
// a duplicate of MPI_COMM_WORLD. MPI is initialised once per process (MPI_THREAD_MULTIPLE: each
// communicator calls MPI from its own communication thread) and finalised at exit, or the job is
// aborted (MPI_Abort) when a collective failed, so the other ranks stop instead of waiting forever.
#include <mpi.h>

#include <mutex>

#include "dist/transport.h"
#include "kernels/error.h"

namespace hg::dist {
namespace {

#define HG_MPI_CHECK(call)                                                                   \
  do {                                                                                       \
    const int mpi_status_ = (call);                                                          \
    if (mpi_status_ != MPI_SUCCESS) {                                                        \
      char mpi_text_[MPI_MAX_ERROR_STRING];                                                  \
      int mpi_length_ = 0;                                                                   \
      MPI_Error_string(mpi_status_, mpi_text_, &mpi_length_);                                \
      HG_FAIL("[dist] ", #call, " failed: ", std::string(mpi_text_, size_t(mpi_length_))); \
    }                                                                                        \
  } while (0)

// Initialises MPI on first use; finalises it at exit unless a failure aborted the job.
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime runtime;
    return runtime;
  }
  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  // Under MPI_THREAD_SERIALIZED (or less) calls from different threads must not overlap.
  std::unique_lock<std::mutex> serialize() {
    return thread_multiple_ ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(mutex_);
  }

 private:
  MpiRuntime() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      HG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      owns_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    HG_CHECK(provided >= MPI_THREAD_SERIALIZED, "[dist] MPI provides thread level ", provided,
             " but the communication thread needs at least MPI_THREAD_SERIALIZED");
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
    // Errors come back as codes (checked) instead of aborting inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  bool owns_ = false;
  bool thread_multiple_ = false;
  std::mutex mutex_;
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8:
    case DType::b8: return MPI_UINT8_T;  // bool: one byte, 0 or 1
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;  // moved as bits; never reduced here (widened to f32 first)
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }

// Counts and displacements as MPI's int, checked.
std::vector<int> to_int(const std::vector<int64_t>& counts, const char* what) {
  std::vector<int> out(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    HG_CHECK(counts[i] <= int64_t(INT32_MAX), "[dist] MPI ", what, ": count ", counts[i], " exceeds MPI's int");
    out[i] = int(counts[i]);
  }
  return out;
}

class MpiTransport final : public HostTransport {
 public:
  explicit MpiTransport(const ProcessInfo& process) {
    MpiRuntime& runtime = MpiRuntime::get();
    auto lock = runtime.serialize();
    HG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    int rank = 0, size = 0;
    MPI_Comm_rank(comm_, &rank);
    MPI_Comm_size(comm_, &size);
    HG_CHECK(rank == process.rank && size == process.world_size, "[dist] MPI says rank ", rank, " of ", size,
             " but the launcher's environment says rank ", process.rank, " of ", process.world_size);
    rank_ = rank;
  }
  ~MpiTransport() override {
    if (!aborted_) {
      auto lock = MpiRuntime::get().serialize();
      MPI_Comm_free(&comm_);
    }
  }

  std::string name() const override { return "mpi"; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    auto lock = MpiRuntime::get().serialize();
    HG_CHECK(count <= int64_t(INT32_MAX), "[dist] MPI all_reduce of ", count, " elements exceeds MPI's int");
    HG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, int(count), mpi_type(dtype), mpi_op(op), comm_));
  }

  void reduce_scatter(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype,
                      ReduceOp op) override {
    auto lock = MpiRuntime::get().serialize();
    const std::vector<int> c = to_int(counts, "reduce_scatter");
    HG_MPI_CHECK(MPI_Reduce_scatter(send, recv, c.data(), mpi_type(dtype), mpi_op(op), comm_));
  }

  void all_gather(const void* send, void* recv, const std::vector<int64_t>& counts, DType dtype) override {
    auto lock = MpiRuntime::get().serialize();
    const std::vector<int> c = to_int(counts, "all_gather");
    std::vector<int> displacements(c.size());
    int64_t offset = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      HG_CHECK(offset <= int64_t(INT32_MAX), "[dist] MPI all_gather: offset exceeds MPI's int");
      displacements[i] = int(offset);
      offset += c[i];
    }
    // In place when this rank's send already sits at its slot of recv (ZeRO's flat buffers).
    const char* slot = static_cast<const char*>(recv) + size_t(displacements[size_t(rank_)]) * dtype_size(dtype);
    const void* source = send == slot ? MPI_IN_PLACE : send;
    HG_MPI_CHECK(MPI_Allgatherv(source, c[size_t(rank_)], mpi_type(dtype), recv, c.data(), displacements.data(),
                                mpi_type(dtype), comm_));
  }

  void broadcast(void* data, size_t nbytes, int root) override {
    auto lock = MpiRuntime::get().serialize();
    HG_CHECK(nbytes <= size_t(INT32_MAX), "[dist] MPI broadcast of ", nbytes, " bytes exceeds MPI's int");
    HG_MPI_CHECK(MPI_Bcast(data, int(nbytes), MPI_BYTE, root, comm_));
  }

  void barrier() override {
    auto lock = MpiRuntime::get().serialize();
    HG_MPI_CHECK(MPI_Barrier(comm_));
  }

  // Called twice after a failure: when the communicator is destroyed (does nothing, so the caller
  // can still report the error) and at process exit (ends every rank of the job).
  void abort_job() noexcept override {
    if (aborted_) MPI_Abort(MPI_COMM_WORLD, 1);
    aborted_ = true;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  bool aborted_ = false;
};

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<HostTransport> make_mpi_transport(const ProcessInfo& process) {
  return std::make_shared<MpiTransport>(process);
}

}  // namespace hg::dist
