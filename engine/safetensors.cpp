// safetensors I/O (format and rules: engine/safetensors.h). The header is parsed by nlohmann::json
// with a parser callback that catches duplicate keys (a plain parse silently keeps the last one).
#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "engine/crc32c.h"

namespace hg::safetensors {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

namespace {

using Json = nlohmann::ordered_json;  // keeps the file's key order (and save()'s order when writing)

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr const char* kMetadataKey = "__metadata__";

// ---- dtypes ----

const char* format_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::b8:
      return "BOOL";
  }
  return "?";
}

std::optional<DType> dtype_from_format(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::b8})
    if (name == format_name(t)) return t;
  return std::nullopt;
}

// The format's dtypes that halfgrad has no tensor type for.
bool is_known_unsupported(const std::string& name) {
  static const std::set<std::string> names = {"I8", "U16",     "I16",     "U32", "U64", "F8_E4M3",
                                              "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", "C128"};
  return names.count(name) != 0;
}

// ---- load ----

// One read-only-file, copy-on-write mapping shared by every tensor loaded from it.
struct Mapping {
  void* address = MAP_FAILED;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (address != MAP_FAILED) ::munmap(address, size);
  }
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(address); }
};

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports close()'s result (for written files, where close can report an error).
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

// Builds errors that start with "[safetensors::load] '<path>': ".
struct LoadContext {
  const std::string& path;
  template <class... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    throw Error(detail::concat("[safetensors::load] '", path, "': ", parts...));
  }
  template <class... Parts>
  [[noreturn]] void fail_tensor(const std::string& name, const Parts&... parts) const {
    fail("tensor '", name, "': ", parts...);
  }
};

// Records the first duplicate key at any depth while nlohmann parses (its DOM keeps only the last).
struct DuplicateKeyFinder {
  std::vector<std::set<std::string>> open_objects;  // keys seen so far in each object being parsed
  std::string top_level_key;                        // the entry being parsed (depth-1 key)
  std::optional<std::string> duplicate;             // the rule it broke, once found

  bool operator()(int /*depth*/, nlohmann::detail::parse_event_t event, Json& parsed) {
    using Event = nlohmann::detail::parse_event_t;
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      open_objects.pop_back();
    } else if (event == Event::key && !open_objects.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (open_objects.size() == 1) top_level_key = key;
      if (!open_objects.back().insert(key).second && !duplicate) {
        if (open_objects.size() == 1)
          duplicate = "duplicate key '" + key + "' in the header (each tensor name may appear once)";
        else
          duplicate = "entry '" + top_level_key + "' has the key '" + key + "' twice (duplicate key)";
      }
    }
    return true;
  }
};

std::string json_type(const Json& value) { return value.type_name(); }

// A non-negative JSON integer (nlohmann parses "5" as unsigned, "-5" as signed, "5.0" as float).
uint64_t read_count(const LoadContext& file, const std::string& name, const Json& value, const char* field) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v >= 0) return uint64_t(v);
    file.fail_tensor(name, field, " entry ", v, " is negative; expected integers >= 0");
  }
  file.fail_tensor(name, field, " entry ", value.dump(), " is not an integer (", json_type(value),
                   "); expected integers >= 0");
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

