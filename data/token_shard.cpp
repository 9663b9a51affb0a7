#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hg::data {

namespace {

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t dtype;
  uint64_t count;
  uint64_t vocab_size;
};
static_assert(sizeof(Header) == kTokenShardHeaderBytes);

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    HG_INPUT_CHECK(n > 0, "[write_token_shard] writing '", path, "' failed: ", errno_text(errno));
    p += n;
    bytes -= size_t(n);
  }
}

std::string hex_bytes(const unsigned char* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

const char* token_dtype_name(TokenDType dtype) { return dtype == TokenDType::u16 ? "u16" : "u32"; }

void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens, TokenDType dtype,
                       uint64_t vocab_size) {
  HG_INPUT_CHECK(dtype == TokenDType::u16 || dtype == TokenDType::u32, "[write_token_shard] unknown token dtype code ",
                 uint32_t(dtype), "; expected u16 (2) or u32 (4)");
  const uint64_t limit = dtype == TokenDType::u16 ? 65536ull : 4294967296ull;
  HG_INPUT_CHECK(vocab_size >= 1 && vocab_size <= limit, "[write_token_shard] vocab_size ", vocab_size,
                 " does not fit ", token_dtype_name(dtype), "; expected 1..", limit);
  for (size_t i = 0; i < tokens.size(); ++i)
    HG_INPUT_CHECK(tokens[i] < vocab_size, "[write_token_shard] token ", i, " is ", tokens[i],
                   ", not below vocab_size ", vocab_size);
  Header header{};
  std::memcpy(header.magic, kTokenShardMagic, 8);
  header.version = kTokenShardVersion;
  header.dtype = uint32_t(dtype);
  header.count = tokens.size();
  header.vocab_size = vocab_size;

  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  HG_INPUT_CHECK(fd >= 0, "[write_token_shard] cannot create '", temp, "': ", errno_text(errno));
  try {
    write_all(fd, &header, sizeof header, temp);
    if (dtype == TokenDType::u32) {
      write_all(fd, tokens.data(), tokens.size() * 4, temp);
    } else {
      std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
      write_all(fd, narrow.data(), narrow.size() * 2, temp);
    }
    HG_INPUT_CHECK(::fsync(fd) == 0, "[write_token_shard] fsync of '", temp, "' failed: ", errno_text(errno));
    HG_INPUT_CHECK(::close(fd) == 0, "[write_token_shard] close of '", temp, "' failed: ", errno_text(errno));
    HG_INPUT_CHECK(::rename(temp.c_str(), path.c_str()) == 0, "[write_token_shard] rename of '", temp, "' to '", path,
                   "' failed: ", errno_text(errno));
  } catch (...) {
    ::close(fd);  // harmless when already closed (EBADF)
    ::unlink(temp.c_str());
    throw;
  }
}

bool is_token_shard(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[8] = {};
  const bool yes = ::read(fd, magic, 8) == 8 && std::memcmp(magic, kTokenShardMagic, 8) == 0;
  ::close(fd);
  return yes;
}

