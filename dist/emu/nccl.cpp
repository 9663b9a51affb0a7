// Emulated NCCL for the emulated CUDA build: the subset of nccl.h that dist/nccl_transport.cpp calls,
// with the toolkit's own declarations (nccl.h), status codes and error strings, so that
// nccl_transport.cpp compiles and runs unchanged on the SIMT emulator's device.
//
// Ranks are processes launched by mpirun (MPI_THREAD_MULTIPLE); the emulated device's memory is host
// memory, so the data moves with MPI calls on a duplicate of MPI_COMM_WORLD owned by the communicator.
//   ncclGetUniqueId            a magic, the process id and a counter (the caller broadcasts it);
//   ncclCommInitRank(Config)   checks that every rank got rank 0's id and that nranks/rank are MPI's;
//   collectives                run on their stream through hg::emu::enqueue_host_work (now, or when a
//                              captured graph is launched). Every rank receives all contributions
//                              (MPI_Allgather / Alltoall / Gather / Bcast on bytes) and reduces them
//                              in rank order with NCCL's arithmetic: each step in the buffer's type
//                              (half and bf16 rounded after every addition, as __hadd2 does); avg of a
//                              floating type multiplies each contribution by 1/nranks in the type
//                              first (NCCL's PreMulSum), of an integer type divides the sum (SumPostDiv);
//   ncclGroupStart/End         calls between them are queued and run, in issue order, at the
//                              outermost ncclGroupEnd, as one piece of work on the first call's
//                              stream; other streams of the group wait for it (an event).
// Arguments are checked as NCCL checks them (null communicator, bad type/op/root, non-device
// buffers: ncclInvalidArgument; a communicator's rank outside MPI's world: ncclInvalidUsage), with a
// "NCCL WARN" line on stderr saying what was wrong. Collectives complete when enqueued, as all
// emulated device work does; non-blocking communicators never report ncclInProgress.
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/emu/runtime.h"
#include "kernels/half.h"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int nranks = 0;
  int rank = 0;
  std::atomic<int> async_error{ncclSuccess};
  bool aborted = false;
};

namespace {

constexpr uint32_t kIdMagic = 0x6e63636cu;  // "nccl"

// The last warning, for ncclGetLastError.
std::mutex g_last_error_mutex;
std::string g_last_error;

template <class... A>
void warn(const char* fmt, A... args) {
  char text[512];
  std::snprintf(text, sizeof text, fmt, args...);
  std::fprintf(stderr, "NCCL WARN [emulated] %s\n", text);
  std::lock_guard lock(g_last_error_mutex);
  g_last_error = text;
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;  // fp8 types: not emulated
  }
}

bool valid_op(ncclRedOp_t op) { return op >= ncclSum && op <= ncclAvg; }

// One element type's reduction, in rank order, with the arithmetic NCCL's kernels use.
template <class T>
struct Arith {
  static constexpr bool floating = std::is_floating_point_v<T>;
  static T add(T a, T b) { return T(a + b); }
  static T mul(T a, T b) { return T(a * b); }
  static T max(T a, T b) {
    if constexpr (floating) return std::fmax(a, b);
    else return a < b ? b : a;
  }
  static T min(T a, T b) {
    if constexpr (floating) return std::fmin(a, b);
    else return b < a ? b : a;
  }
  static T from_double(double v) { return T(v); }
};
template <class H>  // hg::half, hg::bfloat16: float arithmetic, rounded to the type after each step
struct HalfArith {
  static constexpr bool floating = true;
  static H add(H a, H b) { return H(float(a) + float(b)); }
  static H mul(H a, H b) { return H(float(a) * float(b)); }
  static H max(H a, H b) { return H(std::fmax(float(a), float(b))); }
  static H min(H a, H b) { return H(std::fmin(float(a), float(b))); }
  static H from_double(double v) { return H(float(v)); }
};
template <>
struct Arith<hg::half> : HalfArith<hg::half> {};
template <>
struct Arith<hg::bfloat16> : HalfArith<hg::bfloat16> {};

