// Tensor basics: views share storage, strides and offsets are right, copies don't alias,
// factories and the caching allocator's statistics.
#include <doctest/doctest.h>

#include "engine/allocator.h"
#include "engine/ops.h"
#include "engine/random.h"

using namespace hg;

namespace {
std::vector<float> values_of(const Tensor& t) { return t.to_vector<float>(); }
}  // namespace

TEST_CASE("views share storage and see writes through any alias") {
  Tensor base = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tr = base.t();
  CHECK(tr.shape() == Shape{3, 2});
  CHECK(tr.strides() == Shape{1, 3});
  CHECK_FALSE(tr.is_contiguous());
  CHECK(tr.storage() == base.storage());
  CHECK(values_of(tr) == std::vector<float>{0, 3, 1, 4, 2, 5});

  Tensor row = base.select(0, 1);  // [3, 4, 5]
  CHECK(row.offset() == 3);
  row.fill_(7.0f);
  CHECK(values_of(base) == std::vector<float>{0, 1, 2, 7, 7, 7});

  Tensor column = base.narrow(1, 2, 1);  // [[2], [7]]
  column.copy_(from_vector(std::vector<float>{-1, -2}, {2, 1}));
  CHECK(values_of(base) == std::vector<float>{0, 1, -1, 7, 7, -2});
  CHECK(values_of(tr) == std::vector<float>{0, 7, 1, 7, -1, -2});

  Tensor flat = base.view({6});
  flat.narrow(0, 0, 2).fill_(9.0);
  CHECK(values_of(base)[0] == 9.0f);
  CHECK(values_of(base)[1] == 9.0f);
}

TEST_CASE("contiguous and clone copy - reshape copies only when it must") {
  Tensor base = randn({3, 4});
  Tensor same = base.reshape({4, 3});
  CHECK(same.storage() == base.storage());
  Tensor tr = base.t();
  Tensor dense = tr.contiguous();
  CHECK(dense.is_contiguous());
  CHECK(dense.storage() != base.storage());
  CHECK(values_of(dense) == values_of(tr));
  Tensor reshaped = tr.reshape({12});
  CHECK(reshaped.storage() != base.storage());
  CHECK(values_of(reshaped) == values_of(tr));
  Tensor copy = base.clone();
  copy.fill_(0.0);
  CHECK(values_of(base) != values_of(copy));
  CHECK(base.contiguous().is_same(base));
}

TEST_CASE("permute - expand - squeeze and unsqueeze give the expected strides") {
  Tensor x = zeros({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  Tensor e = zeros({3, 1}).expand({2, 3, 5});
  CHECK(e.shape() == Shape{2, 3, 5});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(x.unsqueeze(0).shape() == Shape{1, 2, 3, 4});
  CHECK(x.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(x.unsqueeze(3).squeeze(3).shape() == Shape{2, 3, 4});
  // An expanded view reads the same element many times.
  Tensor col = from_vector(std::vector<float>{1, 2, 3}, {3, 1});
  CHECK(values_of(col.expand({3, 2})) == std::vector<float>{1, 1, 2, 2, 3, 3});
}

TEST_CASE("cat joins along any dimension") {
  Tensor a = from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector(std::vector<float>{5, 6}, {2, 1});
  CHECK(values_of(cat({a, b}, 1)) == std::vector<float>{1, 2, 5, 3, 4, 6});
  CHECK(values_of(cat({a, a.t()}, 0)) == std::vector<float>{1, 2, 3, 4, 1, 3, 2, 4});
}

TEST_CASE("dtypes round-trip through from_vector / to_vector and cast") {
  const std::vector<double> v{1.5, -2.25, 3.0, 1e-3};
  for (DType t : {f32, f64, f16, bf16}) {
    Tensor x = from_vector(v, {4}, t);
    CHECK(x.dtype() == t);
    CHECK(x.element_size() == dtype_size(t));
    const std::vector<double> back = x.to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) CHECK(back[i] == doctest::Approx(v[i]).epsilon(t == bf16 ? 1e-2 : 1e-3));
  }
  Tensor ints = from_vector(std::vector<int64_t>{3, -1, 7}, {3}, i32);
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{3, -1, 7});
  CHECK(arange(4).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  // bf16 keeps 8 bits of mantissa: 1 + 2^-9 rounds to 1 (tie to even), 1 + 3*2^-9 to 1 + 2^-7.
  Tensor b = from_vector(std::vector<float>{1.0f + 1.0f / 512, 1.0f + 3.0f / 512}, {2}, bf16);
  CHECK(b.to_vector<float>() == std::vector<float>{1.0f, 1.0f + 1.0f / 128});
}

TEST_CASE("random factories are reproducible from the seed and advance the generator") {
  manual_seed(42);
  Tensor a = randn({1000});
  Tensor b = randn({1000});
  manual_seed(42);
  Tensor a2 = randn({1000});
  CHECK(values_of(a) == values_of(a2));
  CHECK(values_of(a) != values_of(b));
  const std::vector<float> u = rand({10000}).to_vector<float>();
  double mean = 0;
  for (float x : u) {
    CHECK(x >= 0.0f);
    CHECK(x < 1.0f);
    mean += x / u.size();
  }
  CHECK(mean == doctest::Approx(0.5).epsilon(0.02));
  const std::vector<int64_t> r = randint(-3, 4, {2000}).to_vector<int64_t>();
  std::vector<int> counts(7, 0);
  for (int64_t x : r) {
    REQUIRE(x >= -3);
    REQUIRE(x < 4);
    ++counts[size_t(x + 3)];
  }
  for (int c : counts) CHECK(c > 200);
}

TEST_CASE("the CPU caching allocator reuses blocks and tracks current and peak bytes") {
  empty_cache();
  const MemoryStats before = memory_stats();
  {
    Tensor a = empty({1 << 20});  // 4 MiB
    const MemoryStats during = memory_stats();
    CHECK(during.allocated_bytes - before.allocated_bytes >= 4 << 20);
    CHECK(during.peak_allocated_bytes >= during.allocated_bytes);
    CHECK(during.reserved_bytes >= during.allocated_bytes);
  }
  const MemoryStats after = memory_stats();
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.reserved_bytes >= before.reserved_bytes + (4 << 20));  // cached, not returned
  const int64_t hits = after.cache_hits;
  { Tensor again = empty({1 << 20}); }
  CHECK(memory_stats().cache_hits == hits + 1);
  CHECK(memory_stats().reserved_bytes == after.reserved_bytes);
  reset_peak_memory();
  CHECK(memory_stats().peak_allocated_bytes == memory_stats().allocated_bytes);
  empty_cache();
  CHECK(memory_stats().reserved_bytes == memory_stats().allocated_bytes);
}

TEST_CASE("size classes waste at most 12.5% and keep 64-byte alignment") {
  for (size_t n : {size_t(1), size_t(63), size_t(64), size_t(65), size_t(4097), size_t(100000), size_t(123456789)}) {
    const size_t c = CpuCachingAllocator::size_class(n);
    CHECK(c >= n);
    CHECK(c % 64 == 0);
    if (n > 4096) CHECK(double(c) <= double(n) * 1.125 + 64);
  }
  Tensor t = empty({3});
  CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64 == 0);
}

