// Test harness for the collectives: two ranks as threads of this process, joined over Gloo
// through the rendezvous store on a free local port.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>

#include "train/communicator.h"
#include "train/tcp_store.h"

namespace ferry::testing {

/// A local port nothing listens on right now (the store server is opened and closed at once).
inline int free_local_port() {
  auto probe = TcpStoreServer::listen(0);
  EXPECT_TRUE(probe.is_ok()) << probe.status().to_string();
  if (!probe.is_ok()) return 0;
  return probe.value()->port();
}

/// Runs body(rank, communicator) on ranks 0 and 1 concurrently; status[r] is rank r's result
/// (the communicator's creation error when it could not join).
inline void run_two_ranks(const std::function<Status(int, Communicator&)>& body, Status status[2]) {
  const int port = free_local_port();
  auto rank = [&](int r) {
    DistConfig c;
    c.rank = r;
    c.world_size = 2;
    c.master_port = port;
    c.timeout_s = 20;
    auto comm = create_communicator(c);
    status[r] = comm.is_ok() ? body(r, *comm.value()) : comm.status();
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
}

}  // namespace ferry::testing
