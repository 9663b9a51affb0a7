// safetensors I/O: bitwise round trips of every dtype and layout, the on-disk layout, files from other
// writers, every malformed-file rule (each file built byte by byte here), the lifetime and
// copy-on-write of the mapping, and atomic saves.
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

#include "engine/allocator.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/safetensors.h"

using namespace hg;
namespace st = hg::safetensors;
namespace fs = std::filesystem;

namespace {

// A fresh directory under /tmp, removed with everything in it.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/hg_safetensors_XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string u64_le(uint64_t v) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((v >> (8 * i)) & 0xff);
  return bytes;
}

// A safetensors file: the length prefix (the header's true length unless overridden), header, data.
std::string make_file(const std::string& header, const std::string& data, std::optional<uint64_t> length = {}) {
  return u64_le(length ? *length : header.size()) + header + data;
}

template <class T>
std::string le_bytes(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The row-major bytes of a tensor's elements.
std::string tensor_bytes(const Tensor& t) {
  Tensor dense = t.contiguous();
  return std::string(static_cast<const char*>(dense.data_ptr()), size_t(dense.numel()) * dense.element_size());
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Checks that `message` holds every fragment (showing the message when one is missing).
void check_mentions(const std::string& message, const std::vector<std::string>& fragments) {
  INFO("message: ", message);
  CHECK_FALSE(message.empty());
  for (const std::string& fragment : fragments) {
    INFO("expected fragment: ", fragment);
    CHECK(message.find(fragment) != std::string::npos);
  }
}

// How many of this process's memory mappings show `path`.
int mappings_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find(path) != std::string::npos) ++count;
  return count;
}

bool any_temp_file(const TempDir& dir) {
  for (const std::string& name : dir.entries())
    if (name.find(".tmp.") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("round trip of every dtype - rank 0 - empty and non-contiguous tensors is bitwise exact") {
  TempDir dir;
  manual_seed(7);
  st::NamedTensors tensors;
  for (DType t : {f32, f64, f16, bf16}) {
    const std::string name = dtype_name(t);
    tensors.emplace_back(name + ".matrix", randn({3, 5}, t));
    tensors.emplace_back(name + ".scalar", scalar_tensor(-2.75, t));
    tensors.emplace_back(name + ".empty", empty({0, 4}, t));
    tensors.emplace_back(name + ".transposed", randn({4, 6}, t).t());
    tensors.emplace_back(name + ".narrowed", randn({5, 7}, t).narrow(1, 2, 3));
  }
  tensors.emplace_back("i32.values", from_vector(std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -1, 0, 1,
                                                                      std::numeric_limits<int32_t>::max(), 12345},
                                                 {2, 3}));
  tensors.emplace_back("i64.values", from_vector(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0,
                                                                      std::numeric_limits<int64_t>::max()},
                                                 {4}));
  tensors.emplace_back("i32.transposed", randint(-1000, 1000, {3, 4}, i32).t());
  tensors.emplace_back("i64.scalar", scalar_tensor(-9, i64));
  tensors.emplace_back("i64.empty", empty({2, 0, 3}, i64));
  // u8 (8-bit optimizer codes, safetensors "U8"): every byte value, strided, empty.
  std::vector<uint8_t> bytes(256);
  for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = uint8_t(b);
  tensors.emplace_back("u8.values", from_vector(bytes, {16, 16}));
  tensors.emplace_back("u8.transposed", randint(0, 256, {5, 9}, i64).to(u8).t());
  tensors.emplace_back("u8.empty", empty({0}, u8));
  tensors.emplace_back("f32.rank8", randn({1, 2, 1, 2, 1, 2, 1, 2}));
  // Special values survive bit for bit (NaN payload, -0, infinities, denormal).
  tensors.emplace_back("f32.special", from_vector(std::vector<float>{std::numeric_limits<float>::quiet_NaN(), -0.0f,
                                                                     std::numeric_limits<float>::infinity(),
                                                                     -std::numeric_limits<float>::infinity(),
                                                                     std::numeric_limits<float>::denorm_min()},
                                                  {5}));
  CHECK_FALSE(tensors[3].second.is_contiguous());

  const std::string path = dir.file("all.safetensors");
  st::save(path, tensors);
  const st::File file = st::load(path);
  REQUIRE(file.tensors.size() == tensors.size());
  CHECK(file.metadata.empty());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, original] = tensors[i];
    INFO("tensor ", name);
    // Non-empty tensors come back in save order (ordered by offset).
    const Tensor* loaded = file.find(name);
    REQUIRE(loaded != nullptr);
    CHECK(loaded->dtype() == original.dtype());
    CHECK(loaded->shape() == original.shape());
    if (original.numel() > 0) CHECK(loaded->is_contiguous());
    CHECK(loaded->device() == kCPU);
    CHECK(tensor_bytes(*loaded) == tensor_bytes(original));
  }
  std::vector<std::string> names;
  for (const auto& [name, t] : file.tensors) names.push_back(name);
  std::vector<std::string> expected;
  for (const auto& [name, t] : tensors) expected.push_back(name);
  CHECK(names == expected);
  CHECK(file.find("missing") == nullptr);
}

