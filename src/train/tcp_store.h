// The rendezvous key-value store, as torchrun's TCPStore: rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT, every rank (rank 0 too) connects and says which rank it is. Ranks
// publish their arrival and the collective library's addresses through it. Its connections
// double as a liveness signal: a rank whose connection drops without a goodbye is "lost", which
// lets the survivors name the rank that died when a collective fails.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ferry {

class TcpStoreServer {
 public:
  /// Listens on every interface at `port` (0: any free port, see port()); the error names the
  /// port and what to try.
  static StatusOr<std::unique_ptr<TcpStoreServer>> listen(int port);
  ~TcpStoreServer();
  int port() const { return port_; }

 private:
  TcpStoreServer() = default;
  void serve();
  struct State;
  std::unique_ptr<State> state_;
  int port_ = 0;
};

class TcpStoreClient {
 public:
  /// Connects to host:port as `rank`, retrying until `timeout_s` has passed (the server may not
  /// be up yet). The error names the address and the last reason.
  static StatusOr<std::unique_ptr<TcpStoreClient>> connect(const std::string& host, int port, int rank, double timeout_s);
  ~TcpStoreClient();

  Status set(const std::string& key, const std::vector<char>& value);
  /// The value, or nullopt while the key is not set.
  StatusOr<std::optional<std::vector<char>>> try_get(const std::string& key);
  /// Waits until every key is set. On timeout the status is an error and *missing (optional)
  /// receives the keys still absent.
  Status wait(const std::vector<std::string>& keys, double timeout_s, std::vector<std::string>* missing = nullptr);
  /// The value of `key`, waiting for it up to timeout_s.
  StatusOr<std::vector<char>> get(const std::string& key, double timeout_s);
  /// Ranks whose connection dropped without a goodbye. An error when the server itself is gone.
  StatusOr<std::vector<int>> lost_ranks();
  /// Tells the server this rank leaves on purpose (it is then never reported lost).
  void goodbye();
  /// The local address of the connection to the server: the interface peers can reach us on.
  const std::string& local_ip() const { return local_ip_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  TcpStoreClient() = default;
  /// One request, one reply (serialized: the store is used from several threads).
  StatusOr<std::string> request(const std::string& payload);
  std::mutex mu_;
  int fd_ = -1;
  std::string host_;
  int port_ = 0;
  std::string local_ip_;
};

}  // namespace ferry
