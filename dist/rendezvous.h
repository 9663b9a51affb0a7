#pragma once
// The rendezvous of an env-launched job (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, as torchrun sets
// them): how rank 0 admits the job's other ranks to the TCP transport (dist/tcp_transport.cpp), whose
// connection later carries the NCCL unique id and the host collectives, and nobody else.
//
// Rank 0 listens on MASTER_ADDR's address only (HALFGRAD_DIST_BIND=ADDR overrides it; 0.0.0.0 listens on
// every interface and says so) and handles all connections at once, each within a handshake deadline
// (HALFGRAD_DIST_HANDSHAKE_TIMEOUT seconds, default 10):
//   rank 0 -> peer   Challenge  magic, version, world size, whether a secret is required, nonce0 (32
//                               fresh random bytes per connection)
//   peer -> rank 0   Hello      magic, version, rank, world size, nonce1, mac1
//   rank 0 -> peer   Verdict    magic, status, mac0
// With a job secret (dist/job_secret.h) mac1 = HMAC-SHA256(secret, "halfgrad rendezvous hello" | nonce0 |
// nonce1 | rank | world) proves that the peer holds the secret without sending it, for this connection
// only (a hello recorded from another connection or job fails: its nonce0 differs), and mac0, the same
// over "halfgrad rendezvous admit", proves to the peer that rank 0 holds it too. Without one both are zero.
//
// A connection that fails the handshake -- closed, garbage, the wrong world size, a rank out of range or
// already joined, the wrong mac, nothing before its deadline -- is closed and logged in one line naming its
// address (an admitted rank is logged too), and rank 0 goes on waiting for the real ranks; only the overall
// deadline ends the rendezvous, with an error naming the ranks that never came. A rank that rank 0 refuses,
// or whose secret does not match rank 0's, gets a RendezvousRefused saying why. Without a secret, rank 0 of
// a job not bound to loopback warns once that any host reaching the port can join. Integers travel in host
// byte order (one architecture per job, as the collectives' payloads).
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist/bootstrap.h"
#include "dist/job_secret.h"
#include "dist/socket.h"

namespace hg::dist {

struct RendezvousOptions {
  std::string master_addr;   // MASTER_ADDR, as given
  int port = 0;              // MASTER_PORT
  std::string bind_address;  // the IPv4 address rank 0 listens on (dotted quad)
  std::optional<std::string> secret;
  std::chrono::milliseconds handshake_timeout{10000};
};

// From `process` (MASTER_ADDR, MASTER_PORT) and HALFGRAD_DIST_BIND, HALFGRAD_DIST_TOKEN(_FILE) and
// HALFGRAD_DIST_HANDSHAKE_TIMEOUT. A malformed variable or an unresolvable MASTER_ADDR is a RendezvousRefused
// naming it.
RendezvousOptions rendezvous_options(const ProcessInfo& process);

// Rank 0: listens, admits ranks 1 .. world - 1 and returns their connections (index r; [0] is empty).
std::vector<Socket> admit_ranks(const RendezvousOptions& options, int world, SocketClock::time_point deadline);

// Rank `rank` > 0: connects to rank 0 (retrying until it listens) and passes the handshake.
Socket join_rendezvous(const RendezvousOptions& options, int rank, int world, SocketClock::time_point deadline);

// The wire format, for the tests that play strangers.
namespace rendezvous_wire {

inline constexpr uint32_t kMagic = 0x48475256;  // "HGRV"
inline constexpr uint32_t kVersion = 1;
using Nonce = std::array<uint8_t, 32>;

struct Challenge {
  uint32_t magic = kMagic, version = kVersion, world = 0, secret_required = 0;
  Nonce nonce{};
};
struct Hello {
  uint32_t magic = kMagic, version = kVersion, rank = 0, world = 0;
  Nonce nonce{};
  Digest mac{};
};
enum class Status : uint32_t { admitted = 1, wrong_secret, wrong_world, bad_rank, rank_taken };
struct Verdict {
  uint32_t magic = kMagic, status = 0;
  Digest mac{};
};

// mac1 and mac0 of a challenge and the hello that answers it.
Digest hello_mac(const std::string& secret, const Challenge& challenge, const Hello& hello);
Digest admit_mac(const std::string& secret, const Challenge& challenge, const Hello& hello);

}  // namespace rendezvous_wire

}  // namespace hg::dist
