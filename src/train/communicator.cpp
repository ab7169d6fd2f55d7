// The environment (torchrun's variables), the rendezvous every backend shares, and the choice of
// the collective library (see communicator.h).
#include "train/communicator.h"

#include <chrono>
#include <cstdlib>

#include "common/env_switch.h"
#include "train/comm_backends.h"
#include "train/tcp_store.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;

StatusOr<int> env_int(const char* name, int lo, int hi, bool* present) {
  const char* v = env_value(name);
  *present = v && *v;
  if (!*present) return 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    return invalid_argument(std::string(name) + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
  return static_cast<int>(x);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string describe_ranks(const std::vector<int>& ranks) { return rank_list(ranks); }

StatusOr<DistConfig> dist_config_from_env(double timeout_s) {
  DistConfig c;
  c.timeout_s = timeout_s;
  bool has_rank = false, has_world = false, has_local = false, has_port = false;
  ASSIGN_OR_RETURN(int world, env_int("WORLD_SIZE", 1, 1 << 20, &has_world));
  ASSIGN_OR_RETURN(int rank, env_int("RANK", 0, 1 << 20, &has_rank));
  ASSIGN_OR_RETURN(int local, env_int("LOCAL_RANK", 0, 1 << 20, &has_local));
  ASSIGN_OR_RETURN(int port, env_int("MASTER_PORT", 1, 65535, &has_port));
  if (!has_rank && !has_world) return c;
  if (has_rank != has_world)
    return invalid_argument(std::string("RANK and WORLD_SIZE go together: ") + (has_rank ? "WORLD_SIZE" : "RANK") +
                            " is not set");
  if (rank >= world)
    return invalid_argument("RANK=" + std::to_string(rank) + " is not below WORLD_SIZE=" + std::to_string(world));
  c.rank = rank;
  c.world_size = world;
  c.local_rank = has_local ? local : rank;
  if (world > 1) {
    const char* addr = env_value("MASTER_ADDR");
    if (!addr || !*addr) return invalid_argument("MASTER_ADDR is not set: give rank 0's host name or address");
    if (!has_port) return invalid_argument("MASTER_PORT is not set: give the port rank 0 listens on (e.g. 29500)");
    c.master_addr = addr;
    c.master_port = port;
  }
  return c;
}

StatusOr<std::unique_ptr<Communicator>> create_communicator(const DistConfig& config) {
  if (config.backend != "gloo")
    return unsupported("communication backend '" + config.backend + "' is not built in; available: gloo");
  const auto t0 = Clock::now();
  auto left = [&] {
    return std::max(0.0, config.timeout_s - std::chrono::duration<double>(Clock::now() - t0).count());
  };
  std::unique_ptr<TcpStoreServer> server;
  if (config.rank == 0) {
    ASSIGN_OR_RETURN(server, TcpStoreServer::listen(config.master_port));
  }
  std::shared_ptr<TcpStoreClient> store;
  {
    ASSIGN_OR_RETURN(auto client, TcpStoreClient::connect(config.master_addr, config.master_port, config.rank, left()));
    store = std::move(client);
  }
  // Arrival: every rank publishes the world size it was given, then waits for the others.
  const std::string world = std::to_string(config.world_size);
  RETURN_IF_ERROR(store->set("ferry/arrived/" + std::to_string(config.rank), std::vector<char>(world.begin(), world.end())));
  std::vector<std::string> keys;
  for (int r = 0; r < config.world_size; ++r) keys.push_back("ferry/arrived/" + std::to_string(r));
  std::vector<std::string> missing;
  Status arrived = store->wait(keys, left(), &missing);
  if (!arrived.is_ok()) {
    if (missing.empty()) return arrived;
    std::vector<int> ranks;
    for (const auto& k : missing) ranks.push_back(std::stoi(k.substr(k.rfind('/') + 1)));
    const std::string where = config.rank == 0 ? "rank 0 listened on " + config.address() + " (port " +
                                                     std::to_string(config.master_port) + ")"
                                               : "rank " + std::to_string(config.rank) + " joined " + config.address();
    return invalid_argument(rank_list(ranks) + " never arrived at the rendezvous within " +
                            std::to_string(static_cast<int>(config.timeout_s)) + " s (world size " + world + "; " +
                            where + "): start the missing ranks with RANK, WORLD_SIZE=" + world + ", MASTER_ADDR=" +
                            config.master_addr + " and MASTER_PORT=" + std::to_string(config.master_port) +
                            ", or raise --dist-timeout");
  }
  for (int r = 0; r < config.world_size; ++r) {
    ASSIGN_OR_RETURN(auto v, store->get("ferry/arrived/" + std::to_string(r), left()));
    if (std::string(v.begin(), v.end()) != world)
      return invalid_argument("rank " + std::to_string(r) + " was started with WORLD_SIZE=" + std::string(v.begin(), v.end()) +
                              ", this rank (" + std::to_string(config.rank) + ") with " + world + ": give every rank the same");
  }
  return create_gloo_communicator(config, std::move(store), std::move(server), std::max(1.0, left()));
}

}  // namespace ferry
