// dist::Communicator collectives, run by ctest under `mpirun -np 2` and `-np 4` (and under the TCP
// transport by tests/dist/run_env.sh; and at world size 1 as a plain process). Every rank generates
// every rank's input from a seed rank 0 broadcasts, so each rank checks the full expected result.
// Sizes are chosen so the world size does not divide them; outputs are poisoned with NaN first.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "dist/communicator.h"
#include "dist/rank0.h"
#include "engine/cuda/cuda_context.h"
#include "engine/ops.h"
#include "kernels/runtime_counters.h"
#include "support/check_error.h"
#include "support/dist_world.h"
#include "support/host_buffer.h"

using namespace hg;
using namespace hg::dist;
using hg::test::comm;
using hg::testing::HostBuffer;

namespace {

uint64_t shared_seed() {
  uint64_t seed = comm().rank() == 0 ? std::random_device{}() : 0;
  comm().broadcast(&seed, 1, DType::i64, 0).wait();
  return seed;
}

// Rank r's input: n values in [-2, 2), rounded to the dtype. bounded: magnitudes in [1/64, 2) with a
// random sign, so that a sum of up to 4 of them (f32, f16 or bf16 values) is exact in fp32 and does not
// depend on the order the ranks are added in.
HostBuffer input_of(int r, int64_t n, DType dtype, uint64_t seed, bool bounded = false) {
  std::mt19937_64 rng(seed * 1000003 + uint64_t(r));
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  HostBuffer b(dtype, n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = u(rng);
    b.set(i, bounded ? std::copysign(std::max(std::abs(v), 1.0 / 64), v) : v);
  }
  if (bounded && dtype == DType::f32)  // keep 8 significant bits, as a bf16 has
    for (int64_t i = 0; i < n; ++i) b.set(i, double(float(bfloat16(float(b.get(i))))));
  return b;
}

// The reduction of every rank's input, in double (then compared with a dtype-aware tolerance).
std::vector<double> expected_reduction(int64_t n, DType dtype, ReduceOp op, uint64_t seed, bool bounded = false) {
  const int world = comm().world_size();
  std::vector<double> out(size_t(n), op == ReduceOp::max ? -INFINITY : 0.0);
  for (int r = 0; r < world; ++r) {
    const HostBuffer in = input_of(r, n, dtype, seed, bounded);
    for (int64_t i = 0; i < n; ++i)
      out[size_t(i)] = op == ReduceOp::max ? std::max(out[size_t(i)], in.get(i)) : out[size_t(i)] + in.get(i);
  }
  if (op == ReduceOp::avg)
    for (double& v : out) v /= world;
  return out;
}

double tolerance(DType dtype, double expected) {
  const double eps = dtype == DType::f32 ? 1e-6 : dtype == DType::f16 ? 1e-3 : 8e-3;  // 1 ulp of the result
  return eps * (std::abs(expected) + 1.0);
}

void check_close(const HostBuffer& got, const std::vector<double>& want, int64_t offset, const char* what) {
  for (int64_t i = 0; i < got.size(); ++i) {
    const double w = want[size_t(offset + i)];
    INFO(what, " ", dtype_name(got.dtype()), " element ", i, " on rank ", comm().rank());
    REQUIRE(std::abs(got.get(i) - w) <= tolerance(got.dtype(), w));
  }
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
const int64_t kSizes[] = {1, 7, 1001, 4099};

}  // namespace

TEST_CASE("shard_of splits any size into balanced contiguous shards") {
  for (int world : {1, 2, 3, 4, 7}) {
    for (int64_t n : {0, 1, 5, 1001}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const Shard s = shard_of(n, r, world);
        CHECK(s.offset == next);
        CHECK((s.count == n / world || s.count == n / world + 1));
        next += s.count;
      }
      CHECK(next == n);
    }
  }
  CHECK_THROWS_AS(shard_of(5, 2, 2), hg::Error);
}

