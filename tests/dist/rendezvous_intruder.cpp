// A stranger at an env-launched job's rendezvous, for tests/dist/check_rendezvous.sh. It connects to
// 127.0.0.1:PORT and misbehaves one way:
//   scan N            connects and closes N times
//   silent SECONDS    connects, sends nothing, and keeps the connection SECONDS
//   garbage           reads the challenge and answers 80 bytes of junk
//   claim RANK        answers a well-formed hello for RANK of WORLD_SIZE with no job secret (a zero mac)
//   wrong-world RANK  the same with WORLD_SIZE + 1
//   replay RANK       with the job's own secret (HALFGRAD_DIST_TOKEN), records the hello it would send on
//                     one connection and sends it on a second one: a replayed handshake
// and prints rank 0's verdict status when one comes ("verdict N", "no verdict"). Exit 0 unless rank 0 admitted
// it (exit 1) or it could not connect at all (exit 3).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "dist/rendezvous.h"

namespace wire = hg::dist::rendezvous_wire;

namespace {

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    std::perror("rendezvous_intruder: connect");
    std::exit(3);
  }
  return fd;
}

bool read_exactly(int fd, void* out, size_t n) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 10000) <= 0) return false;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= size_t(got);
  }
  return true;
}

wire::Challenge challenge_of(int fd) {
  wire::Challenge c;
  if (!read_exactly(fd, &c, sizeof c)) {
    std::fprintf(stderr, "rendezvous_intruder: no challenge\n");
    std::exit(3);
  }
  return c;
}

// Sends `hello` and reports rank 0's verdict; 1 if it admitted the stranger.
int send_and_report(int fd, const wire::Hello& hello) {
  ::send(fd, &hello, sizeof hello, MSG_NOSIGNAL);
  wire::Verdict verdict;
  if (!read_exactly(fd, &verdict, sizeof verdict)) {
    std::printf("no verdict\n");
    ::close(fd);
    return 0;
  }
  std::printf("verdict %u\n", verdict.status);
  ::close(fd);
  return verdict.status == uint32_t(wire::Status::admitted) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: rendezvous_intruder PORT scan N|silent SECONDS|garbage|claim RANK|wrong-world RANK|"
                 "replay RANK\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string mode = argv[2];
  const int arg = argc > 3 ? std::atoi(argv[3]) : 0;
  const char* world_text = std::getenv("WORLD_SIZE");
  const uint32_t world = world_text ? uint32_t(std::atoi(world_text)) : 2;
  if (mode == "scan") {
    for (int i = 0; i < arg; ++i) ::close(connect_to(port));
    return 0;
  }
  if (mode == "silent") {
    const int fd = connect_to(port);
    std::this_thread::sleep_for(std::chrono::seconds(arg));
    ::close(fd);
    return 0;
  }
  const int fd = connect_to(port);
  const wire::Challenge challenge = challenge_of(fd);
  if (mode == "garbage") {
    char junk[80];
    for (size_t i = 0; i < sizeof junk; ++i) junk[i] = char(0x5a ^ i);
    ::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
    char verdict[sizeof(wire::Verdict)];
    std::printf("%s\n", read_exactly(fd, verdict, sizeof verdict) ? "verdict" : "no verdict");
    ::close(fd);
    return 0;
  }
  wire::Hello hello;
  hello.rank = uint32_t(arg);
  hello.world = mode == "wrong-world" ? world + 1 : world;
  if (mode == "claim" || mode == "wrong-world") return send_and_report(fd, hello);
  if (mode == "replay") {
    const char* secret = std::getenv("HALFGRAD_DIST_TOKEN");
    if (!secret) return 2;
    hello.mac = wire::hello_mac(secret, challenge, hello);  // valid for the first connection's challenge only
    ::close(fd);
    const int second = connect_to(port);
    challenge_of(second);
    return send_and_report(second, hello);
  }
  std::fprintf(stderr, "rendezvous_intruder: unknown mode %s\n", mode.c_str());
  return 2;
}