Entry parse_entry(const LoadContext& file, const std::string& name, const Json& info) {
  if (name.empty()) file.fail("a tensor has an empty name; expected non-empty names");
  if (!info.is_object())
    file.fail_tensor(name, "entry is ", json_type(info),
                     "; expected an object {\"dtype\", \"shape\", \"data_offsets\"}");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!info.contains(field)) file.fail_tensor(name, "missing field '", field, "'");
  const Json& dtype = info["dtype"];
  const Json& shape = info["shape"];
  const Json& offsets = info["data_offsets"];
  if (!dtype.is_string()) file.fail_tensor(name, "field 'dtype' is ", json_type(dtype), "; expected a string");
  if (!shape.is_array()) file.fail_tensor(name, "field 'shape' is ", json_type(shape), "; expected an array");
  if (!offsets.is_array() || offsets.size() != 2)
    file.fail_tensor(name, "field 'data_offsets' is ", offsets.dump(), "; expected an array [begin, end]");

  Entry entry;
  entry.name = name;
  const std::string& dtype_text = dtype.get_ref<const std::string&>();
  const std::optional<DType> parsed_dtype = dtype_from_format(dtype_text);
  if (!parsed_dtype) {
    if (is_known_unsupported(dtype_text))
      file.fail_tensor(name, "unsupported dtype '", dtype_text, "'; halfgrad reads F32, F64, F16, BF16, I32, I64, U8, BOOL");
    file.fail_tensor(name, "unknown dtype '", dtype_text, "'; expected F32, F64, F16, BF16, I32, I64, U8 or BOOL");
  }
  entry.dtype = *parsed_dtype;

  if (shape.size() > size_t(kMaxTensorRank))
    file.fail_tensor(name, "shape ", shape.dump(), " has rank ", shape.size(), "; halfgrad's maximum rank is ",
                     kMaxTensorRank);
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& size : shape) {
    const uint64_t s = read_count(file, name, size, "shape");
    if (s > uint64_t(INT64_MAX)) file.fail_tensor(name, "shape entry ", s, " is too large");
    overflow = overflow || __builtin_mul_overflow(numel, s, &numel);
    entry.shape.push_back(int64_t(s));
  }
  uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(numel, uint64_t(dtype_size(entry.dtype)), &nbytes);
  if (overflow) file.fail_tensor(name, "shape ", shape.dump(), " has more bytes than 2^64");

  entry.begin = read_count(file, name, offsets[0], "data_offsets");
  entry.end = read_count(file, name, offsets[1], "data_offsets");
  if (entry.begin > entry.end)
    file.fail_tensor(name, "data_offsets [", entry.begin, ", ", entry.end, "] have begin > end; expected begin <= end");
  if (entry.end - entry.begin != nbytes)
    file.fail_tensor(name, "data_offsets [", entry.begin, ", ", entry.end, "] span ", entry.end - entry.begin,
                     " bytes but ", dtype_text, " shape ", shape_str(entry.shape), " needs ", nbytes,
                     " (end - begin must equal numel * dtype size)");
  return entry;
}

