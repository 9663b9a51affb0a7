#include "dist/socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "kernels/error.h"

namespace hg::dist {

Socket& Socket::operator=(Socket&& other) noexcept {
  close();
  fd_ = std::exchange(other.fd_, -1);
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void wait_ready(int fd, short events, SocketClock::time_point deadline, const std::string& peer) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SocketClock::now()).count();
    HG_CHECK(left > 0, "[dist] tcp: timed out waiting for ", peer);
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, int(std::min<int64_t>(left, 1000)));
    if (ready > 0) return;
    HG_CHECK(ready == 0 || errno == EINTR, "[dist] tcp: poll on the connection to ", peer,
             " failed: ", std::strerror(errno));
  }
}

void send_all(int fd, const void* data, size_t nbytes, SocketClock::time_point deadline, const std::string& peer) {
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    wait_ready(fd, POLLOUT, deadline, peer);
    const ssize_t sent = ::send(fd, p, nbytes, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    HG_CHECK(sent > 0, "[dist] tcp: ", peer,
             " closed its connection (the process exited or was killed): ", std::strerror(errno));
    p += sent;
    nbytes -= size_t(sent);
  }
}

void recv_all(int fd, void* data, size_t nbytes, SocketClock::time_point deadline, const std::string& peer) {
  char* p = static_cast<char*>(data);
  while (nbytes > 0) {
    wait_ready(fd, POLLIN, deadline, peer);
    const ssize_t got = ::recv(fd, p, nbytes, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    HG_CHECK(got > 0, "[dist] tcp: ", peer, " closed its connection (the process exited or was killed)");
    p += got;
    nbytes -= size_t(got);
  }
}

std::string peer_address(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  char text[INET_ADDRSTRLEN] = {};
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0 || address.sin_family != AF_INET ||
      !::inet_ntop(AF_INET, &address.sin_addr, text, sizeof text))
    return "an unknown peer";
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

}  // namespace hg::dist