TEST_CASE("metadata round trip and tensors that require grad are saved by value") {
  TempDir dir;
  const st::Metadata metadata = {{"format", "pt"}, {"empty", ""}, {"unicode", "λ → ∞"}, {"quote", "a \"b\"\n"}};
  Tensor w = randn({2, 2}).requires_grad_();
  const std::string path = dir.file("meta.safetensors");
  st::save(path, {{"w", w}}, metadata);
  const st::File file = st::load(path);
  CHECK(file.metadata == metadata);
  CHECK_FALSE(file.tensors[0].second.requires_grad());
  CHECK(tensor_bytes(file.tensors[0].second) == tensor_bytes(w));

  st::save(path, {}, {});
  const st::File none = st::load(path);
  CHECK(none.tensors.empty());
  CHECK(none.metadata.empty());
}

TEST_CASE("the header is space-padded to a multiple of 8 and the file size is exact") {
  TempDir dir;
  for (int extra = 0; extra < 8; ++extra) {
    // Names of growing length move the header length through every remainder mod 8.
    const std::string name = std::string(size_t(extra) + 1, 't');
    st::NamedTensors tensors = {{name, randn({3}, f16)}, {"b", randn({2, 2}, f64)}};
    const std::string path = dir.file("pad.safetensors");
    st::save(path, tensors, {{"k", "v"}});
    const std::string bytes = read_bytes(path);
    REQUIRE(bytes.size() >= 8);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    INFO("header length ", n);
    CHECK(n % 8 == 0);
    CHECK(bytes.size() == 8 + n + 3 * 2 + 4 * 8);
    const std::string header = bytes.substr(8, n);
    CHECK(header.front() == '{');
    const size_t last = header.find_last_not_of(' ');
    CHECK(header[last] == '}');
    CHECK(n - (last + 1) < 8);
    // The caller's metadata first, then the header's CRC32C and one per tensor (engine/safetensors.h CHECKSUMS).
    CHECK(header.find("\"__metadata__\":{\"k\":\"v\",\"halfgrad.crc32c.__metadata__\":\"") != std::string::npos);
    CHECK(header.find("\",\"halfgrad.crc32c." + name + "\":\"") != std::string::npos);
    CHECK(header.find("\"" + name + "\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}") !=
          std::string::npos);
    CHECK(header.find("\"b\":{\"dtype\":\"F64\",\"shape\":[2,2],\"data_offsets\":[6,38]}") != std::string::npos);
    CHECK(bytes.substr(8 + n, 6) == tensor_bytes(tensors[0].second));
    CHECK(bytes.substr(8 + n + 6) == tensor_bytes(tensors[1].second));
  }
}