Metadata parse_metadata(const LoadContext& file, const Json& value) {
  if (!value.is_object()) file.fail("__metadata__ is ", json_type(value), "; expected an object of string values");
  Metadata metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      file.fail("__metadata__ value of '", key, "' is ", json_type(item), " (", item.dump(),
                "); __metadata__ values must be strings");
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

Tensor make_tensor(const Entry& entry, const std::shared_ptr<Mapping>& mapping, const unsigned char* data) {
  const size_t nbytes = size_t(entry.end - entry.begin);
  const unsigned char* source = data + entry.begin;
  if (entry.dtype == DType::b8) {  // a bool byte other than 0 or 1 would be undefined behaviour to read
    for (size_t i = 0; i < nbytes; ++i)
      HG_CHECK(source[i] <= 1, "[safetensors] tensor '", entry.name, "': BOOL element ", i, " is byte ",
               int(source[i]), "; expected 0 or 1");
  }
  const size_t element = dtype_size(entry.dtype);
  if (nbytes == 0 || reinterpret_cast<uintptr_t>(source) % element != 0) {
    // Zero-size, or misaligned for its element type (header not padded by its writer): a fresh copy.
    Tensor copy = empty(entry.shape, entry.dtype);
    if (nbytes != 0) std::memcpy(copy.data_ptr(), source, nbytes);
    return copy;
  }
  auto impl = std::make_shared<TensorImpl>();
  // The mapping is writable copy-on-write, so handing out a non-const pointer is safe for the file.
  impl->storage =
      Storage::wrap(const_cast<unsigned char*>(source), nbytes, kCPU, [keep = mapping]() mutable { keep.reset(); });
  impl->shape = entry.shape;
  impl->strides = contiguous_strides(entry.shape);
  impl->dtype = entry.dtype;
  return Tensor(std::move(impl));
}

// ---- checksums ----

bool has_checksum_prefix(const std::string& key) { return key.rfind(kChecksumKeyPrefix, 0) == 0; }

// The CRC32C of the header's meaning: the user metadata (sorted by key) and every tensor's name, dtype,
// shape and data offsets (sorted by name), each string and list length-prefixed (u64, little-endian) so
// that no two headers serialise alike. Whitespace and key order of the JSON text do not count.
struct TensorLayout {
  std::string name;
  const char* dtype;
  Shape shape;
  uint64_t begin, end;
};
uint32_t header_checksum(const Metadata& metadata, std::vector<TensorLayout> tensors) {
  std::string bytes;
  const auto put_u64 = [&](uint64_t v) { bytes.append(reinterpret_cast<const char*>(&v), 8); };
  const auto put = [&](const std::string& s) {
    put_u64(s.size());
    bytes += s;
  };
  put_u64(metadata.size());
  for (const auto& [key, value] : metadata) put(key), put(value);  // std::map: sorted by key
  std::sort(tensors.begin(), tensors.end(), [](const TensorLayout& a, const TensorLayout& b) { return a.name < b.name; });
  put_u64(tensors.size());
  for (const TensorLayout& t : tensors) {
    put(t.name);
    put(t.dtype);
    put_u64(t.shape.size());
    for (int64_t d : t.shape) put_u64(uint64_t(d));
    put_u64(t.begin);
    put_u64(t.end);
  }
  return crc32c(bytes.data(), bytes.size());
}

std::string checksum_text(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

std::optional<uint32_t> parse_checksum(const std::string& text) {
  if (text.size() != 8) return std::nullopt;
  uint32_t value = 0;
  for (char c : text) {
    uint32_t digit;
    if (c >= '0' && c <= '9') digit = uint32_t(c - '0');
    else if (c >= 'a' && c <= 'f') digit = uint32_t(c - 'a' + 10);
    else return std::nullopt;
    value = value << 4 | digit;
  }
  return value;
}

// Takes the checksum keys out of `metadata`: each names a tensor of `entries` and is 8 hex digits,
// and when there are any, every tensor has one. Returns the checksums in the order of `entries`
// (empty for a file without them).
std::vector<uint32_t> take_checksums(const LoadContext& file, Metadata& metadata, const std::vector<Entry>& entries,
                                     std::optional<uint32_t>& header_crc) {
  std::map<std::string, uint32_t> found;
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (!has_checksum_prefix(it->first)) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(std::strlen(kChecksumKeyPrefix));
    const std::optional<uint32_t> crc = parse_checksum(it->second);
    if (!crc)
      file.fail("__metadata__ '", it->first, "' is '", it->second, "'; expected a CRC32C as 8 lowercase hex digits");
    if (name == kMetadataKey)
      header_crc = *crc;  // the header's own checksum (no tensor can be named "__metadata__")
    else
      found.emplace(name, *crc);
    it = metadata.erase(it);
  }
  if (found.empty()) return {};
  std::vector<uint32_t> checksums;
  checksums.reserve(entries.size());
  for (const Entry& entry : entries) {
    const auto it = found.find(entry.name);
    if (it == found.end())
      file.fail_tensor(entry.name, "has no checksum (__metadata__ '", kChecksumKeyPrefix, entry.name,
                       "') although ", found.size(), " other tensors have one; the header is damaged");
    checksums.push_back(it->second);
    found.erase(it);
  }
  if (!found.empty())
    file.fail("__metadata__ '", kChecksumKeyPrefix, found.begin()->first, "' is the checksum of a tensor the file does "
              "not hold; the header is damaged");
  return checksums;
}

// ---- save ----

std::string parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void write_all(int fd, const void* data, size_t nbytes, const std::string& temp_path) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    const ssize_t written = ::write(fd, p, nbytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error("write to '" + temp_path + "' failed: " + errno_text(errno));
    }
    p += written;
    nbytes -= size_t(written);
  }
}

}  // namespace

const Tensor* File::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

bool lacks_promised_checksums(const File& file, const std::string& version_key, const std::string& checksummed_version) {
  const auto version = file.metadata.find(version_key);
  if (version == file.metadata.end() || version->second != checksummed_version) return false;
  return !(file.header_checksummed && (file.checksummed || file.tensors.empty()));
}