TEST_CASE("devices parse and print") {
  CHECK(Device::parse("cpu") == kCPU);
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cuda").str() == "cuda:0");
  CHECK_THROWS_WITH_AS(Device::parse("tpu"), doctest::Contains("expected \"cpu\", \"cuda\" or \"cuda:N\""), Error);
  CHECK_THROWS_WITH_AS(Device::parse("cuda:x"), doctest::Contains("unknown device \"cuda:x\""), Error);
}

TEST_CASE("u8 is a storage dtype - created, filled, copied, cast and named - and refused by arithmetic") {
  CHECK(dtype_size(u8) == 1);
  CHECK(std::string(dtype_name(u8)) == "u8");
  CHECK_FALSE(is_floating(u8));
  CHECK_FALSE(is_integral(u8));  // not an index type either

  // Fresh random codes, every byte value reachable.
  Tensor idx = randint(0, 256, {6, 7}, i64);
  const std::vector<int64_t> codes64 = idx.to_vector<int64_t>();
  std::vector<uint8_t> codes(codes64.begin(), codes64.end());
  Tensor x = from_vector(codes, {6, 7});
  CHECK(x.dtype() == u8);
  CHECK(x.element_size() == 1);
  CHECK(x.numel() * int64_t(x.element_size()) == 42);
  CHECK(x.to_vector<uint8_t>() == codes);
  CHECK(x.describe().find("u8") != std::string::npos);

  // Factories: empty / zeros / full (a value that is not a byte is refused).
  CHECK(zeros({5}, u8).to_vector<uint8_t>() == std::vector<uint8_t>(5, 0));
  CHECK(full({3, 2}, 255, u8).to_vector<uint8_t>() == std::vector<uint8_t>(6, 255));
  CHECK(empty({4}, u8).dtype() == u8);
  CHECK_THROWS_WITH_AS(full({2}, 1.5, u8), doctest::Contains("cannot be stored exactly in u8"), Error);

  // Strided copies, clone and contiguous move single bytes.
  Tensor tr = x.t();
  Tensor dense = tr.contiguous();
  CHECK(dense.is_contiguous());
  std::vector<uint8_t> expected_t;
  for (int c = 0; c < 7; ++c)
    for (int r = 0; r < 6; ++r) expected_t.push_back(codes[size_t(r * 7 + c)]);
  CHECK(dense.to_vector<uint8_t>() == expected_t);
  Tensor copy = x.clone();
  CHECK(copy.storage() != x.storage());
  CHECK(copy.to_vector<uint8_t>() == codes);
  Tensor part = x.narrow(1, 3, 2);  // an odd byte offset inside each row
  Tensor target = full({6, 2}, 9, u8);
  target.copy_(part);
  std::vector<uint8_t> expected_part;
  for (int r = 0; r < 6; ++r) {
    expected_part.push_back(codes[size_t(r * 7 + 3)]);
    expected_part.push_back(codes[size_t(r * 7 + 4)]);
  }
  CHECK(target.to_vector<uint8_t>() == expected_part);

  // Casts: exact both ways for byte values; floating values saturate to [0, 255] and truncate.
  Tensor as_float = x.to(f32);
  CHECK(as_float.to_vector<float>() == std::vector<float>(codes.begin(), codes.end()));
  CHECK(as_float.to(u8).to_vector<uint8_t>() == codes);
  CHECK(from_vector(std::vector<float>{-3.0f, 0.9f, 254.7f, 300.0f}, {4}).to(u8).to_vector<uint8_t>() ==
        std::vector<uint8_t>{0, 0, 254, 255});

  // Arithmetic refuses the storage type with the dispatch's message; so does autograd.
  CHECK_THROWS_WITH_AS(add(x, x), doctest::Contains("u8"), Error);
  CHECK_THROWS_WITH_AS(mul(x, x), doctest::Contains("u8"), Error);
  CHECK_THROWS_WITH_AS(sum(x), doctest::Contains("u8"), Error);
  CHECK_THROWS_WITH_AS(x.clone().requires_grad_(), doctest::Contains("only floating tensors"), Error);
}
