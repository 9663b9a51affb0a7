#pragma once
// The job secret that admits a rank to an env-launched job's rendezvous (dist/rendezvous.h), and the
// HMAC-SHA256 that proves a process holds it without sending it (OpenSSL's libcrypto).
//
//   HALFGRAD_DIST_TOKEN=SECRET          the secret itself (every rank's environment must hold the same);
//   HALFGRAD_DIST_TOKEN_FILE=PATH       a file holding it (one trailing newline ignored), which must be a
//                                       regular file owned by this user and readable by nobody else
//                                       (mode 0600 or 0400), as ssh requires of a private key.
// Neither: no secret. Both, an empty secret, or a file that is missing, too open, owned by someone else
// or larger than 4 KiB: a RendezvousRefused naming the variable.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/error.h"

namespace hg::dist {

// A rendezvous that refused this process for a reason its user can fix (the secret, the addresses): the
// samples exit 2 on it, as on a bad flag. Timeouts and lost peers stay plain hg::Errors.
class RendezvousRefused : public InputError {
 public:
  using InputError::InputError;
};

std::optional<std::string> job_secret_from_env();

using Digest = std::array<uint8_t, 32>;
// HMAC-SHA256(key, message).
Digest hmac_sha256(std::string_view key, std::string_view message);
// Whether two digests are equal, in time independent of where they differ.
bool digests_equal(const Digest& a, const Digest& b);
// `n` bytes from the operating system's random generator (RAND_bytes); an hg::Error if it has none.
void random_bytes(uint8_t* out, size_t n);

}  // namespace hg::dist