File load(const std::string& path, Verify verify) {
  const LoadContext file{path};
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) file.fail("cannot open: ", errno_text(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) file.fail("cannot stat: ", errno_text(errno));
  if (!S_ISREG(info.st_mode)) file.fail("not a regular file");
  const uint64_t file_size = uint64_t(info.st_size);
  if (file_size < 8)
    file.fail("file is ", file_size, " bytes, shorter than the 8-byte header length; not a safetensors file");

  auto mapping = std::make_shared<Mapping>();
  mapping->size = size_t(file_size);
  // PROT_WRITE + MAP_PRIVATE: tensors may be written in place; the writes stay in this process.
  mapping->address = ::mmap(nullptr, mapping->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
  if (mapping->address == MAP_FAILED) file.fail("mmap of ", file_size, " bytes failed: ", errno_text(errno));
  fd.close();  // the mapping keeps the file open

  const unsigned char* bytes = mapping->bytes();
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes, 8);  // little-endian host (static_assert above)
  if (header_size > kMaxHeaderBytes)
    file.fail("header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  if (header_size > file_size - 8)
    file.fail("header length ", header_size, " runs past the end of the file (", file_size, " bytes, so at most ",
              file_size - 8, " header bytes)");

  DuplicateKeyFinder duplicates;
  Json header;
  try {
    const char* json_begin = reinterpret_cast<const char*>(bytes + 8);
    header = Json::parse(json_begin, json_begin + header_size, std::ref(duplicates), /*allow_exceptions=*/true,
                         /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    file.fail("header is not valid UTF-8 JSON: ", e.what());
  }
  if (duplicates.duplicate) file.fail(*duplicates.duplicate);
  if (!header.is_object()) file.fail("header is a JSON ", json_type(header), "; expected a JSON object");

  File result;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      result.metadata = parse_metadata(file, value);
    } else {
      entries.push_back(parse_entry(file, name, value));
    }
  }

  // The tensors must tile [0, buffer size) exactly. Ties (zero-size tensors) keep the header's order.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t buffer_size = file_size - 8 - header_size;
  uint64_t expected_begin = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin != expected_begin) {
      const char* what = entry.begin > expected_begin ? "hole" : "overlap";
      if (previous == nullptr)
        file.fail_tensor(entry.name, "data_offsets begin at ", entry.begin, " but the first tensor must begin at 0 (",
                         what, " in the data buffer: tensors must tile it exactly)");
      file.fail_tensor(entry.name, "data_offsets begin at ", entry.begin, " but the previous tensor '", previous->name,
                       "' ends at ", expected_begin, " (", what, " in the data buffer: tensors must tile it exactly)");
    }
    if (entry.end > buffer_size)
      file.fail_tensor(entry.name, "data_offsets end at ", entry.end, ", past the end of the data buffer (",
                       buffer_size, " bytes = file size ", file_size, " - 8 - header length ", header_size,
                       "); the file is truncated");
    expected_begin = entry.end;
    previous = &entry;
  }
  if (expected_begin != buffer_size)
    file.fail("the tensors end at byte ", expected_begin, " of the data buffer but it holds ", buffer_size,
              " bytes (8 + header length ", header_size, " + last end ", expected_begin, " must equal the file size ",
              file_size, "; trailing bytes)");

  const unsigned char* data = bytes + 8 + header_size;
  std::optional<uint32_t> header_crc;
  const std::vector<uint32_t> checksums = take_checksums(file, result.metadata, entries, header_crc);
  result.checksummed = !checksums.empty();
  result.header_checksummed = header_crc.has_value();
  if (header_crc) {  // in both Verify modes: it costs a pass over the header only
    std::vector<TensorLayout> layout;
    layout.reserve(entries.size());
    for (const Entry& e : entries) layout.push_back({e.name, format_name(e.dtype), e.shape, e.begin, e.end});
    const uint32_t actual = header_checksum(result.metadata, std::move(layout));
    if (actual != *header_crc)
      file.fail("header checksum mismatch: the CRC32C of its metadata and tensor layout is ", checksum_text(actual),
                ", the header records ", checksum_text(*header_crc),
                "; the header is damaged (a flipped bit in a metadata value, a dtype, a shape or an offset)");
  }
  if (result.checksummed && verify == Verify::checksums) {
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& entry = entries[i];
      const uint32_t actual = crc32c(data + entry.begin, size_t(entry.end - entry.begin));
      if (actual != checksums[i])
        file.fail_tensor(entry.name, "checksum mismatch: the CRC32C of its ", entry.end - entry.begin,
                         " bytes is ", checksum_text(actual), ", the header records ", checksum_text(checksums[i]),
                         "; the file is damaged (a flipped bit or a torn write)");
    }
  }
  result.tensors.reserve(entries.size());
  for (const Entry& entry : entries) result.tensors.emplace_back(entry.name, make_tensor(entry, mapping, data));
  return result;
}