TEST_CASE("all_reduce sum avg max on every float dtype") {
  const uint64_t seed = shared_seed();
  for (DType dtype : kDtypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        HostBuffer data = input_of(comm().rank(), n, dtype, seed);
        comm().all_reduce(data.data(), n, dtype, op).wait();
        check_close(data, expected_reduction(n, dtype, op, seed), 0, reduce_op_name(op));
      }
}

TEST_CASE("reduce_scatter with balanced and uneven counts") {
  const uint64_t seed = shared_seed();
  const int world = comm().world_size();
  for (DType dtype : kDtypes)
    for (int64_t n : kSizes) {
      std::vector<std::vector<int64_t>> splits{shard_counts(n, world)};
      // Uneven: everything on the last rank (the others receive nothing).
      std::vector<int64_t> last(size_t(world), 0);
      last.back() = n;
      splits.push_back(last);
      for (const auto& counts : splits)
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          const HostBuffer send = input_of(comm().rank(), n, dtype, seed);
          int64_t offset = 0;
          for (int r = 0; r < comm().rank(); ++r) offset += counts[size_t(r)];
          HostBuffer recv(dtype, counts[size_t(comm().rank())]);
          recv.poison_with_nan();
          comm().reduce_scatter(send.data(), recv.data(), counts, dtype, op).wait();
          check_close(recv, expected_reduction(n, dtype, op, seed), offset, "reduce_scatter");
        }
    }
}

TEST_CASE("all_gather with uneven counts and in place") {
  const uint64_t seed = shared_seed();
  const int world = comm().world_size();
  const int rank = comm().rank();
  for (DType dtype : kDtypes)
    for (int64_t n : kSizes) {
      const std::vector<int64_t> counts = shard_counts(n, world);
      const Shard mine = shard_of(n, rank, world);
      const HostBuffer full = input_of(0, n, dtype, seed);  // what the gathered buffer must hold
      HostBuffer send(dtype, mine.count);
      for (int64_t i = 0; i < mine.count; ++i) send.set(i, full.get(mine.offset + i));
      HostBuffer recv(dtype, n);
      recv.poison_with_nan();
      comm().all_gather(send.data(), recv.data(), counts, dtype).wait();
      CHECK(recv.values() == full.values());

      // In place: this rank's shard already sits in its slot of the output (ZeRO's flat buffers).
      HostBuffer in_place(dtype, n);
      in_place.poison_with_nan();
      for (int64_t i = 0; i < mine.count; ++i) in_place.set(mine.offset + i, full.get(mine.offset + i));
      auto* slot = static_cast<char*>(in_place.data()) + size_t(mine.offset) * dtype_size(dtype);
      comm().all_gather(slot, in_place.data(), counts, dtype).wait();
      CHECK(in_place.values() == full.values());
    }
}

TEST_CASE("broadcast from every root and barrier") {
  const uint64_t seed = shared_seed();
  for (int root = 0; root < comm().world_size(); ++root)
    for (DType dtype : kDtypes) {
      HostBuffer data(dtype, 1001);
      if (comm().rank() == root) {
        data = input_of(root, 1001, dtype, seed);
      } else {
        data.poison_with_nan();
      }
      comm().broadcast(data.data(), 1001, dtype, root).wait();
      CHECK(data.values() == input_of(root, 1001, dtype, seed).values());
    }
  comm().barrier().wait();
}

TEST_CASE("collectives queue asynchronously and complete in order") {
  const uint64_t seed = shared_seed();
  std::vector<HostBuffer> buffers;
  for (int k = 0; k < 8; ++k) buffers.push_back(input_of(comm().rank(), 513 + k, DType::f32, seed + uint64_t(k)));
  std::vector<Work> works;
  for (auto& b : buffers) works.push_back(comm().all_reduce(b.data(), b.size(), DType::f32, ReduceOp::sum));
  works.back().wait();  // the last one done implies the earlier ones (one communication stream)
  for (Work& w : works) CHECK(w.completed());
  for (int k = 0; k < 8; ++k)
    check_close(buffers[size_t(k)], expected_reduction(513 + k, DType::f32, ReduceOp::sum, seed + uint64_t(k)), 0,
                "async");
}

