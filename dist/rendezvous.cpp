#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <thread>

#include "kernels/error.h"

namespace hg::dist {

namespace wire = rendezvous_wire;

namespace {

constexpr size_t kMostPending = 64;  // connections in their handshake at once; more are closed at once

#define REFUSE(...) throw RendezvousRefused(::hg::detail::concat("[dist] ", __VA_ARGS__))

void log_line(const std::string& text) { std::fprintf(stderr, "[dist] rendezvous: %s\n", text.c_str()); }

std::string seconds_text(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", double(t.count()) / 1000.0);
  return text;
}

std::chrono::milliseconds handshake_timeout_from_env() {
  const char* text = std::getenv("HALFGRAD_DIST_HANDSHAKE_TIMEOUT");
  if (!text || !*text) return std::chrono::seconds(10);
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (!end || *end != '\0' || !(seconds > 0) || seconds > 3600)
    REFUSE("HALFGRAD_DIST_HANDSHAKE_TIMEOUT='", text, "' is not a number of seconds in (0, 3600]");
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

// The IPv4 address `host` resolves to, dotted.
std::string resolve_ipv4(const std::string& host, const char* variable) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (status != 0 || !found) REFUSE("cannot resolve ", variable, "='", host, "': ", ::gai_strerror(status));
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  ::freeaddrinfo(found);
  return text;
}

bool is_loopback(const std::string& dotted) { return dotted.rfind("127.", 0) == 0; }

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK);
}

std::string mac_message(const char* purpose, const wire::Challenge& c, const wire::Hello& h) {
  std::string m(purpose);
  m.append(reinterpret_cast<const char*>(c.nonce.data()), c.nonce.size());
  m.append(reinterpret_cast<const char*>(h.nonce.data()), h.nonce.size());
  m.append(reinterpret_cast<const char*>(&h.rank), sizeof h.rank);
  m.append(reinterpret_cast<const char*>(&h.world), sizeof h.world);
  return m;
}

// A connection in its handshake at rank 0.
struct Pending {
  Socket socket;
  std::string address;
  SocketClock::time_point deadline;
  wire::Challenge challenge;
  wire::Hello hello;
  size_t received = 0;
};

class Admission {
 public:
  Admission(const RendezvousOptions& options, int world) : options_(options), world_(world), ranks_(size_t(world)) {}

