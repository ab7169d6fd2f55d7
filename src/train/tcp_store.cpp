// The rendezvous store (see tcp_store.h). Frames: a 4-byte big-endian length, then the payload:
// one op byte and length-prefixed strings. The server is one thread polling its sockets.
#include "train/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMaxFrame = 64u << 20;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void put_u32(std::string* s, uint32_t v) {
  const uint32_t n = htonl(v);
  s->append(reinterpret_cast<const char*>(&n), 4);
}
void put_str(std::string* s, const std::string& v) {
  put_u32(s, static_cast<uint32_t>(v.size()));
  s->append(v);
}
bool get_u32(const std::string& s, size_t* pos, uint32_t* v) {
  if (*pos + 4 > s.size()) return false;
  uint32_t n;
  std::memcpy(&n, s.data() + *pos, 4);
  *v = ntohl(n);
  *pos += 4;
  return true;
}
bool get_str(const std::string& s, size_t* pos, std::string* v) {
  uint32_t n;
  if (!get_u32(s, pos, &n) || *pos + n > s.size()) return false;
  v->assign(s.data() + *pos, n);
  *pos += n;
  return true;
}

bool write_all(int fd, const std::string& frame) {
  size_t off = 0;
  while (off < frame.size()) {
    const ssize_t w = ::send(fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

std::string framed(const std::string& payload) {
  std::string f;
  put_u32(&f, static_cast<uint32_t>(payload.size()));
  return f + payload;
}

// Reads one frame on a blocking socket (SO_RCVTIMEO bounds each read).
bool read_frame(int fd, std::string* payload) {
  auto read_n = [fd](char* p, size_t n) {
    size_t off = 0;
    while (off < n) {
      const ssize_t r = ::recv(fd, p + off, n - off, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      off += static_cast<size_t>(r);
    }
    return true;
  };
  uint32_t n;
  if (!read_n(reinterpret_cast<char*>(&n), 4)) return false;
  n = ntohl(n);
  if (n > kMaxFrame) return false;
  payload->resize(n);
  return read_n(payload->data(), n);
}

}  // namespace

// ---- server ----

struct TcpStoreServer::State {
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::thread thread;
  struct Client {
    int fd;
    int rank = -1;
    bool said_goodbye = false;
    std::string in;
  };
  std::vector<Client> clients;
  std::map<std::string, std::string> kv;
  std::set<int> lost;
};

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::listen(int port) {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool v6 = fd >= 0;
  const int lfd = v6 ? fd : ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return invalid_argument(std::string("rendezvous: cannot create a socket: ") + std::strerror(errno));
  const int one = 1, zero = 0;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    ::setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 clients too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || ::listen(lfd, 128) != 0) {
    const std::string why = std::strerror(errno);
    ::close(lfd);
    return invalid_argument("rank 0 cannot host the rendezvous on port " + std::to_string(port) + " (" + why +
                            "): another job may be using it; choose another MASTER_PORT");
  }
  auto s = std::unique_ptr<TcpStoreServer>(new TcpStoreServer());
  s->state_ = std::make_unique<State>();
  s->state_->listen_fd = lfd;
  s->port_ = port;
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (port == 0 && ::getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &len) == 0)  // tests: any free port
    s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (::pipe2(s->state_->wake, O_CLOEXEC) != 0) return invalid_argument("rendezvous: pipe failed");
  s->state_->thread = std::thread([p = s.get()] { p->serve(); });
  return s;
}

TcpStoreServer::~TcpStoreServer() {
  if (!state_) return;
  const char c = 'q';
  (void)!::write(state_->wake[1], &c, 1);
  if (state_->thread.joinable()) state_->thread.join();
  for (auto& c2 : state_->clients) ::close(c2.fd);
  ::close(state_->listen_fd);
  ::close(state_->wake[0]);
  ::close(state_->wake[1]);
}

void TcpStoreServer::serve() {
  State& st = *state_;
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({st.wake[0], POLLIN, 0});
    fds.push_back({st.listen_fd, POLLIN, 0});
    for (const auto& c : st.clients) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) return;
    const size_t polled = fds.size() - 2;  // clients accepted below were not polled this round
    if (fds[1].revents & POLLIN) {
      const int cfd = ::accept4(st.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (cfd >= 0) {
        const int one = 1;
        ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        st.clients.push_back(State::Client{cfd, -1, false, {}});
      }
    }
    std::vector<size_t> closed;
    for (size_t i = 0; i < polled; ++i) {
      if (!fds[i + 2].revents) continue;
      State::Client& c = st.clients[i];
      char buf[65536];
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        closed.push_back(i);
        continue;
      }
      c.in.append(buf, static_cast<size_t>(r));
      for (;;) {  // every complete frame
        size_t pos = 0;
        uint32_t n;
        if (!get_u32(c.in, &pos, &n) || c.in.size() < 4 + static_cast<size_t>(n)) break;
        const std::string p = c.in.substr(4, n);
        c.in.erase(0, 4 + static_cast<size_t>(n));
        std::string reply;
        size_t q = 1;
        const char op = p.empty() ? '?' : p[0];
        std::string key, value;
        if (op == 'H') {
          uint32_t rank = 0;
          get_u32(p, &q, &rank);
          bool dup = false;
          for (const auto& o : st.clients) dup = dup || (o.rank == static_cast<int>(rank) && !o.said_goodbye);
          if (dup) {
            reply = "E";
            put_str(&reply, "rank " + std::to_string(rank) + " is already connected: two processes were given RANK=" +
                                std::to_string(rank));
          } else {
            c.rank = static_cast<int>(rank);
            st.lost.erase(c.rank);
            reply = "O";
          }
        } else if (op == 'S' && get_str(p, &q, &key) && get_str(p, &q, &value)) {
          st.kv[key] = value;
          reply = "O";
        } else if (op == 'G' && get_str(p, &q, &key)) {
          auto it = st.kv.find(key);
          reply = it == st.kv.end() ? std::string("N") : std::string("V");
          if (it != st.kv.end()) put_str(&reply, it->second);
        } else if (op == 'L') {
          reply = "O";
          put_u32(&reply, static_cast<uint32_t>(st.lost.size()));
          for (int r2 : st.lost) put_u32(&reply, static_cast<uint32_t>(r2));
        } else if (op == 'B') {
          c.said_goodbye = true;
          reply = "O";
        } else {
          reply = std::string("E");
          put_str(&reply, "malformed request");
        }
        if (!write_all(c.fd, framed(reply))) {
          closed.push_back(i);
          break;
        }
      }
    }
    for (auto it = closed.rbegin(); it != closed.rend(); ++it) {
      State::Client& c = st.clients[*it];
      if (c.rank >= 0 && !c.said_goodbye) st.lost.insert(c.rank);
      ::close(c.fd);
      st.clients.erase(st.clients.begin() + static_cast<std::ptrdiff_t>(*it));
    }
  }
}