// out[i] = op over r of in[r * stride + i], r = 0 .. nranks-1.
template <class T>
void reduce_typed(const void* in, size_t stride, void* out, size_t count, int nranks, ncclRedOp_t op) {
  using A = Arith<T>;
  const T* x = static_cast<const T*>(in);
  T* y = static_cast<T*>(out);
  const T scale = A::from_double(1.0 / nranks);
  for (size_t i = 0; i < count; ++i) {
    auto term = [&](int r) {
      const T v = x[size_t(r) * stride + i];
      return (op == ncclAvg && A::floating) ? A::mul(v, scale) : v;
    };
    T acc = term(0);
    for (int r = 1; r < nranks; ++r) {
      const T v = term(r);
      switch (op) {
        case ncclProd: acc = A::mul(acc, v); break;
        case ncclMax: acc = A::max(acc, v); break;
        case ncclMin: acc = A::min(acc, v); break;
        default: acc = A::add(acc, v); break;  // sum, avg
      }
    }
    if constexpr (!A::floating) {
      if (op == ncclAvg) acc = T(acc / T(nranks));
    }
    y[i] = acc;
  }
}

void reduce(const void* in, size_t stride, void* out, size_t count, int nranks, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8: return reduce_typed<int8_t>(in, stride, out, count, nranks, op);
    case ncclUint8: return reduce_typed<uint8_t>(in, stride, out, count, nranks, op);
    case ncclInt32: return reduce_typed<int32_t>(in, stride, out, count, nranks, op);
    case ncclUint32: return reduce_typed<uint32_t>(in, stride, out, count, nranks, op);
    case ncclInt64: return reduce_typed<int64_t>(in, stride, out, count, nranks, op);
    case ncclUint64: return reduce_typed<uint64_t>(in, stride, out, count, nranks, op);
    case ncclFloat16: return reduce_typed<hg::half>(in, stride, out, count, nranks, op);
    case ncclBfloat16: return reduce_typed<hg::bfloat16>(in, stride, out, count, nranks, op);
    case ncclFloat32: return reduce_typed<float>(in, stride, out, count, nranks, op);
    case ncclFloat64: return reduce_typed<double>(in, stride, out, count, nranks, op);
    default: return;
  }
}

// MPI moves bytes; counts are ints.
void check_mpi(int status, const char* what) {
  if (status != MPI_SUCCESS) throw std::runtime_error(std::string("emulated NCCL: ") + what + " failed");
}
int as_int(size_t bytes) {
  if (bytes > size_t(INT32_MAX)) throw std::runtime_error("emulated NCCL: a message over 2 GiB");
  return int(bytes);
}

// ---- checks ----------------------------------------------------------------------------------------

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

ncclResult_t check_common(const char* name, ncclComm_t comm, size_t count, ncclDataType_t t, cudaStream_t stream) {
  if (comm == nullptr) {
    warn("%s: comm is NULL", name);
    return ncclInvalidArgument;
  }
  if (comm->aborted) {
    warn("%s: the communicator was aborted", name);
    return ncclInvalidUsage;
  }
  if (type_size(t) == 0) {
    warn("%s: invalid or unsupported data type %d", name, int(t));
    return ncclInvalidArgument;
  }
  if (!hg::emu::detail::is_valid_stream(stream)) {
    warn("%s: invalid stream", name);
    return ncclInvalidArgument;
  }
  (void)count;
  return ncclSuccess;
}

