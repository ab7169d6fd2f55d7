// The collective libraries behind Communicator (communicator.h), each created after the shared
// rendezvous. One file per library includes that library's headers: gloo_communicator.cpp.
#pragma once

#include <memory>
#include <vector>

#include "train/communicator.h"

namespace ferry {

class TcpStoreClient;
class TcpStoreServer;

/// Gloo over TCP. Takes the rendezvous store (for Gloo's address exchange and to name lost ranks)
/// and, on rank 0, the server hosting it (kept alive as long as the communicator).
StatusOr<std::unique_ptr<Communicator>> create_gloo_communicator(const DistConfig& config,
                                                                 std::shared_ptr<TcpStoreClient> store,
                                                                 std::unique_ptr<TcpStoreServer> server,
                                                                 double connect_timeout_s);

/// "rank 1" / "ranks 1, 3"
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace ferry