TEST_CASE("a file from another writer - keys in any order and no padding - loads") {
  TempDir dir;
  // Data: a = f32 [1.5, -2], b = f16 [1, -0.5, 65504] (bit patterns), c = i64 [[7], [-8]], d = bf16 [] and
  // e = a BF16 scalar 3.0. The header is 1 byte longer than a multiple of 8 would be, so most data is
  // misaligned in memory and must be copied.
  const std::string data = le_bytes(std::vector<float>{1.5f, -2.0f}) +
                           le_bytes(std::vector<uint16_t>{0x3c00, 0xb800, 0x7bff}) +
                           le_bytes(std::vector<uint16_t>{0x4040}) + le_bytes(std::vector<int64_t>{7, -8});
  std::string header = R"({"c":{"shape":[2,1],"data_offsets":[16,32],"dtype":"I64"},)"
                       R"("__metadata__":{"format":"pt","source":"hand"},)"
                       R"("b":{"data_offsets":[8,14],"dtype":"F16","shape":[3]},)"
                       R"("d" : { "dtype" : "BF16" , "shape" : [0] , "data_offsets" : [14, 14] },)"
                       R"("e":{"dtype":"BF16","shape":[],"data_offsets":[14,16]},)"
                       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  header.insert(header.size() - 1, std::string((9 - header.size() % 8) % 8, ' '));  // length = 1 mod 8
  REQUIRE(header.size() % 8 == 1);
  const std::string path = dir.file("other.safetensors");
  write_bytes(path, make_file(header, data));

  const int64_t allocations_before = memory_stats().allocation_count;
  const st::File file = st::load(path);
  CHECK(memory_stats().allocation_count > allocations_before);  // misaligned tensors were copied
  CHECK(file.metadata == st::Metadata{{"format", "pt"}, {"source", "hand"}});
  REQUIRE(file.tensors.size() == 5);
  CHECK(file.tensors[0].first == "a");
  CHECK(file.tensors[1].first == "b");
  CHECK(file.tensors[2].first == "d");  // zero-size at 14, before the scalar at [14, 16]
  CHECK(file.tensors[3].first == "e");
  CHECK(file.tensors[4].first == "c");
  CHECK(file.find("a")->to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK(file.find("b")->dtype() == f16);
  CHECK(file.find("b")->to_vector<float>() == std::vector<float>{1.0f, -0.5f, 65504.0f});
  CHECK(file.find("c")->shape() == Shape{2, 1});
  CHECK(file.find("c")->to_vector<int64_t>() == std::vector<int64_t>{7, -8});
  CHECK(file.find("d")->shape() == Shape{0});
  CHECK(file.find("d")->dtype() == bf16);
  CHECK(file.find("e")->dim() == 0);
  CHECK(file.find("e")->item() == 3.0);
}

TEST_CASE("an aligned file loads without copying - tensors view the mapping") {
  TempDir dir;
  const std::string path = dir.file("aligned.safetensors");
  // Ordered so every offset is a multiple of its element size (save keeps the order it is given).
  st::save(path, {{"c", arange(10)}, {"a", randn({64, 64})}, {"b", randn({3}, f16)}});
  const int64_t allocations_before = memory_stats().allocation_count;
  const st::File file = st::load(path);
  CHECK(memory_stats().allocation_count == allocations_before);
  CHECK(mappings_of(path) >= 1);
}

TEST_CASE("each malformed-file rule is rejected with a message naming the file - the tensor and the rule") {
  TempDir dir;
  const std::string f32_2x3 = std::string(24, '\0');
  struct Case {
    const char* rule;
    std::string bytes;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"empty file", "", {"0 bytes", "shorter than the 8-byte header length"}},
      {"file shorter than 8 bytes", std::string("\x05\0\0\0", 4), {"4 bytes", "shorter than the 8-byte header length"}},
      {"header length over 100 MB", u64_le(100'000'001) + "{}", {"header length 100000001", "exceeds the limit"}},
      {"header length past the file end", make_file("{}", "", 1000), {"header length 1000", "runs past the end"}},
      {"empty header", make_file("", ""), {"not valid UTF-8 JSON"}},
      {"header not JSON", make_file("{not json}", ""), {"not valid UTF-8 JSON", "parse error"}},
      {"header not UTF-8", make_file("{\"w\xff\xfe\":{}}", ""), {"not valid UTF-8 JSON", "UTF-8"}},
      {"header not an object", make_file("[1,2]", ""), {"header is a JSON array", "expected a JSON object"}},
      {"header a string", make_file("\"x\"", ""), {"header is a JSON string", "expected a JSON object"}},
      {"entry not an object", make_file(R"({"w":[1,2]})", ""), {"tensor 'w'", "entry is array", "expected an object"}},
      {"missing dtype",
       make_file(R"({"w":{"shape":[2,3],"data_offsets":[0,24]}})", f32_2x3),
       {"tensor 'w'", "missing field 'dtype'"}},
      {"missing shape",
       make_file(R"({"w":{"dtype":"F32","data_offsets":[0,24]}})", f32_2x3),
       {"tensor 'w'", "missing field 'shape'"}},
      {"missing data_offsets",
       make_file(R"({"w":{"dtype":"F32","shape":[2,3]}})", f32_2x3),
       {"tensor 'w'", "missing field 'data_offsets'"}},
      {"dtype not a string",
       make_file(R"({"w":{"dtype":7,"shape":[2,3],"data_offsets":[0,24]}})", f32_2x3),
       {"tensor 'w'", "field 'dtype' is number", "expected a string"}},
      {"shape not an array",
       make_file(R"({"w":{"dtype":"F32","shape":6,"data_offsets":[0,24]}})", f32_2x3),
       {"tensor 'w'", "field 'shape' is number", "expected an array"}},
      {"data_offsets not a pair",
       make_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12,24]}})", f32_2x3),
       {"tensor 'w'", "field 'data_offsets' is [0,12,24]", "expected an array [begin, end]"}},
      {"negative shape",
       make_file(R"({"w":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", f32_2x3),
       {"tensor 'w'", "shape entry -2 is negative"}},
      {"fractional shape",
       make_file(R"({"w":{"dtype":"F32","shape":[2.5,3],"data_offsets":[0,24]}})", f32_2x3),
       {"tensor 'w'", "shape entry 2.5 is not an integer"}},
      {"string shape",
       make_file(R"({"w":{"dtype":"F32","shape":["2",3],"data_offsets":[0,24]}})", f32_2x3),
       {"tensor 'w'", "shape entry \"2\" is not an integer"}},
      {"negative offset",
       make_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[-1,24]}})", f32_2x3),
       {"tensor 'w'", "data_offsets entry -1 is negative"}},
      {"rank over 8",
       make_file(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       {"tensor 'w'", "rank 9", "maximum rank is 8"}},
      {"shape overflowing 64 bits",
       make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
       {"tensor 'w'", "more bytes than 2^64"}},
      {"unsupported dtype I8",
       make_file(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", "abcd"),
       {"tensor 'w'", "unsupported dtype 'I8'"}},
      {"unsupported dtype F8_E4M3",
       make_file(R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", "abcd"),
       {"tensor 'w'", "unsupported dtype 'F8_E4M3'"}},
      {"unknown dtype",
       make_file(R"({"w":{"dtype":"F33","shape":[4],"data_offsets":[0,4]}})", "abcd"),
       {"tensor 'w'", "unknown dtype 'F33'"}},
      {"begin after end",
       make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", std::string(8, '\0')),
       {"tensor 'w'", "data_offsets [8, 4]", "begin > end"}},
      {"offsets span the wrong size",
       make_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, '\0')),
       {"tensor 'w'", "span 20 bytes", "needs 24", "end - begin must equal numel * dtype size"}},
      {"first tensor not at 0",
       make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
       {"tensor 'w'", "begin at 4", "first tensor must begin at 0", "hole"}},
      {"hole between tensors",
       make_file(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           std::string(12, '\0')),
       {"tensor 'b'", "begin at 8", "previous tensor 'a' ends at 4", "hole"}},
      {"overlapping tensors",
       make_file(
           R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
           std::string(12, '\0')),
       {"tensor 'b'", "begin at 4", "previous tensor 'a' ends at 8", "overlap"}},
      {"trailing bytes",
       make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(5, '\0')),
       {"tensors end at byte 4", "holds 5 bytes", "trailing bytes"}},
      {"data truncated",
       make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(6, '\0')),
       {"tensor 'w'", "end at 8", "past the end of the data buffer", "truncated"}},
      {"metadata not an object",
       make_file(R"({"__metadata__":["a"]})", ""),
       {"__metadata__ is array", "expected an object of string values"}},
      {"metadata value not a string",
       make_file(R"({"__metadata__":{"epoch":3}})", ""),
       {"__metadata__ value of 'epoch' is number", "must be strings"}},
      {"duplicate tensor name",
       make_file(
           R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
           std::string(8, '\0')),
       {"duplicate key 'w'"}},
      {"duplicate field",
       make_file(R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       {"entry 'w'", "key 'dtype' twice"}},
      {"empty tensor name",
       make_file(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       {"empty name"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO("rule: ", c.rule);
    const std::string path = dir.file("bad" + std::to_string(i) + ".safetensors");
    write_bytes(path, c.bytes);
    const std::string message = error_of([&] { st::load(path); });
    std::vector<std::string> fragments = c.fragments;
    fragments.push_back("[safetensors::load] '" + path + "'");
    check_mentions(message, fragments);
    CHECK(mappings_of(path) == 0);  // nothing is left mapped after a rejection
  }
  check_mentions(error_of([&] { st::load(dir.file("absent.safetensors")); }),
                 {"absent.safetensors", "cannot open", "No such file"});
  check_mentions(error_of([&] { st::load(dir.path); }), {dir.path, "not a regular file"});
}

TEST_CASE("loaded tensors outlive the File and writing to them never changes the file") {
  TempDir dir;
  const std::string path = dir.file("cow.safetensors");
  Tensor original = randn({16, 16});
  st::save(path, {{"w", original}, {"bias", randn({16})}});
  const std::string on_disk = read_bytes(path);

  Tensor kept;
  {
    st::File file = st::load(path);
    kept = *file.find("w");
  }
  CHECK(mappings_of(path) >= 1);  // the File is gone; the mapping lives on in `kept`
  CHECK(tensor_bytes(kept) == tensor_bytes(original));
  kept.fill_(42.0);
  CHECK(kept.to_vector<float>() == std::vector<float>(256, 42.0f));
  CHECK(read_bytes(path) == on_disk);
  CHECK(tensor_bytes(*st::load(path).find("w")) == tensor_bytes(original));

  kept = Tensor();
  CHECK(mappings_of(path) == 0);  // the last tensor let go: unmapped
}

TEST_CASE("saving over an existing file replaces it - tensors of the old one stay valid") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  Tensor first = randn({8});
  st::save(path, {{"w", first}});
  Tensor old_view = *st::load(path).find("w");

  Tensor second = randn({3, 3}, f64);
  st::save(path, {{"w", second}, {"extra", arange(4)}}, {{"step", "2"}});
  const st::File file = st::load(path);
  CHECK(file.tensors.size() == 2);
  CHECK(tensor_bytes(*file.find("w")) == tensor_bytes(second));
  CHECK(file.metadata.at("step") == "2");
  CHECK(tensor_bytes(old_view) == tensor_bytes(first));  // the replaced file lives on while mapped
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("a failed save throws naming the path and the reason and leaves no temporary file") {
  TempDir dir;
  const st::NamedTensors tensors = {{"w", randn({4})}};

  SUBCASE("the path is a directory") {
    const std::string path = dir.file("subdir");
    fs::create_directory(path);
    check_mentions(error_of([&] { st::save(path, tensors); }),
                   {"[safetensors::save] '" + path + "'", "rename", "Is a directory"});
    CHECK(fs::is_directory(path));
    CHECK_FALSE(any_temp_file(dir));
  }
  SUBCASE("the parent is not a directory") {
    write_bytes(dir.file("plain"), "x");
    const std::string path = dir.file("plain/model.safetensors");
    check_mentions(error_of([&] { st::save(path, tensors); }),
                   {path, "cannot create the temporary file", "Not a directory"});
    CHECK(dir.entries() == std::vector<std::string>{"plain"});
  }
  SUBCASE("the parent does not exist") {
    const std::string path = dir.file("missing/model.safetensors");
    check_mentions(error_of([&] { st::save(path, tensors); }), {path, "No such file or directory"});
    CHECK(dir.entries().empty());
  }
  SUBCASE("the directory is not writable") {
    if (::geteuid() == 0) {
      MESSAGE("skipped: running as root, which permission bits do not stop; the other failures are checked");
    } else {
      const std::string locked = dir.file("locked");
      fs::create_directory(locked);
      fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
      const std::string path = locked + "/model.safetensors";
      check_mentions(error_of([&] { st::save(path, tensors); }), {path, "Permission denied"});
      fs::permissions(locked, fs::perms::owner_all);
      CHECK(fs::is_empty(locked));
    }
  }
  SUBCASE("a write fails midway - the old file is kept whole") {
    // A file-size limit makes write() fail with EFBIG part way through (SIGXFSZ ignored), as a full
    // disk would.
    const std::string path = dir.file("model.safetensors");
    st::save(path, tensors);
    const std::string before = read_bytes(path);
    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto* previous_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved;
    limited.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
    const std::string message = error_of([&] { st::save(path, {{"big", randn({4096})}}); });
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::signal(SIGXFSZ, previous_handler);
    check_mentions(message, {"[safetensors::save] '" + path + "'", "write to", "File too large"});
    CHECK(read_bytes(path) == before);
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
  }
}

TEST_CASE("save rejects empty - duplicate and reserved names and undefined tensors") {
  TempDir dir;
  const std::string path = dir.file("names.safetensors");
  check_mentions(error_of([&] { st::save(path, {{"", randn({2})}}); }), {path, "empty name"});
  check_mentions(error_of([&] {
                   st::save(path, {{"a", randn({2})}, {"a", randn({3})}});
                 }),
                 {path, "'a' appears twice", "unique"});
  check_mentions(error_of([&] { st::save(path, {{"__metadata__", randn({2})}}); }), {path, "reserves"});
  check_mentions(error_of([&] { st::save(path, {{"a", Tensor()}}); }), {path, "tensor 'a' is undefined"});
  check_mentions(error_of([&] { st::save(path, {{"bad\xff", randn({2})}}); }), {path, "not valid UTF-8"});
  check_mentions(error_of([&] { st::save("", {}); }), {"empty path"});
  CHECK(dir.entries().empty());
}
