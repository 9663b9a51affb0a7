// The cost of checksums against silent corruption (engine/safetensors.h CHECKSUMS), as JSON lines:
//   crc32c       GB/s of crc32c() (the SSE4.2 three-lane path, or the table without it), of the
//                portable table path and, for scale, of memcpy over the same buffer (hot in cache: 1 MiB;
//                from memory: 256 MiB).
//   safetensors  save and load (+ touching every byte, as training does) of one file of `mib` MiB of
//                f32 tensors, with checksums and without (SaveOptions{false}): the seconds of each
//                (best of `repeats`) and the overhead. The file lives in $TMPDIR (default /tmp); save
//                includes fsync, so its time depends on the disk.
// Usage: bench_checksum [--mib N] [--repeats R]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/crc32c.h"
#include "engine/safetensors.h"
#include "json_line.h"

using namespace hg;
using Clock = std::chrono::steady_clock;

namespace {

template <class Fn>
double best_seconds(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

volatile uint32_t sink;

void bench_crc(size_t bytes, int repeats) {
  std::vector<unsigned char> buffer(bytes), copy(bytes);
  std::mt19937_64 rng(1);
  for (auto& b : buffer) b = static_cast<unsigned char>(rng());
  const double hw = best_seconds(repeats, [&] { sink = crc32c(buffer.data(), bytes); });
  const double table = best_seconds(repeats, [&] { sink = crc32c_portable(buffer.data(), bytes); });
  const double memcpy_s = best_seconds(repeats, [&] {
    std::memcpy(copy.data(), buffer.data(), bytes);
    sink = copy[bytes / 2];
  });
  bench::JsonLine("crc32c")
      .add("bytes", (long long)bytes)
      .add("implementation", crc32c_implementation())
      .add("gb_per_s", double(bytes) / hw / 1e9)
      .add("table_gb_per_s", double(bytes) / table / 1e9)
      .add("memcpy_gb_per_s", double(bytes) / memcpy_s / 1e9)
      .print();
}

double touch_all(const safetensors::File& file) {
  double sum = 0;
  for (const auto& [name, t] : file.tensors) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); i += 1024) sum += double(p[i]);  // one read per 4 KiB page
  }
  return sum;
}

void bench_file(int64_t mib, int repeats) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/bench_checksum_" + std::to_string(::getpid()) +
                           ".safetensors";
  // 16 tensors of mib/16 MiB each, like a model's weight matrices.
  safetensors::NamedTensors tensors;
  const int64_t per_tensor = mib * (1 << 20) / 16 / 4;
  for (int i = 0; i < 16; ++i) tensors.emplace_back("h." + std::to_string(i) + ".weight", randn({per_tensor}));
  for (bool checksums : {false, true}) {
    const safetensors::SaveOptions options{checksums};
    const double save_s = best_seconds(repeats, [&] { safetensors::save(path, tensors, {}, options); });
    volatile double keep = 0;
    const double load_s = best_seconds(repeats, [&] { keep = touch_all(safetensors::load(path)); });
    bench::JsonLine("safetensors")
        .add("mib", (long long)mib)
        .add("checksums", checksums)
        .add("save_s", save_s)
        .add("load_and_touch_s", load_s)
        .print();
  }
  std::filesystem::remove(path);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mib = 256;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mib") == 0) mib = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--repeats") == 0) repeats = std::atoi(argv[i + 1]);
  }
  bench_crc(size_t(1) << 20, repeats * 20);
  bench_crc(size_t(mib) << 20, repeats);
  bench_file(mib, repeats);
  return 0;
}