// ---- client ----

StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::connect(const std::string& host, int port, int rank,
                                                                   double timeout_s) {
  const auto t0 = Clock::now();
  const std::string where = host + ":" + std::to_string(port);
  std::string why = "no attempt";
  for (;;) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
      why = std::string("cannot resolve '") + host + "': " + gai_strerror(gai);
    } else {
      for (addrinfo* a = res; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
          why = std::strerror(errno);
          ::close(fd);
          continue;
        }
        ::freeaddrinfo(res);
        res = nullptr;
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        auto c = std::unique_ptr<TcpStoreClient>(new TcpStoreClient());
        c->fd_ = fd;
        c->host_ = host;
        c->port_ = port;
        sockaddr_storage local{};
        socklen_t len = sizeof local;
        char ip[INET6_ADDRSTRLEN] = {0};
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
          if (local.ss_family == AF_INET)
            ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, ip, sizeof ip);
          else
            ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, ip, sizeof ip);
        }
        c->local_ip_ = ip;
        if (c->local_ip_.rfind("::ffff:", 0) == 0) c->local_ip_ = c->local_ip_.substr(7);
        std::string hello = "H";
        put_u32(&hello, static_cast<uint32_t>(rank));
        auto reply = c->request(hello);
        if (!reply.is_ok()) return reply.status();
        return c;
      }
      if (res) ::freeaddrinfo(res);
    }
    if (seconds_since(t0) >= timeout_s)
      return invalid_argument("rank " + std::to_string(rank) + " could not reach rank 0's rendezvous at " + where +
                              " within " + std::to_string(static_cast<int>(timeout_s)) + " s (" + why +
                              "): start rank 0, check MASTER_ADDR/MASTER_PORT and the firewall, or raise --dist-timeout");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::string> TcpStoreClient::request(const std::string& payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return invalid_argument("the rendezvous at " + address() + " is gone: rank 0 (its host) was lost");
  timeval tv{30, 0};  // the server answers at once; a silent one is gone
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string reply;
  if (!write_all(fd_, framed(payload)) || !read_frame(fd_, &reply) || reply.empty()) {
    ::close(fd_);
    fd_ = -1;
    return invalid_argument("lost the connection to the rendezvous at " + address() + ": rank 0 (its host) was lost");
  }
  if (reply[0] == 'E') {
    size_t q = 1;
    std::string msg;
    get_str(reply, &q, &msg);
    return invalid_argument("rendezvous at " + address() + ": " + msg);
  }
  return reply;
}