void save(const std::string& path, const NamedTensors& tensors, const Metadata& metadata, const SaveOptions& options) {
  const auto fail = [&](const auto&... parts) {
    throw Error(detail::concat("[safetensors::save] '", path, "': ", parts...));
  };
  if (path.empty()) fail("empty path");

  // Validate names, and gather each tensor as contiguous CPU data (views pass through unchanged).
  std::set<std::string> names;
  std::vector<Tensor> dense;
  dense.reserve(tensors.size());
  {
    NoGradGuard no_grad;
    for (const auto& [name, tensor] : tensors) {
      if (name.empty()) fail("a tensor has an empty name; names must be non-empty");
      if (name == kMetadataKey) fail("a tensor is named '", kMetadataKey, "', which the format reserves");
      if (!names.insert(name).second) fail("tensor name '", name, "' appears twice; names must be unique");
      if (!tensor.defined()) fail("tensor '", name, "' is undefined");
      Tensor t = tensor.detach();
      if (!t.device().is_cpu()) t = t.to(kCPU);
      dense.push_back(t.contiguous());
    }
  }

  Json header = Json::object();
  Json meta = Json::object();
  for (const auto& [key, value] : metadata) {
    if (has_checksum_prefix(key))
      fail("metadata key '", key, "' starts with '", kChecksumKeyPrefix, "', which save() reserves for checksums");
    meta[key] = value;
  }
  if (options.checksums) {
    std::vector<TensorLayout> layout;
    uint64_t at = 0;
    for (size_t i = 0; i < dense.size(); ++i) {
      const uint64_t nbytes = uint64_t(dense[i].numel()) * dense[i].element_size();
      layout.push_back({tensors[i].first, format_name(dense[i].dtype()), dense[i].shape(), at, at + nbytes});
      at += nbytes;
    }
    meta[std::string(kChecksumKeyPrefix) + kMetadataKey] = checksum_text(header_checksum(metadata, std::move(layout)));
  }
  if (options.checksums)
    for (size_t i = 0; i < dense.size(); ++i)
      meta[kChecksumKeyPrefix + tensors[i].first] =
          checksum_text(dense[i].numel() == 0 ? crc32c(nullptr, 0)
                                              : crc32c(dense[i].data_ptr(), size_t(dense[i].numel()) * dense[i].element_size()));
  if (!meta.empty()) header[kMetadataKey] = std::move(meta);
  uint64_t offset = 0;
  for (size_t i = 0; i < dense.size(); ++i) {
    const uint64_t nbytes = uint64_t(dense[i].numel()) * dense[i].element_size();
    header[tensors[i].first] = Json{{"dtype", format_name(dense[i].dtype())},
                                    {"shape", dense[i].shape()},
                                    {"data_offsets", Json::array({offset, offset + nbytes})}};
    offset += nbytes;
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const Json::exception& e) {
    fail("a tensor name or metadata string is not valid UTF-8: ", e.what());
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // the data buffer starts 8-aligned
  const uint64_t header_size = header_text.size();

  const std::string temp_path = path + ".tmp." + std::to_string(::getpid());
  FileDescriptor fd(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (fd.get() < 0) fail("cannot create the temporary file '", temp_path, "': ", errno_text(errno));
  try {
    write_all(fd.get(), &header_size, 8, temp_path);
    write_all(fd.get(), header_text.data(), header_text.size(), temp_path);
    for (const Tensor& t : dense)
      if (t.numel() > 0) write_all(fd.get(), t.data_ptr(), size_t(t.numel()) * t.element_size(), temp_path);
    if (::fsync(fd.get()) != 0) throw Error("fsync of '" + temp_path + "' failed: " + errno_text(errno));
    if (fd.close() != 0) throw Error("close of '" + temp_path + "' failed: " + errno_text(errno));
    if (::rename(temp_path.c_str(), path.c_str()) != 0)
      throw Error("rename of '" + temp_path + "' over it failed: " + errno_text(errno));
  } catch (const Error& e) {
    ::unlink(temp_path.c_str());
    fail(e.what());
  }

  // Make the rename itself durable. Some filesystems cannot fsync a directory (EINVAL): nothing to do.
  const std::string directory = parent_directory(path);
  FileDescriptor dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0)
    fail("written, but its directory '", directory, "' cannot be opened to fsync: ", errno_text(errno));
  if (::fsync(dir.get()) != 0 && errno != EINVAL)
    fail("written, but fsync of its directory '", directory, "' failed: ", errno_text(errno));
}

}  // namespace hg::safetensors
