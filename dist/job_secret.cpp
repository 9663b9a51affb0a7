#include "dist/job_secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

namespace hg::dist {

namespace {

constexpr int64_t kMaxSecretBytes = 4096;

#define REFUSE_IF(cond, ...)                                                         \
  do {                                                                               \
    if (cond) throw RendezvousRefused(::hg::detail::concat("[dist] ", __VA_ARGS__)); \
  } while (0)

std::string secret_from_file(const std::string& path) {
  struct stat info {};
  REFUSE_IF(::stat(path.c_str(), &info) != 0, "HALFGRAD_DIST_TOKEN_FILE='", path,
            "' cannot be read: ", std::strerror(errno));
  REFUSE_IF(!S_ISREG(info.st_mode), "HALFGRAD_DIST_TOKEN_FILE='", path, "' is not a regular file");
  REFUSE_IF(info.st_uid != ::geteuid(), "HALFGRAD_DIST_TOKEN_FILE='", path, "' is owned by uid ", info.st_uid,
            ", not by this user (uid ", ::geteuid(), "); expected the job's own secret file");
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", unsigned(info.st_mode & 07777));
  REFUSE_IF((info.st_mode & 077) != 0, "HALFGRAD_DIST_TOKEN_FILE='", path, "' has mode ", mode,
            ": others can read the job secret; expected 0600 or 0400 (chmod 600 '", path, "')");
  REFUSE_IF(info.st_size > kMaxSecretBytes, "HALFGRAD_DIST_TOKEN_FILE='", path, "' has ", info.st_size,
            " bytes; expected a secret of at most ", kMaxSecretBytes);
  std::ifstream file(path, std::ios::binary);
  REFUSE_IF(!file.good(), "HALFGRAD_DIST_TOKEN_FILE='", path, "' cannot be read: ", std::strerror(errno));
  std::string secret{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  REFUSE_IF(secret.empty(), "HALFGRAD_DIST_TOKEN_FILE='", path, "' is empty; expected the job secret");
  return secret;
}

}  // namespace

std::optional<std::string> job_secret_from_env() {
  const char* token = std::getenv("HALFGRAD_DIST_TOKEN");
  const char* file = std::getenv("HALFGRAD_DIST_TOKEN_FILE");
  REFUSE_IF(token && file, "both HALFGRAD_DIST_TOKEN and HALFGRAD_DIST_TOKEN_FILE are set; expected one of them");
  if (file) return secret_from_file(file);
  if (!token) return std::nullopt;
  REFUSE_IF(*token == '\0', "HALFGRAD_DIST_TOKEN is set but empty; expected the job secret (or unset it)");
  REFUSE_IF(std::strlen(token) > size_t(kMaxSecretBytes), "HALFGRAD_DIST_TOKEN has ", std::strlen(token),
            " bytes; expected a secret of at most ", kMaxSecretBytes);
  return std::string(token);
}

Digest hmac_sha256(std::string_view key, std::string_view message) {
  Digest out{};
  unsigned int length = 0;
  const unsigned char* done =
      HMAC(EVP_sha256(), key.data(), int(key.size()), reinterpret_cast<const unsigned char*>(message.data()),
           message.size(), out.data(), &length);
  HG_CHECK(done != nullptr && length == out.size(), "[dist] HMAC-SHA256 failed (OpenSSL)");
  return out;
}

bool digests_equal(const Digest& a, const Digest& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

void random_bytes(uint8_t* out, size_t n) {
  HG_CHECK(RAND_bytes(out, int(n)) == 1, "[dist] the operating system's random generator failed (OpenSSL RAND_bytes)");
}

}  // namespace hg::dist