ncclResult_t check_buffer(const char* name, const char* role, const void* p, size_t count) {
  if (count == 0) return ncclSuccess;
  if (p == nullptr || !is_device_pointer(p)) {
    warn("%s: %s %p is not a device pointer", name, role, p);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t check_root(const char* name, ncclComm_t comm, int root) {
  if (root < 0 || root >= comm->nranks) {
    warn("%s: root %d is not a rank of a communicator of %d", name, root, comm->nranks);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// ---- groups ----------------------------------------------------------------------------------------

struct Pending {
  ncclComm_t comm;
  cudaStream_t stream;
  std::function<void()> run;
};
thread_local int g_group_depth = 0;
thread_local std::vector<Pending> g_group;

ncclResult_t run_on_streams(std::vector<Pending> calls) {
  if (calls.empty()) return ncclSuccess;
  const cudaStream_t first = calls.front().stream;
  std::vector<ncclComm_t> comms;
  for (const Pending& c : calls) comms.push_back(c.comm);
  auto work = [calls]() {
    for (const Pending& c : calls) {
      try {
        c.run();
      } catch (const std::exception& e) {
        warn("%s", e.what());
        c.comm->async_error.store(ncclSystemError);
      }
    }
  };
  if (hg::emu::enqueue_host_work(first, work) != cudaSuccess) {
    (void)cudaGetLastError();
    warn("could not enqueue on the stream");
    return ncclUnhandledCudaError;
  }
  // The other streams of the group wait for it, as NCCL joins the streams of a group.
  for (const Pending& c : calls) {
    if (c.stream == first) continue;
    cudaEvent_t done = nullptr;
    if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(done, first) != cudaSuccess || cudaStreamWaitEvent(c.stream, done, 0) != cudaSuccess)
      return ncclUnhandledCudaError;
    cudaEventDestroy(done);
  }
  return ncclSuccess;
}

ncclResult_t submit(ncclComm_t comm, cudaStream_t stream, std::function<void()> run) {
  if (g_group_depth > 0) {
    g_group.push_back(Pending{comm, stream, std::move(run)});
    return ncclSuccess;
  }
  return run_on_streams({Pending{comm, stream, std::move(run)}});
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) {
    warn("ncclGetUniqueId: uniqueId is NULL");
    return ncclInvalidArgument;
  }
  static std::atomic<uint64_t> counter{0};
  std::memset(id, 0, sizeof *id);
  const uint32_t magic = kIdMagic;
  const uint64_t pid = uint64_t(getpid()), n = ++counter;
  std::memcpy(id->internal, &magic, sizeof magic);
  std::memcpy(id->internal + 8, &pid, sizeof pid);
  std::memcpy(id->internal + 16, &n, sizeof n);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (comm == nullptr) {
    warn("ncclCommInitRankConfig: comm is NULL");
    return ncclInvalidArgument;
  }
  *comm = nullptr;
  if (config != nullptr && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t))) {
    warn("ncclCommInitRankConfig: the config was not initialised with NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  uint32_t magic = 0;
  std::memcpy(&magic, id.internal, sizeof magic);
  if (magic != kIdMagic) {
    warn("ncclCommInitRankConfig: the unique id was not made by ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    warn("ncclCommInitRankConfig: rank %d of %d", rank, nranks);
    return ncclInvalidArgument;
  }
  int initialized = 0, level = MPI_THREAD_SINGLE, world = 0, me = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    warn("the emulated NCCL moves data with MPI: launch the ranks with mpirun (MPI is not initialised)");
    return ncclSystemError;
  }
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) {
    warn("the emulated NCCL needs MPI_THREAD_MULTIPLE (MPI provides level %d)", level);
    return ncclSystemError;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (world != nranks || me != rank) {
    warn("ncclCommInitRankConfig: rank %d of %d, but this is MPI rank %d of %d (the emulation maps NCCL ranks "
         "to MPI ranks)", rank, nranks, me, world);
    return ncclInvalidUsage;
  }
  auto c = std::make_unique<ncclComm>();
  c->nranks = nranks;
  c->rank = rank;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi) != MPI_SUCCESS) return ncclSystemError;
  MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
  // Every rank must hold the same id (rank 0's).
  ncclUniqueId root = id;
  if (MPI_Bcast(&root, sizeof root, MPI_BYTE, 0, c->mpi) != MPI_SUCCESS) return ncclSystemError;
  int same = std::memcmp(&root, &id, sizeof id) == 0, all_same = 0;
  if (MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, c->mpi) != MPI_SUCCESS) return ncclSystemError;
  if (!all_same) {
    warn("ncclCommInitRankConfig: the ranks were given different unique ids");
    MPI_Comm_free(&c->mpi);
    return ncclInvalidUsage;
  }
  *comm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) {
    warn("ncclCommGetAsyncError: NULL argument");
    return ncclInvalidArgument;
  }
  *async_error = ncclResult_t(comm->async_error.load());
  return ncclSuccess;
}

