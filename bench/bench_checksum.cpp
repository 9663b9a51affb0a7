// The cost of checksums against silent corruption (engine/safetensors.h CHECKSUMS), as JSON lines:
//   crc32c       GB/s of crc32c() (the SSE4.2 three-lane path, or the table without it), of the
//                portable table path and, for scale, of a read-only pass that sums the same buffer as
//                64-bit words (reads each byte once, as the CRC does; hot in cache: 1 MiB; from
//                memory: 256 MiB).
//   safetensors  save, and load + reading every float (a sum over all of them, as a training load
//                reads every weight), of one file of `mib` MiB of f32 tensors, with checksums and
//                without (SaveOptions{false}): the seconds of each (best of `repeats`). The file lives in
//                $TMPDIR (default /tmp); save includes fsync, so its time depends on the disk. The load
//                figures are from a HOT page cache (the file was just written): no disk read is timed,
//                only mapping, the CRC and the reads -- a cold load adds the disk's time to both.
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

#include "bench_args.h"
#include "engine/crc32c.h"
#include "engine/safetensors.h"
#include "json_line.h"
#include "timing.h"

using namespace hg;
using hg::bench::Clock;
using hg::bench::best_seconds;

namespace {

volatile uint32_t sink;

void bench_crc(size_t bytes, int repeats) {
  std::vector<unsigned char> buffer(bytes);
  std::mt19937_64 rng(1);
  for (auto& b : buffer) b = static_cast<unsigned char>(rng());
  const double hw = best_seconds(repeats, [&] { sink = crc32c(buffer.data(), bytes); });
  const double table = best_seconds(repeats, [&] { sink = crc32c_portable(buffer.data(), bytes); });
  const double read_s = best_seconds(repeats, [&] {  // the floor: every byte read once, nothing written
    uint64_t sum = 0;
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
      uint64_t word;
      std::memcpy(&word, buffer.data() + i, 8);
      sum += word;
    }
    sink = uint32_t(sum ^ (sum >> 32));
  });
  bench::JsonLine("crc32c")
      .add("bytes", (long long)bytes)
      .add("implementation", crc32c_implementation())
      .add("gb_per_s", double(bytes) / hw / 1e9)
      .add("table_gb_per_s", double(bytes) / table / 1e9)
      .add("read_sum_gb_per_s", double(bytes) / read_s / 1e9)
      .print();
}

double touch_all(const safetensors::File& file) {
  double sum = 0;
  for (const auto& [name, t] : file.tensors) {
    const float* p = t.data<float>();
    float part = 0;
    for (int64_t i = 0; i < t.numel(); ++i) part += p[i];  // every float, as a training load reads them
    sum += double(part);
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
        .add("load_and_read_hot_cache_s", load_s)
        .print();
  }
  std::filesystem::remove(path);
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_checksum [--mib N] [--repeats R]\n"
    "The cost of the per-tensor CRC32C of safetensors files. Prints JSON lines to stdout:\n"
    "crc32c GB/s (hot in cache and from memory) and safetensors save / load seconds with and\n"
    "without checksums (the file lives in $TMPDIR, default /tmp).\n"
    "  --mib N      MiB of the memory-sized buffer and of the safetensors file (default 256)\n"
    "  --repeats R  best of R runs (default 5)\n"
    "  -h, --help   this text\n";

int main(int argc, char** argv) {
  int64_t mib = 256;
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (hg::bench::is_help(argv[i])) hg::bench::exit_with_usage(kUsage);
    if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) mib = std::atoll(argv[++i]);
    else if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else hg::bench::exit_unknown_argument("bench_checksum", argv[i], kUsage);
  }
  bench_crc(size_t(1) << 20, repeats * 20);
  bench_crc(size_t(mib) << 20, repeats);
  bench_file(mib, repeats);
  return 0;
}
