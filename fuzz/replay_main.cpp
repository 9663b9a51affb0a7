// A main() for the fuzz targets in builds without libFuzzer (any compiler):
//   fuzz_<t> PATH...                   runs LLVMFuzzerTestOneInput on every file named, or found
//                                      (recursively) in a directory named: the seed corpora under
//                                      fuzz/corpus/ and any crash file (ctest: fuzz_replay_<t>)
//   fuzz_<t> --mutate N [--seed S] PATH...
//                                      then N inputs made by random mutations of those files (bit
//                                      flips, bytes set to boundary values, 1/2/4/8-byte integers
//                                      set to 0 / -1 / extremes / +-small deltas, insertions,
//                                      deletions, truncation, duplicated chunks, splices of two
//                                      files), deterministic for a seed. Not coverage-guided like
//                                      libFuzzer, but it runs in the ASan + UBSan emulated build
//                                      with no extra compiler, so CI fuzzes every target on every
//                                      push (see scripts/fuzz for the libFuzzer runs).
// A finding aborts (the run fails) as it would under libFuzzer; the same command reproduces it.
// The mutation run also fails when open file descriptors or memory mappings grew (leaks that
// LeakSanitizer cannot see: a forgotten close or munmap).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

Bytes read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// One random edit of `input` (`other`: another corpus file, for splices).
void mutate_once(Bytes& input, const Bytes& other, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  const size_t n = input.size();
  switch (rng() % 9) {
    case 0:  // flip one bit
      if (n) input[pick(n)] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1: {  // a byte set to a boundary value
      static const uint8_t values[] = {0, 1, 0x7f, 0x80, 0xff, '0', '9', '-', '"', '[', ']', '{', '}', ',', ':'};
      if (n) input[pick(n)] = values[pick(sizeof values)];
      break;
    }
    case 2: {  // a little-endian integer set to an interesting value or nudged
      const size_t width = size_t(1) << (rng() % 4);
      if (n < width) break;
      const size_t at = pick(n - width + 1);
      uint64_t v = 0;
      std::memcpy(&v, &input[at], width);
      static const uint64_t values[] = {0,
                                        1,
                                        ~0ull,
                                        0x7fffffffffffffffull,
                                        0x8000000000000000ull,
                                        0xffffffffull,
                                        0x80000000ull,
                                        0x7fffffffull,
                                        0xffffull,
                                        100000000ull};
      v = rng() % 2 ? values[pick(std::size(values))] : v + uint64_t(int64_t(rng() % 33) - 16);
      std::memcpy(&input[at], &v, width);
      break;
    }
    case 3: {  // insert random bytes
      const size_t at = pick(n + 1), count = 1 + pick(16);
      Bytes extra(count);
      for (uint8_t& b : extra) b = uint8_t(rng());
      input.insert(input.begin() + std::ptrdiff_t(at), extra.begin(), extra.end());
      break;
    }
    case 4: {  // delete a range
      if (!n) break;
      const size_t at = pick(n), count = 1 + pick(std::min<size_t>(n - at, 64));
      input.erase(input.begin() + std::ptrdiff_t(at), input.begin() + std::ptrdiff_t(at + count));
      break;
    }
    case 5:  // truncate
      input.resize(pick(n + 1));
      break;
    case 6: {  // duplicate a chunk somewhere else
      if (!n) break;
      const size_t from = pick(n), count = 1 + pick(std::min<size_t>(n - from, 64)), to = pick(n + 1);
      const Bytes chunk(input.begin() + std::ptrdiff_t(from), input.begin() + std::ptrdiff_t(from + count));
      input.insert(input.begin() + std::ptrdiff_t(to), chunk.begin(), chunk.end());
      break;
    }
    case 7: {  // splice: this file's head, the other's tail
      const size_t cut = pick(n + 1), other_cut = pick(other.size() + 1);
      input.resize(cut);
      input.insert(input.end(), other.begin() + std::ptrdiff_t(other_cut), other.end());
      break;
    }
    default: {  // overwrite a range with a copy of the other file's bytes
      if (!n || other.empty()) break;
      const size_t at = pick(n), from = pick(other.size());
      const size_t count = std::min({n - at, other.size() - from, size_t(1 + pick(32))});
      std::memcpy(&input[at], &other[from], count);
      break;
    }
  }
}

// Open file descriptors and memory mappings of this process: LeakSanitizer sees neither, so the
// mutation run checks that they do not grow (a reader that forgets munmap or close would add one
// per input).
size_t count_lines(const char* path) {
  std::ifstream in(path);
  return size_t(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
}
size_t count_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  long long mutations = 0;
  uint64_t seed = 1;
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mutate" && i + 1 < argc) {
      mutations = std::atoll(argv[++i]);
      continue;
    }
    if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
      continue;
    }
    const std::filesystem::path path = arg;
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(path))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else if (std::filesystem::is_regular_file(path)) {
      inputs.push_back(path);
    } else {
      std::fprintf(stderr, "%s: no such file or directory: %s\n", argv[0], argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s [--mutate N [--seed S]] CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());  // the same order everywhere, so a seed means one run
  std::vector<Bytes> corpus;
  for (const auto& path : inputs) {
    corpus.push_back(read_file(path));
    LLVMFuzzerTestOneInput(corpus.back().data(), corpus.back().size());
  }
  std::mt19937_64 rng(seed);
  const size_t fds_before = count_fds(), maps_before = count_lines("/proc/self/maps");
  for (long long i = 0; i < mutations; ++i) {
    Bytes input = corpus[size_t(rng() % corpus.size())];
    const Bytes& other = corpus[size_t(rng() % corpus.size())];
    for (int edits = 1 + int(rng() % 6); edits > 0; --edits) mutate_once(input, other, rng);
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  const size_t fds_after = count_fds(), maps_after = count_lines("/proc/self/maps");
  // A little slack for the allocator's and threads' own mappings; a leak per input is thousands.
  if (fds_after > fds_before || maps_after > maps_before + 64) {
    std::fprintf(stderr, "%s: leak: open files %zu -> %zu, memory mappings %zu -> %zu over %lld inputs\n", argv[0],
                 fds_before, fds_after, maps_before, maps_after, mutations);
    return 1;
  }
  std::printf("replayed %zu inputs and %lld mutations (seed %llu): no finding\n", inputs.size(), mutations,
              (unsigned long long)seed);
  return 0;
}