TokenShard::TokenShard(const std::string& path, const TokenDType* expected) : path_(path) {
  const std::string where = "[TokenShard] '" + path + "': ";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  HG_INPUT_CHECK(fd >= 0, where, "cannot open: ", errno_text(errno));
  struct stat info {};
  const bool stat_ok = ::fstat(fd, &info) == 0;
  const int stat_errno = errno;
  if (!stat_ok || !S_ISREG(info.st_mode)) ::close(fd);
  HG_INPUT_CHECK(stat_ok, where, "cannot stat: ", errno_text(stat_errno));
  HG_INPUT_CHECK(S_ISREG(info.st_mode), where, "not a regular file");
  const uint64_t file_bytes = uint64_t(info.st_size);
  if (file_bytes < kTokenShardHeaderBytes) {
    unsigned char start[8] = {};
    const ssize_t got = ::read(fd, start, 8);
    ::close(fd);
    const bool has_magic = got == 8 && std::memcmp(start, kTokenShardMagic, 8) == 0;
    HG_INPUT_FAIL(where, "truncated: ", file_bytes, " bytes, shorter than the ", kTokenShardHeaderBytes, "-byte header",
                  has_magic ? "" : " (and not a halfgrad token shard: no HGTOKENS magic)");
  }
  mapping_bytes_ = size_t(file_bytes);
  mapping_ = ::mmap(nullptr, mapping_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    HG_INPUT_FAIL(where, "mmap of ", file_bytes, " bytes failed: ", errno_text(map_errno));
  }
  try {
    Header header;
    std::memcpy(&header, mapping_, sizeof header);
    HG_INPUT_CHECK(std::memcmp(header.magic, kTokenShardMagic, 8) == 0, where,
                   "not a halfgrad token shard: the file starts with bytes ",
                   hex_bytes(reinterpret_cast<const unsigned char*>(header.magic), 8),
                   ", expected the magic \"HGTOKENS\" (write shards with build/bin/prepare_data)");
    HG_INPUT_CHECK(header.version == kTokenShardVersion, where, "format version ", header.version,
                   "; this build reads version ", kTokenShardVersion);
    HG_INPUT_CHECK(header.dtype == uint32_t(TokenDType::u16) || header.dtype == uint32_t(TokenDType::u32), where,
                   "unknown token dtype code ", header.dtype, "; expected 2 (u16) or 4 (u32)");
    dtype_ = TokenDType(header.dtype);
    if (expected)
      HG_INPUT_CHECK(dtype_ == *expected, where, "holds ", token_dtype_name(dtype_), " tokens, expected ",
                     token_dtype_name(*expected));
    const uint64_t width = header.dtype;
    HG_INPUT_CHECK(header.count <= (file_bytes - kTokenShardHeaderBytes) / width, where,
                   "truncated: the header promises ", header.count, " ", token_dtype_name(dtype_), " tokens (",
                   kTokenShardHeaderBytes + header.count * width, " bytes), the file has ", file_bytes, " bytes");
    HG_INPUT_CHECK(kTokenShardHeaderBytes + header.count * width == file_bytes, where, "has ",
                   file_bytes - kTokenShardHeaderBytes - header.count * width, " trailing bytes after its ",
                   header.count, " tokens; expected exactly ", kTokenShardHeaderBytes + header.count * width, " bytes");
    HG_INPUT_CHECK(
        header.vocab_size >= 1 && header.vocab_size <= (dtype_ == TokenDType::u16 ? 65536ull : 4294967296ull), where,
        "vocabulary size ", header.vocab_size, " does not fit its ", token_dtype_name(dtype_), " tokens");
    count_ = int64_t(header.count);
    vocab_size_ = header.vocab_size;
    tokens_ = static_cast<const char*>(mapping_) + kTokenShardHeaderBytes;
  } catch (...) {
    ::munmap(mapping_, mapping_bytes_);
    mapping_ = nullptr;
    throw;
  }
}

void TokenShard::check_tokens() const {
  for (int64_t i = 0; i < count_; ++i)
    HG_INPUT_CHECK((*this)[i] < vocab_size_, "[TokenShard] '", path_, "': token ", i, " is ", (*this)[i],
                   ", not below the header's vocabulary size ", vocab_size_, " (a damaged or foreign shard)");
}

TokenShard::~TokenShard() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

TokenSpan whole(std::shared_ptr<const TokenShard> shard) {
  TokenSpan span;
  span.end = shard->size();
  span.shard = std::move(shard);
  return span;
}

TokenSpan whole(std::shared_ptr<const std::vector<uint32_t>> tokens) {
  TokenSpan span;
  span.end = int64_t(tokens->size());
  span.memory = std::move(tokens);
  return span;
}

TokenWindowDataset::TokenWindowDataset(std::vector<TokenSpan> spans, int64_t context, int64_t stride)
    : spans_(std::move(spans)), context_(context), stride_(stride) {
  HG_CHECK(context >= 1, "[TokenWindowDataset] context must be >= 1, got ", context);
  HG_CHECK(stride >= 1, "[TokenWindowDataset] stride must be >= 1, got ", stride);
  for (const TokenSpan& span : spans_) {
    HG_CHECK(span.begin >= 0 && span.begin <= span.end, "[TokenWindowDataset] invalid token range [", span.begin, ", ",
             span.end, ")");
    first_window_.push_back(total_);
    if (span.size() >= context + 1) total_ += (span.size() - context - 1) / stride + 1;
  }
  HG_CHECK(total_ > 0, "[TokenWindowDataset] no span holds ", context + 1, " tokens (a window of context ", context,
           " plus its last target)");
}

std::vector<Field> TokenWindowDataset::fields() const {
  return {{"ids", i64, {context_}}, {"targets", i64, {context_}}};
}

void TokenWindowDataset::get(int64_t index, const std::vector<void*>& out) const {
  HG_CHECK(index >= 0 && index < total_, "[TokenWindowDataset] index ", index, " is outside [0, ", total_, ")");
  const size_t s =
      size_t(std::upper_bound(first_window_.begin(), first_window_.end(), index) - first_window_.begin()) - 1;
  const TokenSpan& span = spans_[s];
  const int64_t start = (index - first_window_[s]) * stride_;
  int64_t* ids = static_cast<int64_t*>(out[0]);
  int64_t* targets = static_cast<int64_t*>(out[1]);
  for (int64_t t = 0; t < context_; ++t) {
    ids[t] = span.at(start + t);
    targets[t] = span.at(start + t + 1);
  }
}

}  // namespace hg::data