Status TcpStoreClient::set(const std::string& key, const std::vector<char>& value) {
  std::string p = "S";
  put_str(&p, key);
  put_str(&p, std::string(value.begin(), value.end()));
  auto r = request(p);
  return r.status();
}

StatusOr<std::optional<std::vector<char>>> TcpStoreClient::try_get(const std::string& key) {
  std::string p = "G";
  put_str(&p, key);
  auto answer = request(p);
  if (!answer.is_ok()) return answer.status();
  const std::string& reply = answer.value();
  if (reply.empty() || reply[0] != 'V') return std::optional<std::vector<char>>();
  size_t q = 1;
  std::string v;
  get_str(reply, &q, &v);
  return std::optional<std::vector<char>>(std::vector<char>(v.begin(), v.end()));
}

Status TcpStoreClient::wait(const std::vector<std::string>& keys, double timeout_s, std::vector<std::string>* missing) {
  const auto t0 = Clock::now();
  std::vector<std::string> left = keys;
  for (;;) {
    std::vector<std::string> still;
    for (const auto& k : left) {
      ASSIGN_OR_RETURN(auto v, try_get(k));
      if (!v) still.push_back(k);
    }
    left = std::move(still);
    if (left.empty()) return Status::ok();
    if (seconds_since(t0) >= timeout_s) {
      if (missing) *missing = left;
      return invalid_argument("rendezvous at " + address() + ": timed out after " +
                              std::to_string(static_cast<int>(timeout_s)) + " s waiting for '" + left[0] + "'");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

StatusOr<std::vector<char>> TcpStoreClient::get(const std::string& key, double timeout_s) {
  RETURN_IF_ERROR(wait({key}, timeout_s));
  ASSIGN_OR_RETURN(auto v, try_get(key));
  if (!v) return invalid_argument("rendezvous at " + address() + ": '" + key + "' vanished");
  return *v;
}

StatusOr<std::vector<int>> TcpStoreClient::lost_ranks() {
  ASSIGN_OR_RETURN(std::string reply, request("L"));
  size_t q = 1;
  uint32_t n = 0, r = 0;
  get_u32(reply, &q, &n);
  std::vector<int> out;
  for (uint32_t i = 0; i < n && get_u32(reply, &q, &r); ++i) out.push_back(static_cast<int>(r));
  return out;
}

void TcpStoreClient::goodbye() { (void)request("B"); }

}  // namespace ferry