TEST_CASE("tensor collectives use balanced shards") {
  const int world = comm().world_size();
  const int rank = comm().rank();
  Tensor x = full({1003}, float(rank + 1));
  comm().all_reduce(x, ReduceOp::avg).wait();
  CHECK(x.to_vector<float>()[1002] == doctest::Approx((world + 1) / 2.0));

  Tensor send = full({1003}, 1.0f);
  Tensor recv = full({shard_of(1003, rank, world).count}, NAN);
  comm().reduce_scatter(send, recv).wait();
  for (float v : recv.to_vector<float>()) CHECK(v == float(world));

  Tensor part = full({shard_of(1003, rank, world).count}, float(rank));
  Tensor gathered = full({1003}, NAN);
  comm().all_gather(part, gathered).wait();
  const std::vector<float> g = gathered.to_vector<float>();
  for (int r = 0; r < world; ++r) {
    const Shard s = shard_of(1003, r, world);
    for (int64_t i = 0; i < s.count; ++i) CHECK(g[size_t(s.offset + i)] == float(r));
  }
}

TEST_CASE("on_rank0 and throw_if_any_failed give every rank the failing rank's text") {
  const int world = comm().world_size();
  const std::string why = "cannot write 'ck/x': No space left on device (errno 28) #" + std::to_string(shared_seed());
  try {
    on_rank0(&comm(), "write the checkpoint", [&] { throw Error(why); });
    FAIL("on_rank0 did not throw");
  } catch (const Error& e) {
    const std::string expected = comm().rank() == 0 ? why : "rank 0 failed to write the checkpoint: " + why;
    CHECK(std::string(e.what()) == expected);
  }
  on_rank0(&comm(), "do nothing", [] {});  // no failure: every rank returns
  const int failing = world - 1;
  try {
    throw_if_any_failed(&comm(), comm().rank() == failing ? why : "");
    FAIL("throw_if_any_failed did not throw");
  } catch (const Error& e) {
    const std::string expected = comm().rank() == failing ? why : "rank " + std::to_string(failing) + ": " + why;
    CHECK(std::string(e.what()) == expected);
  }
  throw_if_any_failed(&comm(), "");  // none failed
}

TEST_CASE("collectives on the emulated CUDA device" * doctest::test_suite("cuda")) {
  if (!cuda::is_available()) {
    MESSAGE("SKIPPED: no CUDA device (" << cuda::unavailable_reason() << ")");
    return;
  }
  if (!cuda::is_emulated() && (!Communicator::nccl_available() || comm().local_rank() >= cuda::device_count())) {
    MESSAGE("SKIPPED: a real GPU without NCCL in this build, or fewer GPUs than local ranks");
    return;
  }
  const int world = comm().world_size();
  for (DType dtype : kDtypes) {
    // The emulator has one device, which every rank may use (its memory is host memory).
    const int device = cuda::is_emulated() ? comm().local_rank() % cuda::device_count() : comm().local_rank();
    Tensor x = full({1001}, float(comm().rank() + 1)).to(dtype).to(Device::cuda(device));
    comm().all_reduce(x, ReduceOp::sum).wait();
    for (float v : x.to(kCPU).to(DType::f32).to_vector<float>()) CHECK(v == float(world * (world + 1) / 2));
  }
}

