// The rendezvous's job secret (dist/job_secret.h): read from HALFGRAD_DIST_TOKEN or from the file of
// HALFGRAD_DIST_TOKEN_FILE, which must be this user's and closed to everyone else; every refusal names
// the variable and is a RendezvousRefused (an InputError: exit 2 in the samples). HMAC-SHA256 matches RFC
// 4231's test cases, and the rendezvous's macs bind the challenge's nonce, the rank and the world size.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "dist/job_secret.h"
#include "dist/rendezvous.h"
#include "support/check_error.h"
#include "support/temp_dir.h"

using namespace hg;
using namespace hg::dist;

namespace {

// Sets (or with nullopt unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string hex(const Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += {digits[b >> 4], digits[b & 15]};
  return s;
}

}  // namespace

TEST_CASE("job_secret_from_env: none, the token, a 0600 file; refusals name the variable") {
  const test::TempDir dir;
  ScopedEnv no_file("HALFGRAD_DIST_TOKEN_FILE", std::nullopt);
  {
    ScopedEnv none("HALFGRAD_DIST_TOKEN", std::nullopt);
    CHECK_FALSE(job_secret_from_env().has_value());
  }
  {
    ScopedEnv token("HALFGRAD_DIST_TOKEN", "s3cret");
    CHECK(job_secret_from_env() == std::optional<std::string>("s3cret"));
  }
  {
    ScopedEnv empty("HALFGRAD_DIST_TOKEN", "");
    CHECK_ERROR(job_secret_from_env(), "HALFGRAD_DIST_TOKEN is set but empty");
    CHECK_THROWS_AS(job_secret_from_env(), RendezvousRefused);
    CHECK_THROWS_AS(job_secret_from_env(), InputError);
  }
  ScopedEnv no_token("HALFGRAD_DIST_TOKEN", std::nullopt);
  const std::string path = dir.write("token", "file-secret\n");
  ::chmod(path.c_str(), 0600);
  {
    ScopedEnv file("HALFGRAD_DIST_TOKEN_FILE", path);
    CHECK(job_secret_from_env() == std::optional<std::string>("file-secret"));  // the newline dropped
    ::chmod(path.c_str(), 0400);
    CHECK(job_secret_from_env() == std::optional<std::string>("file-secret"));
    ::chmod(path.c_str(), 0644);
    CHECK_ERROR(job_secret_from_env(), "HALFGRAD_DIST_TOKEN_FILE='", "has mode 0644", "expected 0600 or 0400");
    ::chmod(path.c_str(), 0640);
    CHECK_ERROR(job_secret_from_env(), "has mode 0640");
    ScopedEnv both("HALFGRAD_DIST_TOKEN", "x");
    CHECK_ERROR(job_secret_from_env(), "both HALFGRAD_DIST_TOKEN and HALFGRAD_DIST_TOKEN_FILE are set");
  }
  {
    ScopedEnv missing("HALFGRAD_DIST_TOKEN_FILE", (dir.path / "none").string());
    CHECK_ERROR(job_secret_from_env(), "HALFGRAD_DIST_TOKEN_FILE='", "/none' cannot be read");
  }
  {
    ScopedEnv directory("HALFGRAD_DIST_TOKEN_FILE", dir.path.string());
    CHECK_ERROR(job_secret_from_env(), "is not a regular file");
  }
  {
    const std::string empty = dir.write("empty", "\n");
    ::chmod(empty.c_str(), 0600);
    ScopedEnv file("HALFGRAD_DIST_TOKEN_FILE", empty);
    CHECK_ERROR(job_secret_from_env(), "is empty; expected the job secret");
  }
  {
    const std::string big = dir.write("big", std::string(5000, 'k'));
    ::chmod(big.c_str(), 0600);
    ScopedEnv file("HALFGRAD_DIST_TOKEN_FILE", big);
    CHECK_ERROR(job_secret_from_env(), "has 5000 bytes; expected a secret of at most 4096");
  }
}

TEST_CASE("hmac_sha256 matches RFC 4231; digests compare by value") {
  // Test case 2: key "Jefe".
  CHECK(hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 1: key 0x0b x 20, data "Hi There".
  CHECK(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  const Digest a = hmac_sha256("k", "m");
  Digest b = a;
  CHECK(digests_equal(a, b));
  b[31] ^= 1;
  CHECK_FALSE(digests_equal(a, b));
}

TEST_CASE("the rendezvous's macs depend on the secret, both nonces, the rank and the world size") {
  using namespace rendezvous_wire;
  Challenge c;
  c.world = 4;
  random_bytes(c.nonce.data(), c.nonce.size());
  Hello h;
  h.rank = 2;
  h.world = 4;
  random_bytes(h.nonce.data(), h.nonce.size());
  const Digest mac = hello_mac("secret", c, h);
  CHECK(digests_equal(mac, hello_mac("secret", c, h)));
  CHECK_FALSE(digests_equal(mac, hello_mac("Secret", c, h)));
  CHECK_FALSE(digests_equal(mac, admit_mac("secret", c, h)));
  Challenge other = c;
  other.nonce[0] ^= 1;
  CHECK_FALSE(digests_equal(mac, hello_mac("secret", other, h)));  // a replay on another connection
  Hello moved = h;
  moved.rank = 3;
  CHECK_FALSE(digests_equal(mac, hello_mac("secret", c, moved)));
  moved = h;
  moved.world = 5;
  CHECK_FALSE(digests_equal(mac, hello_mac("secret", c, moved)));
  moved = h;
  moved.nonce[31] ^= 0x80;
  CHECK_FALSE(digests_equal(mac, hello_mac("secret", c, moved)));
}