  std::vector<Socket> run(SocketClock::time_point deadline) {
    open_listener();
    while (joined_ < world_ - 1) {
      const auto now = SocketClock::now();
      if (now >= deadline) fail_missing_ranks();
      expire(now);
      std::vector<pollfd> fds{{listener_.fd(), POLLIN, 0}};
      auto wake = deadline;
      for (const Pending& p : pending_) {
        fds.push_back({p.socket.fd(), POLLIN, 0});
        wake = std::min(wake, p.deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
      const int ready = ::poll(fds.data(), fds.size(), int(std::clamp<int64_t>(wait, 1, 1000)));
      HG_CHECK(ready >= 0 || errno == EINTR, "[dist] rendezvous: poll failed: ", std::strerror(errno));
      if (ready <= 0) continue;
      size_t index = 1;
      for (auto it = pending_.begin(); it != pending_.end(); ++index) {
        const bool readable = fds[index].revents != 0;
        it = readable && !advance(*it) ? pending_.erase(it) : std::next(it);
      }
      if (fds[0].revents & POLLIN) accept_all();
    }
    for (Pending& p : pending_) refuse(p, "was still in its handshake when every rank had joined");
    return std::move(ranks_);
  }

 private:
  void open_listener() {
    listener_ = Socket(::socket(AF_INET, SOCK_STREAM, 0));
    HG_CHECK(listener_.fd() >= 0, "[dist] tcp: socket() failed: ", std::strerror(errno));
    const int one = 1;
    ::setsockopt(listener_.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(options_.port));
    ::inet_pton(AF_INET, options_.bind_address.c_str(), &address.sin_addr);
    if (::bind(listener_.fd(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      const int error = errno;
      if (error == EADDRNOTAVAIL)
        REFUSE("rank 0 cannot listen on ", options_.bind_address, " (MASTER_ADDR='", options_.master_addr,
               "'): ", std::strerror(error),
               "; MASTER_ADDR must be an address of rank 0's own host (or set "
               "HALFGRAD_DIST_BIND=0.0.0.0 to listen on every interface)");
      HG_FAIL("[dist] tcp: rank 0 cannot listen on ", options_.bind_address, ":", options_.port,
              " (MASTER_PORT): ", std::strerror(error));
    }
    HG_CHECK(::listen(listener_.fd(), 128) == 0, "[dist] tcp: listen() failed: ", std::strerror(errno));
    set_nonblocking(listener_.fd(), true);
    const bool everywhere = options_.bind_address == "0.0.0.0";
    log_line("rank 0 listens on " + options_.bind_address + ":" + std::to_string(options_.port) +
             (everywhere ? " (every interface: HALFGRAD_DIST_BIND=0.0.0.0)" : "") + " for " +
             std::to_string(world_ - 1) + " rank(s), " + (options_.secret ? "with" : "without") + " a job secret");
    if (!options_.secret && !is_loopback(options_.bind_address))
      log_line("warning: no HALFGRAD_DIST_TOKEN: any host that can reach port " + std::to_string(options_.port) +
               " can join this job as a rank and read its gradients (docs/distributed.md#security)");
  }

  void accept_all() {
    for (;;) {
      Socket socket(::accept(listener_.fd(), nullptr, nullptr));
      if (socket.fd() < 0) {
        // EAGAIN: drained (or a connection reset before accept). Out of file descriptors, the listener
        // stays readable: wait a little rather than spin until a handshake ends and frees one.
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return;
      }
      Pending p;
      p.address = peer_address(socket.fd());
      p.socket = std::move(socket);
      if (pending_.size() >= kMostPending) {
        log_line("refused " + p.address + ": " + std::to_string(kMostPending) + " connections are in their handshake");
        continue;
      }
      set_nonblocking(p.socket.fd(), true);
      p.deadline = SocketClock::now() + options_.handshake_timeout;
      p.challenge.world = uint32_t(world_);
      p.challenge.secret_required = options_.secret ? 1 : 0;
      random_bytes(p.challenge.nonce.data(), p.challenge.nonce.size());
      const ssize_t sent = ::send(p.socket.fd(), &p.challenge, sizeof p.challenge, MSG_NOSIGNAL);
      if (sent != ssize_t(sizeof p.challenge)) {
        log_line("refused " + p.address + ": closed before its challenge was sent");
        continue;
      }
      pending_.push_back(std::move(p));
    }
  }

  // Reads what `p` sent; false once it is done with (admitted or refused).
  bool advance(Pending& p) {
    auto* bytes = reinterpret_cast<char*>(&p.hello);
    const ssize_t got = ::recv(p.socket.fd(), bytes + p.received, sizeof p.hello - p.received, 0);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (got <= 0)
      return refuse(p, p.received == 0 ? "closed the connection before its hello (a port scan?)"
                                       : "closed the connection in the middle of its hello");
    p.received += size_t(got);
    if (p.received >= 8 && (p.hello.magic != wire::kMagic || p.hello.version != wire::kVersion))
      return refuse(
          p, "sent bytes that are not a halfgrad rendezvous hello (version " + std::to_string(wire::kVersion) + ")");
    if (p.received < sizeof p.hello) return true;
    return judge(p);
  }

  bool judge(Pending& p) {
    const wire::Hello& h = p.hello;
    const int r = int(h.rank);
    if (int64_t(h.world) != world_)
      return refuse(
          p, "says the job has " + std::to_string(h.world) + " ranks; WORLD_SIZE here is " + std::to_string(world_),
          wire::Status::wrong_world);
    if (r < 1 || r >= world_)
      return refuse(p, "claims rank " + std::to_string(h.rank) + "; expected 1.." + std::to_string(world_ - 1),
                    wire::Status::bad_rank);
    if (options_.secret && !digests_equal(h.mac, wire::hello_mac(*options_.secret, p.challenge, h)))
      return refuse(p,
                    "claims rank " + std::to_string(r) +
                        " without the job secret (a wrong token, or a hello "
                        "recorded from another connection)",
                    wire::Status::wrong_secret);
    if (ranks_[size_t(r)].fd() >= 0)
      return refuse(p, "claims rank " + std::to_string(r) + ", which has already joined", wire::Status::rank_taken);
    wire::Verdict verdict;
    verdict.status = uint32_t(wire::Status::admitted);
    if (options_.secret) verdict.mac = wire::admit_mac(*options_.secret, p.challenge, h);
    set_nonblocking(p.socket.fd(), false);
    try {
      send_all(p.socket.fd(), &verdict, sizeof verdict, p.deadline, "rank " + std::to_string(r));
    } catch (const Error&) {
      return refuse(p, "closed the connection before it was admitted");
    }
    const int one = 1;
    ::setsockopt(p.socket.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    log_line("admitted rank " + std::to_string(r) + " from " + p.address);
    ranks_[size_t(r)] = std::move(p.socket);
    ++joined_;
    return false;
  }

  // Closes `p` (telling it `status` when it got that far) and logs why; false, for advance.
  bool refuse(Pending& p, const std::string& why, std::optional<wire::Status> status = std::nullopt) {
    if (status) {
      wire::Verdict verdict;
      verdict.status = uint32_t(*status);
      ::send(p.socket.fd(), &verdict, sizeof verdict, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    log_line("refused " + p.address + ": it " + why);
    ++refused_;
    p.socket.close();
    return false;
  }

  void expire(SocketClock::time_point now) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (now < it->deadline) {
        ++it;
        continue;
      }
      refuse(*it, "sent no complete hello within " + seconds_text(options_.handshake_timeout) +
                      " (HALFGRAD_DIST_HANDSHAKE_TIMEOUT)");
      it = pending_.erase(it);
    }
  }

  [[noreturn]] void fail_missing_ranks() {
    std::string missing;
    for (int r = 1; r < world_; ++r)
      if (ranks_[size_t(r)].fd() < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    HG_FAIL("[dist] rendezvous: rank(s) ", missing, " of ", world_, " never joined rank 0 at ", options_.bind_address,
            ":", options_.port, " (", refused_,
            " connection(s) refused, each logged above); are they running, with the same MASTER_ADDR, "
            "MASTER_PORT, WORLD_SIZE and job secret?");
  }

  const RendezvousOptions& options_;
  int world_;
  Socket listener_;
  std::list<Pending> pending_;
  std::vector<Socket> ranks_;
  int joined_ = 0;
  int64_t refused_ = 0;
};

Socket connect_with_retries(const RendezvousOptions& options, int rank, SocketClock::time_point deadline) {
  const std::string address = options.master_addr + ":" + std::to_string(options.port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options.port);
  const int status = ::getaddrinfo(options.master_addr.c_str(), port.c_str(), &hints, &found);
  if (status != 0 || !found) REFUSE("cannot resolve MASTER_ADDR='", options.master_addr, "': ", ::gai_strerror(status));
  for (;;) {  // rank 0 may not be listening yet
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(s.fd(), found->ai_addr, found->ai_addrlen) == 0) {
      ::freeaddrinfo(found);
      return s;
    }
    if (SocketClock::now() > deadline) {
      ::freeaddrinfo(found);
      HG_FAIL("[dist] tcp: rank ", rank, " could not connect to rank 0 at ", address, ": ", std::strerror(errno));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

RendezvousOptions rendezvous_options(const ProcessInfo& process) {
  RendezvousOptions o;
  o.master_addr = process.master_addr;
  o.port = process.master_port;
  o.secret = job_secret_from_env();
  o.handshake_timeout = handshake_timeout_from_env();
  if (const char* bind = std::getenv("HALFGRAD_DIST_BIND"); bind && *bind) {
    in_addr parsed{};
    if (::inet_pton(AF_INET, bind, &parsed) != 1)
      REFUSE("HALFGRAD_DIST_BIND='", bind, "' is not an IPv4 address; expected one of rank 0's (0.0.0.0: all)");
    o.bind_address = bind;
  } else if (process.rank == 0) {
    o.bind_address = resolve_ipv4(process.master_addr, "MASTER_ADDR");
  }
  return o;
}

std::vector<Socket> admit_ranks(const RendezvousOptions& options, int world, SocketClock::time_point deadline) {
  return Admission(options, world).run(deadline);
}

Socket join_rendezvous(const RendezvousOptions& options, int rank, int world, SocketClock::time_point deadline) {
  const std::string root = "rank 0 at " + options.master_addr + ":" + std::to_string(options.port);
  Socket s = connect_with_retries(options, rank, deadline);
  wire::Challenge challenge;
  recv_all(s.fd(), &challenge, sizeof challenge, deadline, root);
  HG_CHECK(challenge.magic == wire::kMagic, "[dist] rendezvous: ", root,
           " is not a halfgrad rank 0 (MASTER_ADDR and "
           "MASTER_PORT name another program)");
  HG_CHECK(challenge.version == wire::kVersion, "[dist] rendezvous: ", root, " speaks rendezvous version ",
           challenge.version, ", this rank ", wire::kVersion, "; run the same halfgrad on every rank");
  if (challenge.secret_required && !options.secret)
    REFUSE("rendezvous: ", root,
           " requires the job secret and this rank has none; set HALFGRAD_DIST_TOKEN or "
           "HALFGRAD_DIST_TOKEN_FILE to rank 0's");
  if (!challenge.secret_required && options.secret)
    REFUSE("rendezvous: this rank has a job secret but ", root,
           " asks for none: it is not this job's rank 0, or "
           "it was started without HALFGRAD_DIST_TOKEN");
  wire::Hello hello;
  hello.rank = uint32_t(rank);
  hello.world = uint32_t(world);
  random_bytes(hello.nonce.data(), hello.nonce.size());
  if (options.secret) hello.mac = wire::hello_mac(*options.secret, challenge, hello);
  send_all(s.fd(), &hello, sizeof hello, deadline, root);
  wire::Verdict verdict;
  recv_all(s.fd(), &verdict, sizeof verdict, deadline, root);
  HG_CHECK(verdict.magic == wire::kMagic, "[dist] rendezvous: ", root, " answered with garbage");
  switch (wire::Status(verdict.status)) {
    case wire::Status::admitted:
      break;
    case wire::Status::wrong_secret:
      REFUSE("rendezvous: ", root,
             " refused this rank's job secret: HALFGRAD_DIST_TOKEN (or the file of "
             "HALFGRAD_DIST_TOKEN_FILE) differs from rank 0's");
    case wire::Status::wrong_world:
      REFUSE("rendezvous: ", root, " refused WORLD_SIZE=", world, ": rank 0's differs");
    case wire::Status::bad_rank:
      REFUSE("rendezvous: ", root, " refused RANK=", rank, " of WORLD_SIZE=", world);
    case wire::Status::rank_taken:
      REFUSE("rendezvous: ", root, " already admitted a rank ", rank, ": two processes have RANK=", rank);
    default:
      HG_FAIL("[dist] rendezvous: ", root, " answered with unknown status ", verdict.status);
  }
  if (options.secret && !digests_equal(verdict.mac, wire::admit_mac(*options.secret, challenge, hello)))
    REFUSE("rendezvous: ", root,
           " admitted this rank without proving it holds the job secret: it is not this "
           "job's rank 0");
  const int one = 1;
  ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return s;
}

namespace rendezvous_wire {

Digest hello_mac(const std::string& secret, const Challenge& challenge, const Hello& hello) {
  return hmac_sha256(secret, mac_message("halfgrad rendezvous hello", challenge, hello));
}

Digest admit_mac(const std::string& secret, const Challenge& challenge, const Hello& hello) {
  return hmac_sha256(secret, mac_message("halfgrad rendezvous admit", challenge, hello));
}

}  // namespace rendezvous_wire

}  // namespace hg::dist
