#pragma once
// TCP sockets for the host transport and its rendezvous (dist/tcp_transport.cpp, dist/rendezvous.cpp): an
// owning file descriptor, and sends and receives that wait with a deadline. Every wait that runs out or
// finds the peer gone throws an hg::Error naming `peer`.
#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

namespace hg::dist {

using SocketClock = std::chrono::steady_clock;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }
  void close();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// Waits until `fd` is ready for `events` (POLLIN / POLLOUT).
void wait_ready(int fd, short events, SocketClock::time_point deadline, const std::string& peer);
void send_all(int fd, const void* data, size_t nbytes, SocketClock::time_point deadline, const std::string& peer);
void recv_all(int fd, void* data, size_t nbytes, SocketClock::time_point deadline, const std::string& peer);

// "a.b.c.d:port" of a connected socket's peer ("an unknown peer" when it cannot be read).
std::string peer_address(int fd);

}  // namespace hg::dist