const char* ncclGetLastError(ncclComm_t) {
  std::lock_guard lock(g_last_error_mutex);
  thread_local std::string copy;  // the caller's until its next call
  copy = g_last_error;
  return copy.c_str();
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!comm->aborted && !finalized && comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

// Abandons the communicator without waiting for its peers: its MPI communicator is left to the job's end.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted = true;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0) {
    warn("ncclGroupEnd: not in a group call");
    return ncclInvalidUsage;
  }
  if (--g_group_depth > 0) return ncclSuccess;
  std::vector<Pending> calls;
  calls.swap(g_group);
  return run_on_streams(std::move(calls));
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t s = check_common("AllReduce", comm, count, t, stream); s != ncclSuccess) return s;
  if (!valid_op(op)) return warn("AllReduce: invalid op %d", int(op)), ncclInvalidArgument;
  if (ncclResult_t s = check_buffer("AllReduce", "sendbuff", send, count); s != ncclSuccess) return s;
  if (ncclResult_t s = check_buffer("AllReduce", "recvbuff", recv, count); s != ncclSuccess) return s;
  return submit(comm, stream, [=] {
    const size_t bytes = count * type_size(t);
    std::vector<char> all(bytes * size_t(comm->nranks));
    check_mpi(MPI_Allgather(send, as_int(bytes), MPI_BYTE, all.data(), as_int(bytes), MPI_BYTE, comm->mpi),
              "AllReduce (MPI_Allgather)");
    reduce(all.data(), count, recv, count, comm->nranks, t, op);
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t s = check_common("ReduceScatter", comm, recvcount, t, stream); s != ncclSuccess) return s;
  if (!valid_op(op)) return warn("ReduceScatter: invalid op %d", int(op)), ncclInvalidArgument;
  if (ncclResult_t s = check_buffer("ReduceScatter", "sendbuff", send, recvcount); s != ncclSuccess) return s;
  if (ncclResult_t s = check_buffer("ReduceScatter", "recvbuff", recv, recvcount); s != ncclSuccess) return s;
  return submit(comm, stream, [=] {
    const size_t bytes = recvcount * type_size(t);
    std::vector<char> mine(bytes * size_t(comm->nranks));  // slice `rank` of every rank's sendbuff
    check_mpi(MPI_Alltoall(send, as_int(bytes), MPI_BYTE, mine.data(), as_int(bytes), MPI_BYTE, comm->mpi),
              "ReduceScatter (MPI_Alltoall)");
    reduce(mine.data(), recvcount, recv, recvcount, comm->nranks, t, op);
  });
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t s = check_common("Reduce", comm, count, t, stream); s != ncclSuccess) return s;
  if (!valid_op(op)) return warn("Reduce: invalid op %d", int(op)), ncclInvalidArgument;
  if (ncclResult_t s = check_root("Reduce", comm, root); s != ncclSuccess) return s;
  if (ncclResult_t s = check_buffer("Reduce", "sendbuff", send, count); s != ncclSuccess) return s;
  if (comm->rank == root)
    if (ncclResult_t s = check_buffer("Reduce", "recvbuff", recv, count); s != ncclSuccess) return s;
  return submit(comm, stream, [=] {
    const size_t bytes = count * type_size(t);
    std::vector<char> all(comm->rank == root ? bytes * size_t(comm->nranks) : 0);
    check_mpi(MPI_Gather(send, as_int(bytes), MPI_BYTE, all.data(), as_int(bytes), MPI_BYTE, root, comm->mpi),
              "Reduce (MPI_Gather)");
    if (comm->rank == root) reduce(all.data(), count, recv, count, comm->nranks, t, op);
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (ncclResult_t s = check_common("Broadcast", comm, count, t, stream); s != ncclSuccess) return s;
  if (ncclResult_t s = check_root("Broadcast", comm, root); s != ncclSuccess) return s;
  if (comm->rank == root)
    if (ncclResult_t s = check_buffer("Broadcast", "sendbuff", send, count); s != ncclSuccess) return s;
  if (ncclResult_t s = check_buffer("Broadcast", "recvbuff", recv, count); s != ncclSuccess) return s;
  return submit(comm, stream, [=] {
    const size_t bytes = count * type_size(t);
    if (comm->rank == root && send != recv && bytes > 0) std::memmove(recv, send, bytes);
    check_mpi(MPI_Bcast(recv, as_int(bytes), MPI_BYTE, root, comm->mpi), "Broadcast (MPI_Bcast)");
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t stream) {
  if (ncclResult_t s = check_common("AllGather", comm, sendcount, t, stream); s != ncclSuccess) return s;
  if (ncclResult_t s = check_buffer("AllGather", "sendbuff", send, sendcount); s != ncclSuccess) return s;
  if (ncclResult_t s = check_buffer("AllGather", "recvbuff", recv, sendcount); s != ncclSuccess) return s;
  return submit(comm, stream, [=] {
    const size_t bytes = sendcount * type_size(t);
    std::vector<char> mine(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);  // in place
    check_mpi(MPI_Allgather(mine.data(), as_int(bytes), MPI_BYTE, recv, as_int(bytes), MPI_BYTE, comm->mpi),
              "AllGather (MPI_Allgather)");
  });
}

}  // extern "C"