namespace {

// Whether CUDA buffers go through the NCCL transport here (a real GPU, or HALFGRAD_EMULATED_NCCL=1).
bool nccl_expected() {
  const char* emulated = std::getenv("HALFGRAD_EMULATED_NCCL");
  return !cuda::is_emulated() || (emulated && std::string(emulated) == "1");
}

bool nccl_in_use(const Communicator& c) {
  const std::string backend = c.backend();
  return backend.size() >= 5 && backend.compare(backend.size() - 5, 5, "+nccl") == 0;
}

Device rank_device() {
  return Device::cuda(cuda::is_emulated() ? comm().local_rank() % cuda::device_count() : comm().local_rank());
}

// A device buffer holding `h` (outputs: a poisoned HostBuffer, 0xff bytes = NaN).
Tensor to_device(const HostBuffer& h, const Device& device) {
  Tensor t = empty({std::max<int64_t>(h.size(), 1)}, h.dtype(), device);
  cuda::copy_to_device(t.data_ptr(), h.data(), h.bytes(), device.index);
  return t;
}
HostBuffer from_device(const Tensor& t, int64_t n) {
  HostBuffer h(t.dtype(), n);
  cuda::copy_to_host(h.data(), t.data_ptr(), h.bytes(), t.device().index);
  return h;
}
bool same_bits(const HostBuffer& a, const HostBuffer& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

}  // namespace

// On NCCL (HALFGRAD_EMULATED_NCCL=1 in the emulated build, or a real GPU) halves are reduced in fp32
// like the host transports do, so the results agree bit for bit (inputs whose fp32 sums are exact,
// world sizes 1, 2, 4: NCCL's avg multiplies by 1/N, the host transports divide the sum by N).
TEST_CASE("collectives on the CUDA device give the host transport's bits" * doctest::test_suite("cuda")) {
  if (!cuda::is_available()) {
    MESSAGE("SKIPPED: no CUDA device (" << cuda::unavailable_reason() << ")");
    return;
  }
  const Device device = rank_device();
  const uint64_t seed = shared_seed();
  const int world = comm().world_size(), rank = comm().rank();
  for (DType dtype : {DType::bf16, DType::f16, DType::f32})
    for (int64_t n : {int64_t(7), int64_t(1001), int64_t(4099)}) {
      const HostBuffer in = input_of(rank, n, dtype, seed, /*bounded=*/true);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        INFO("all_reduce ", reduce_op_name(op), " ", dtype_name(dtype), " n ", n, " rank ", rank);
        HostBuffer host = in;
        comm().all_reduce(host.data(), n, dtype, op).wait();
        Tensor x = to_device(in, device);
        comm().all_reduce(x.data_ptr(), n, dtype, op, device).wait();
        const HostBuffer got = from_device(x, n);
        CHECK(same_bits(got, host));
        check_close(got, expected_reduction(n, dtype, op, seed, true), 0, "all_reduce");
      }
      std::vector<int64_t> last(size_t(world), 0);  // uneven: all on the last rank
      last.back() = n;
      for (const auto& counts : {shard_counts(n, world), last})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
          INFO("reduce_scatter ", reduce_op_name(op), " ", dtype_name(dtype), " n ", n, " rank ", rank);
          const int64_t mine = counts[size_t(rank)];
          int64_t offset = 0;
          for (int r = 0; r < rank; ++r) offset += counts[size_t(r)];
          HostBuffer host(dtype, mine);
          comm().reduce_scatter(in.data(), host.data(), counts, dtype, op).wait();
          const Tensor send = to_device(in, device);
          Tensor recv = to_device(HostBuffer(dtype, mine), device);
          comm().reduce_scatter(send.data_ptr(), recv.data_ptr(), counts, dtype, op, device).wait();
          const HostBuffer got = from_device(recv, mine);
          CHECK(same_bits(got, host));
          check_close(got, expected_reduction(n, dtype, op, seed, true), offset, "reduce_scatter");
        }
      {  // uneven all_gather: rank r contributes its first r + 1 elements
        std::vector<int64_t> counts(static_cast<size_t>(world));
        int64_t total = 0;
        for (int r = 0; r < world; ++r) total += counts[size_t(r)] = std::min<int64_t>(n, r + 1);
        const Tensor send = to_device(in, device);
        Tensor recv = to_device(HostBuffer(dtype, total), device);
        comm().all_gather(send.data_ptr(), recv.data_ptr(), counts, dtype, device).wait();
        const HostBuffer got = from_device(recv, total);
        int64_t at = 0;
        for (int r = 0; r < world; ++r) {
          const HostBuffer theirs = input_of(r, n, dtype, seed, true);
          for (int64_t i = 0; i < counts[size_t(r)]; ++i) CHECK(got.get(at + i) == theirs.get(i));
          at += counts[size_t(r)];
        }
      }
    }
  if (nccl_expected()) CHECK(nccl_in_use(comm()));
}

// The NCCL transport itself (suite "nccl": registered where NCCL carries the CUDA buffers, the
// _nccl_np2/4 tests of the emulated build and every CUDA registration of the nvcc build).
TEST_CASE("the NCCL transport counts its calls and reduces halves in fp32 unless told not to" *
          doctest::test_suite("nccl")) {
  if (!cuda::is_available()) {
    MESSAGE("SKIPPED: no CUDA device (" << cuda::unavailable_reason() << ")");
    return;
  }
  const Device device = rank_device();
  const int world = comm().world_size(), rank = comm().rank();
  const uint64_t seed = shared_seed();
  const int64_t n = 4099;
  const HostBuffer in = input_of(rank, n, DType::bf16, seed);  // unbounded: bf16 partial sums round

  // One ncclAllReduce per all_reduce; an uneven reduce_scatter is one ncclReduce per rank.
  Tensor x = to_device(in, device);
  RuntimeCounters before = runtime_counters();
  comm().all_reduce(x.data_ptr(), n, DType::bf16, ReduceOp::sum, device).wait();
  REQUIRE(nccl_in_use(comm()));
  CHECK((runtime_counters() - before)[RuntimeCounter::collective_calls] == 1);
  std::vector<int64_t> counts(size_t(world), 1);
  counts.back() = n - (world - 1);
  Tensor recv = to_device(HostBuffer(DType::bf16, counts[size_t(rank)]), device);
  before = runtime_counters();
  comm().reduce_scatter(x.data_ptr(), recv.data_ptr(), counts, DType::bf16, ReduceOp::sum, device).wait();
  CHECK((runtime_counters() - before)[RuntimeCounter::collective_calls] == (world > 1 ? world : 1));

  // fp32 reduction: the sum of the ranks' bf16 values rounded once to bf16.
  x = to_device(in, device);
  comm().all_reduce(x.data_ptr(), n, DType::bf16, ReduceOp::sum, device).wait();
  const HostBuffer wide = from_device(x, n);
  std::vector<double> exact(size_t(n), 0.0);
  for (int r = 0; r < world; ++r) {
    const HostBuffer theirs = input_of(r, n, DType::bf16, seed);
    for (int64_t i = 0; i < n; ++i) exact[size_t(i)] += theirs.get(i);
  }
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) off += wide.get(i) != double(float(bfloat16(float(exact[size_t(i)]))));
  CHECK(off == 0);

  // reduce_halves_in_fp32(false): NCCL adds bf16 values, rounding every partial sum; with three or
  // more ranks that differs from one rounding somewhere in 4099 elements.
  Communicator halves(CommunicatorOptions().timeout(std::chrono::seconds(60)).reduce_halves_in_fp32(false));
  Tensor y = to_device(in, device);
  halves.all_reduce(y.data_ptr(), n, DType::bf16, ReduceOp::sum, device).wait();
  REQUIRE(nccl_in_use(halves));
  const HostBuffer narrow = from_device(y, n);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    CHECK(std::abs(narrow.get(i) - exact[size_t(i)]) <= 2 * world * 8e-3 * (std::abs(exact[size_t(i)]) + 1.0));
    differ += narrow.get(i) != wide.get(i);
  }
  if (world >= 3) CHECK(differ > 0);
}

TEST_CASE("bad collective arguments are errors") {
  std::vector<int64_t> wrong(size_t(comm().world_size() + 1), 1);
  float buffer[8] = {};
  CHECK_THROWS_WITH_AS(comm().all_gather(buffer, buffer, wrong, DType::f32), doctest::Contains("one count per rank"),
                       hg::Error);
  CHECK_THROWS_WITH_AS(comm().broadcast(buffer, 1, DType::f32, comm().world_size()), doctest::Contains("root"),
                       hg::Error);
  int32_t ints[2] = {};
  CHECK_THROWS_WITH_AS(comm().all_reduce(ints, 2, DType::i32, ReduceOp::avg), doctest::Contains("avg of i32"),
                       hg::Error);
}
